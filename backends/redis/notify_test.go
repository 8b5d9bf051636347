package redis_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/roster-go/roster/backends/redis"
	"github.com/roster-go/roster/internal/logbuf"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry/driver"
)

// With the article's own notify-keyspace-events "Ex", Redis publishes
// expiries only: a keys-layout watch would learn of registrations and
// deregistrations by its poll alone. The driver says so — a warning when
// a watch starts, and a note (roster conformance prints the notes) —
// naming the missing flags and the delay. With "KEA" it says nothing.
// Not parallel: it swaps the default logger.
func TestPartialKeyspaceEventsReported(t *testing.T) {
	for flags, want := range map[string]string{
		"Ex":  `lacks $, g: registrations and updates (SET) and deregistrations (DEL) reach watchers only by the poll relist, within 2s`,
		"KEA": "",
	} {
		srv := redistest.Start(t, "--notify-keyspace-events", flags)
		var log logbuf.Buffer
		prev := slog.Default()
		slog.SetDefault(log.Logger())
		r := open(t, "redis://"+srv.Addr()+"?layout=keys&poll=2s")
		w, err := r.Watch(t.Context(), "s")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Next(t.Context()); err != nil {
			t.Fatal(err)
		}
		w.Close()
		slog.SetDefault(prev)
		var d driver.Driver
		r.As(&d)
		notes := strings.Join(d.(*redis.Driver).Notes(t.Context()), "\n")
		for what, got := range map[string]string{"log": log.String(), "notes": notes} {
			switch {
			case want == "" && strings.Contains(got, "lacks"):
				t.Errorf("%s: %s reports missing flags: %q", flags, what, got)
			case want != "" && !strings.Contains(got, want):
				t.Errorf("%s: %s = %q, want it to say %q", flags, what, got, want)
			}
		}
	}
}
