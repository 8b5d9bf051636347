package selector

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/roster-go/roster/registry"
)

// versioned: i0000–i0007 are version 1.0 in zone a/b, i0008–i0009 are 2.0
// in zone b and tagged canary.
func versioned() registry.Snapshot {
	s := snap(10)
	for i := range s.Instances {
		in := &s.Instances[i]
		in.Version, in.Zone = "1.0", "a"
		if i%2 == 1 {
			in.Zone = "b"
		}
		if i >= 8 {
			in.Version, in.Zone, in.Tags = "2.0", "b", []string{"canary"}
			in.Metadata = map[string]string{"build": "x"}
		}
	}
	return s
}

func TestRoutePerCall(t *testing.T) {
	ctx := context.Background()
	for _, st := range Strategies() {
		s := mustNew(t, WithStrategy(st))
		s.Update(versioned())
		for _, tc := range []struct {
			r    Route
			want func(registry.Instance) bool
		}{
			{Route{Version: "2.0"}, func(in registry.Instance) bool { return in.Version == "2.0" }},
			{Route{Zone: "a"}, func(in registry.Instance) bool { return in.Zone == "a" }},
			{Route{Tag: "canary"}, func(in registry.Instance) bool { return in.Version == "2.0" }},
			{Route{MetaKey: "build", MetaValue: "x"}, func(in registry.Instance) bool { return in.Version == "2.0" }},
			{Route{Version: "1.0", Zone: "b"}, func(in registry.Instance) bool { return in.Version == "1.0" && in.Zone == "b" }},
		} {
			seen := map[string]bool{}
			for i := range 400 {
				o := PickOptions{Key: fmt.Sprint(i)}
				c := ctx
				if i%2 == 0 {
					o.Route = tc.r
				} else {
					c = WithRoute(ctx, tc.r)
				}
				in, done, err := s.Pick(c, o)
				if err != nil {
					t.Fatalf("%s %+v: %v", st, tc.r, err)
				}
				done.Done(nil, time.Millisecond)
				if !tc.want(in) {
					t.Fatalf("%s %+v: picked %+v", st, tc.r, in)
				}
				seen[in.ID] = true
			}
			if len(seen) < 2 {
				t.Errorf("%s %+v: picked only %v", st, tc.r, seen)
			}
		}
		if _, _, err := s.Pick(ctx, PickOptions{Route: Route{Version: "3.0"}}); !errors.Is(err, ErrNoInstances) {
			t.Errorf("%s: route to an absent version: %v, want ErrNoInstances", st, err)
		}
	}
}

// TestSplit: 5 % of the keys go to the canary, each key always to the
// same side; without a key the split is drawn at random.
func TestSplit(t *testing.T) {
	s := mustNew(t, withRand(seeded(1)), WithSplit(Split{Route: Route{Version: "2.0"}, Percent: 5}))
	s.Update(versioned())
	ctx := context.Background()
	side := map[string]bool{}
	const n = 20000
	canary := 0
	for i := range n {
		key := fmt.Sprint("user-", i%2000)
		in, done, err := s.Pick(ctx, PickOptions{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		done.Done(nil, time.Millisecond)
		isCanary := in.Version == "2.0"
		if prev, ok := side[key]; ok && prev != isCanary {
			t.Fatalf("key %s changed sides", key)
		}
		side[key] = isCanary
		if isCanary {
			canary++
		}
	}
	t.Logf("keyed: %d of %d calls (%d keys) to the canary", canary, n, len(side))
	// 2,000 distinct keys: 6σ of a 5 % share is 0.029.
	if got := float64(canary) / n; math.Abs(got-0.05) > 0.03 {
		t.Errorf("keyed: canary got %.3f, want 0.05", got)
	}
	canary = 0
	for range n {
		in, _, _ := s.Pick(ctx, PickOptions{})
		if in.Version == "2.0" {
			canary++
		}
	}
	if got := float64(canary) / n; math.Abs(got-0.05) > 6*math.Sqrt(0.05*0.95/n) {
		t.Errorf("unkeyed: canary got %.3f, want 0.05", got)
	}
	// A pinned version wins over the split.
	in, _, _ := s.Pick(ctx, PickOptions{Key: "user-1", Route: Route{Version: "2.0"}})
	if in.Version != "2.0" {
		t.Errorf("route did not override the split: %+v", in)
	}
	// No canary deployed: everything goes to the rest.
	s.Update(snap(3))
	for range 100 {
		if _, _, err := s.Pick(ctx, PickOptions{}); err != nil {
			t.Fatalf("split without canary instances: %v", err)
		}
	}
	if _, err := New(WithSplit(Split{Percent: 5})); !errors.Is(err, errInvalidOption) {
		t.Errorf("split without a route: %v, want errInvalidOption", err)
	}
}

// TestRouteCacheIsBounded: more distinct Routes than the cache holds
// still pick correctly, and the cache stops at maxRoutes.
func TestRouteCacheIsBounded(t *testing.T) {
	s := mustNew(t)
	sn := snap(200)
	for i := range sn.Instances {
		sn.Instances[i].Version = fmt.Sprint(i)
	}
	s.Update(sn)
	for i := range 200 {
		in, _, err := s.Pick(context.Background(), PickOptions{Route: Route{Version: fmt.Sprint(i)}})
		if err != nil || in.Version != fmt.Sprint(i) {
			t.Fatalf("route %d: %v %v", i, in.Version, err)
		}
	}
	if got := len(*s.Picker().routes.m.Load()); got != maxRoutes {
		t.Errorf("cache holds %d routes, want %d", got, maxRoutes)
	}
}
