//go:build !race

// The race detector allocates, so the zero-allocation tests of the hot
// paths are built without it; scripts/test.sh runs them in a separate
// go test without -race.

package selector

import (
	"context"
	"testing"
	"time"

	"github.com/roster-go/roster/registry"
)

// Pick allocates nothing, Done included, with a key and with predicates
// that are closures over the caller's locals (what the middleware does),
// through every step of the fallback, from the Selector or a held Picker.
func TestPickDoesNotAllocate(t *testing.T) {
	ctx := context.Background()
	for _, st := range Strategies() {
		s := mustNew(t, WithStrategy(st))
		s.Update(snap(100))
		held := s.Picker()
		var tried [3]string
		n, i := 0, 0
		allocs := testing.AllocsPerRun(1000, func() {
			ex := func(in *registry.Instance) bool {
				for _, id := range tried[:n] {
					if id == in.ID {
						return true
					}
				}
				return false
			}
			o := PickOptions{Key: "user-42", Exclude: ex}
			if i++; i%2 == 0 {
				// Every instance avoided, the last one tried: the last step.
				o = PickOptions{Key: "user-42", Tried: ex, Avoid: func(*registry.Instance) bool { return true }}
			}
			in, done, err := s.Pick(ctx, o)
			if i%3 == 0 {
				done.Done(nil, time.Millisecond)
				in, done, err = held.Pick(ctx, o)
			}
			if err != nil {
				t.Fatal(err)
			}
			if n < len(tried) {
				tried[n] = in.ID
				n++
			} else {
				n = 0
			}
			done.Done(nil, time.Millisecond)
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocs per pick, want 0", st, allocs)
		}
	}
}

// TestWarmingPickDoesNotAllocate: picks while an instance is warming
// (coarse clock, ramp, draw again) allocate nothing either.
func TestWarmingPickDoesNotAllocate(t *testing.T) {
	for _, st := range Strategies() {
		s := mustNew(t, WithStrategy(st))
		s.Update(snap(10))
		s.Update(snap(12)) // two instances join: they warm for 30 s
		if s.sh.warmEnd.Load() == 0 {
			t.Fatal("no instance is warming")
		}
		i := 0
		allocs := testing.AllocsPerRun(1000, func() {
			_, done, err := s.Pick(context.Background(), PickOptions{Key: keys[i&1023]})
			if err != nil {
				t.Fatal(err)
			}
			i++
			done.Finish(nil)
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocs per pick while warming, want 0", st, allocs)
		}
	}
}

// TestRoutedPickDoesNotAllocate: once a Route has been seen, picking
// with it allocates nothing, from PickOptions or from the context.
func TestRoutedPickDoesNotAllocate(t *testing.T) {
	for _, st := range Strategies() {
		s := mustNew(t, WithStrategy(st), WithSplit(Split{Route: Route{Version: "2.0"}, Percent: 5}))
		s.Update(versioned())
		ctx := WithRoute(context.Background(), Route{Zone: "a"})
		i := 0
		allocs := testing.AllocsPerRun(1000, func() {
			o := PickOptions{Key: keys[i&1023]}
			c := context.Background()
			switch i % 3 {
			case 0:
				o.Route = Route{Version: "1.0"}
			case 1:
				c = ctx
			} // case 2: the split
			i++
			_, done, err := s.Pick(c, o)
			if err != nil {
				t.Fatal(err)
			}
			done.Finish(nil)
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocs per routed pick, want 0", st, allocs)
		}
	}
}

// TestEndpointPickDoesNotAllocate: once a name has been seen, picking
// for it allocates nothing, routed or not.
func TestEndpointPickDoesNotAllocate(t *testing.T) {
	for _, st := range Strategies() {
		s := mustNew(t, WithStrategy(st))
		s.Update(ported())
		i := 0
		allocs := testing.AllocsPerRun(1000, func() {
			o := PickOptions{Key: keys[i&1023], Endpoint: "grpc"}
			if i%2 == 1 {
				o.Endpoint, o.Route = "http", Route{Version: "2.0"}
			}
			i++
			in, done, err := s.Pick(context.Background(), o)
			if err != nil || in.Address == "" {
				t.Fatal(in.Address, err)
			}
			done.Finish(nil)
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocs per pick by endpoint, want 0", st, allocs)
		}
	}
}

// TestLocalityPickDoesNotAllocate: picks across locality tiers, spilling
// and falling back, allocate nothing either.
func TestLocalityPickDoesNotAllocate(t *testing.T) {
	for _, st := range Strategies() {
		s := mustNew(t, WithStrategy(st), WithLocality("a"))
		s.Update(zoned(10, 4))
		s.SetUsable("i0000", false)
		s.SetUsable("i0001", false)
		i := 0
		allocs := testing.AllocsPerRun(1000, func() {
			o := PickOptions{Key: keys[i&1023]}
			if i++; i%2 == 0 {
				o.Avoid = func(in *registry.Instance) bool { return in.Zone == "a" }
			}
			_, done, err := s.Pick(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			done.Finish(nil)
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocs per locality pick, want 0", st, allocs)
		}
	}
}
