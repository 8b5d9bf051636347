//go:build !race

package selector

import (
	"context"
	"testing"
	"time"
)

// TestReconfiguredPickDoesNotAllocate: a pick from a selector whose
// strategy and split were changed live allocates nothing, routed or
// not, as a pick from one built with those options.
func TestReconfiguredPickDoesNotAllocate(t *testing.T) {
	sn := snap(100)
	for i := range 10 {
		sn.Instances[i].Version = "v2"
	}
	for _, st := range Strategies() {
		s := mustNew(t)
		s.Update(sn)
		if err := s.Reconfigure(WithStrategy(st), WithSplit(Split{Route: Route{Version: "v2"}, Percent: 20})); err != nil {
			t.Fatal(err)
		}
		i := 0
		allocs := testing.AllocsPerRun(1000, func() {
			_, done, err := s.Pick(context.Background(), PickOptions{Key: keys[i&1023]})
			if err != nil {
				t.Fatal(err)
			}
			done.Done(nil, time.Millisecond)
			i++
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocs per pick after Reconfigure, want 0", st, allocs)
		}
	}
}
