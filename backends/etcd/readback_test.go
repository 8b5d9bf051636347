package etcd

import (
	"strings"
	"testing"

	"github.com/roster-go/roster/internal/logbuf"
	"github.com/roster-go/roster/registry"
)

// A record written behind Roster's back with the server's own client — an
// address that does not parse, a weight past MaxWeight — is skipped by
// Lookup and Watch and reported in the log, never served.
func TestReadBackSkipsCorruptRecords(t *testing.T) {
	c := startServer(t)
	d := newTestDriver(t, c, 0)
	var log logbuf.Buffer
	r := registry.New(d, registry.WithLogger(log.Logger()))
	defer r.Close()
	good, err := r.Register(t.Context(), registry.Instance{Service: "svc", Address: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"/t/svc/plus-port": `{"address":"h:+80"}`,
		"/t/svc/heavy":     `{"address":"127.0.0.1:2","weight":70000}`,
		"/t/svc/ctl":       `{"address":"127.0.0.1:3","zone":"a\u001b[2Jb"}`,
	} {
		if _, err := d.cli.Put(t.Context(), k, v); err != nil {
			t.Fatal(err)
		}
	}
	w, err := r.Watch(t.Context(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ws, werr := w.Next(t.Context())
	s, lerr := r.Lookup(t.Context(), "svc")
	if got := ids(s); lerr != nil || len(got) != 1 || got[0] != good.Instance().ID {
		t.Errorf("Lookup = %v, %v; want only %s", got, lerr, good.Instance().ID)
	}
	if got := ids(ws); werr != nil || len(got) != 1 || got[0] != good.Instance().ID {
		t.Errorf("Watch = %v, %v; want only %s", got, werr, good.Instance().ID)
	}
	if !strings.Contains(log.String(), "skipped a record") {
		t.Fatalf("nothing reported in the log: %q", log.String())
	}
}
