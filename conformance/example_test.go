package conformance_test

import (
	"context"
	"fmt"
	"time"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/registry/driver"
)

// memHarness gives the suite the in-process backend. It has no fault
// hooks, so the checks that need one are skipped, saying which hook.
type memHarness struct{ srv *memory.Server }

func (h memHarness) MakeDriver(context.Context) (driver.Driver, error) {
	return memory.NewDriver(h.srv), nil
}

func (h memHarness) Config() conformance.Config {
	return conformance.Config{TTL: 300 * time.Millisecond, Propagation: 500 * time.Millisecond}
}

// Checks run outside "go test", as "roster conformance URL" runs them; in
// a backend's tests, conformance.Run(t, harness) runs them all as subtests.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := memHarness{memory.NewServer()}
	checks := []string{"RoundTripEveryField", "CrashExpiresWithinTTL", "WatchAddUpdateRemove", "PartitionShorterThanTTL"}
	for _, r := range conformance.RunChecks(ctx, h, checks, nil) { // in the suite's order
		switch {
		case r.Skipped:
			fmt.Printf("%s: skipped: %s\n", r.Name, r.Reason)
		case r.Passed:
			fmt.Printf("%s: passed\n", r.Name)
		default:
			fmt.Printf("%s: FAILED: %s\n", r.Name, r.Reason)
		}
	}
	// Output:
	// RoundTripEveryField: passed
	// CrashExpiresWithinTTL: passed
	// WatchAddUpdateRemove: passed
	// PartitionShorterThanTTL: skipped: harness has no Partitioner hook
}
