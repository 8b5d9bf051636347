package conformance_test

import (
	"context"
	"testing"
	"time"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/registry/driver"
)

// seamless is a backend whose faults heal before any watcher can notice:
// its restart keeps the data and is never seen by clients, and an external
// delete is put back at once. The Watcher contract delivers only changes,
// so the fault checks must pass without a new delivery.
type seamless struct{ srv *memory.Server }

func (h seamless) MakeDriver(context.Context) (driver.Driver, error) {
	return memory.NewDriver(h.srv), nil
}

func (h seamless) Config() conformance.Config {
	return conformance.Config{TTL: 300 * time.Millisecond, ExpirySlack: 100 * time.Millisecond,
		Propagation: 500 * time.Millisecond, ResyncInterval: time.Second}
}

func (h seamless) Restart(context.Context, bool) error { return nil }

func TestFaultHealedUnseenPasses(t *testing.T) {
	h := seamless{memory.NewServer()}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	start := time.Now()
	for _, r := range conformance.RunChecks(ctx, h, []string{"RestartKeepingData", "RestartLosingData"}, nil) {
		if !r.Passed {
			t.Errorf("%s on a backend whose restart is invisible: %s", r.Name, r.Reason)
		}
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("checks took %v: an invisible restart should be recognised as converged quickly", el)
	}
}
