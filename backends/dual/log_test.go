package dual_test

import (
	"context"
	"strings"
	"testing"

	"github.com/roster-go/roster/backends/dual"
	"github.com/roster-go/roster/internal/logbuf"
)

// A side's failure is logged when the other side serves, not while both
// fail (the operation's error says so: a command prints one line), and
// its recovery only once its failure was logged. Not parallel: it swaps
// the default logger.
func TestHealthLoggedOnlyWhileTheOtherServes(t *testing.T) {
	log := logbuf.Default(t)
	d, sides := pairOf(t, dual.Options{})
	ctx := context.Background()
	services := func(wantErr bool) {
		t.Helper()
		if _, err := d.Services(ctx); (err != nil) != wantErr {
			t.Fatalf("Services = %v, want an error: %v", err, wantErr)
		}
	}
	sides[0].SetReachable(false)
	sides[1].SetReachable(false)
	services(true)
	services(true)
	if got := log.String(); got != "" {
		t.Fatalf("both sides failing, logged:\n%s", got)
	}
	sides[1].SetReachable(true)
	services(false)
	got := log.String()
	if strings.Count(got, "\n") != 1 || !strings.Contains(got, `level=WARN msg="roster/dual: side failing; serving from the other" side=old op=services`) {
		t.Fatalf("the new side serving: logged\n%s\nwant one warning for the old side", got)
	}
	sides[0].SetReachable(true)
	services(false)
	got = log.String()
	if strings.Count(got, "\n") != 2 || !strings.Contains(got, `level=INFO msg="roster/dual: side answering again" side=old`) {
		t.Fatalf("the old side back: logged\n%s\nwant its recovery", got)
	}
	// A side that fails and recovers while the other was failing too was
	// never reported failing: nothing to say of its recovery.
	sides[0].SetReachable(false)
	sides[1].SetReachable(false)
	services(true)
	sides[0].SetReachable(true)
	sides[1].SetReachable(true)
	services(false)
	if again := log.String(); again != got {
		t.Fatalf("a failure of both sides, unlogged, then a recovery logged:\n%s", strings.TrimPrefix(again, got))
	}
}
