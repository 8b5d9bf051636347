package selector

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/roster-go/roster/registry"
)

// feed runs picks and reports each with its instance's latency: the
// instance slow answers in 100 ms, every other in 1 ms.
func feed(t *testing.T, s *Selector, n int, slow string) (slowPicks int) {
	t.Helper()
	for range n {
		in, done, err := s.Pick(context.Background(), PickOptions{})
		if err != nil {
			t.Fatal(err)
		}
		lat := time.Millisecond
		if in.ID == slow {
			lat = 100 * time.Millisecond
			slowPicks++
		}
		done.Done(nil, lat)
	}
	return slowPicks
}

// TestReconfigureKeepsLatency: the latency estimates survive a change of
// configuration, so a slow instance is avoided from the first pick after
// it. A fresh selector, knowing nothing, sends the slow one its share
// until it has learned: that is what the kept state saves.
func TestReconfigureKeepsLatency(t *testing.T) {
	s := mustNew(t, WithStrategy(P2CEWMA))
	s.Update(snap(10))
	feed(t, s, 2000, "i0003") // learn
	split := WithSplit(Split{Route: Route{Tag: "canary"}, Percent: 50})
	if err := s.Reconfigure(WithStrategy(P2CEWMA), split, WithFilters(Version(""))); err != nil {
		t.Fatal(err)
	}
	if got := feed(t, s, 1000, "i0003"); got != 0 {
		t.Errorf("after Reconfigure the slow instance got %d of 1000 picks, want 0 (its estimate was lost)", got)
	}
	fresh := mustNew(t, WithStrategy(P2CEWMA), split, WithFilters(Version("")))
	fresh.Update(snap(10))
	if got := feed(t, fresh, 1000, "i0003"); got == 0 {
		t.Error("a fresh selector never picked the slow instance: the test cannot tell kept state from none")
	}
}

// TestReconfigureKeepsInflight: requests in flight picked under one
// strategy count under the next, and their Done ends them there.
func TestReconfigureKeepsInflight(t *testing.T) {
	s := mustNew(t, WithStrategy(LeastRequest), WithChoices(10))
	s.Update(snap(4))
	var held []Done
	for range 8 { // two each
		_, d, err := s.Pick(context.Background(), PickOptions{})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, d)
	}
	busy, d, _ := s.Pick(context.Background(), PickOptions{})
	held = append(held, d) // one instance has three
	if err := s.Reconfigure(WithStrategy(RoundRobin)); err != nil {
		t.Fatal(err)
	}
	if err := s.Reconfigure(WithStrategy(LeastRequest), WithChoices(10)); err != nil {
		t.Fatal(err)
	}
	if n := s.sh.count(&s.eps[busy.ID].inflight); n != 3 {
		t.Fatalf("%s has %d requests in flight after Reconfigure, want 3", busy.ID, n)
	}
	// Exact least-request: the busy instance is the last choice.
	for range 3 {
		in, d, err := s.Pick(context.Background(), PickOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if in.ID == busy.ID {
			t.Fatalf("picked %s, which has the most requests in flight", in.ID)
		}
		held = append(held, d)
	}
	for _, d := range held {
		d.Done(nil, time.Millisecond)
	}
	for id, ep := range s.eps {
		if n := s.sh.count(&ep.inflight); n != 0 {
			t.Errorf("%s: %d in flight after every Done, want 0", id, n)
		}
	}
}

// TestReconfigureKeepsSlowStart: an instance warming when the
// configuration changes goes on warming.
func TestReconfigureKeepsSlowStart(t *testing.T) {
	s := mustNew(t, WithStrategy(RoundRobin), WithSlowStart(SlowStart{Window: time.Hour, MinWeightPercent: 10}))
	s.Update(snap(4))
	s.Update(snap(5)) // i0004 joins: it warms for an hour at ≈10 %
	if err := s.Reconfigure(WithStrategy(Random), WithSlowStart(SlowStart{Window: time.Hour, MinWeightPercent: 10})); err != nil {
		t.Fatal(err)
	}
	const n = 20000
	got := 0
	for range n {
		in, _, _ := s.Pick(context.Background(), PickOptions{})
		if in.ID == "i0004" {
			got++
		}
	}
	// Without the ramp it would get a fifth; admitted one time in ten,
	// with the strategy asked again when it is not, it gets about 3 %.
	if share := float64(got) / n; share > 0.1 {
		t.Errorf("warming instance got %.3f of the picks after Reconfigure, want about 0.03 (its ramp was lost)", share)
	}
}

// TestReconfigureSplit: a canary raised live gets its new share (within
// 4σ of the binomial), keys moving only toward the canary.
func TestReconfigureSplit(t *testing.T) {
	sn := snap(10)
	for i := range 3 {
		sn.Instances[i].Version = "v2"
	}
	s := mustNew(t, WithSplit(Split{Route: Route{Version: "v2"}, Percent: 5}))
	s.Update(sn)
	const n = 10000
	onCanary := map[string]bool{}
	for _, pct := range []float64{5, 50, 100} {
		if err := s.Reconfigure(WithSplit(Split{Route: Route{Version: "v2"}, Percent: pct})); err != nil {
			t.Fatal(err)
		}
		got := 0
		for i := range n {
			key := keys[i%len(keys)]
			in, d, err := s.Pick(context.Background(), PickOptions{Key: key})
			if err != nil {
				t.Fatal(err)
			}
			d.Done(nil, time.Millisecond)
			if in.Version == "v2" {
				got++
				onCanary[key] = true
			} else if onCanary[key] {
				t.Fatalf("at %v%% key %s left the canary", pct, key)
			}
		}
		p := pct / 100
		if sigma := math.Sqrt(n * p * (1 - p)); math.Abs(float64(got)-n*p) > 4*sigma+0.5 {
			t.Errorf("split %v%%: %d of %d on the canary, want %.0f ± %.0f", pct, got, n, n*p, 4*sigma)
		}
	}
}

// TestReconfigureRejects: a bad option fails with ErrInvalid and changes
// nothing; the fixed options cannot change.
func TestReconfigureRejects(t *testing.T) {
	s := mustNew(t, WithStrategy(ConsistentHash), WithLocality("a"))
	s.Update(snap(5))
	before := s.Picker()
	for name, opts := range map[string][]Option{
		"unknown strategy": {WithStrategy("fastest")},
		"split over 100":   {WithSplit(Split{Route: Route{Version: "v2"}, Percent: 101})},
		"zone":             {WithLocality("b")},
		"region":           {WithRegion("r2")},
		"overprovisioning": {WithOverprovisioning(2)},
		"inflight bound":   {WithInflightBound(time.Minute)},
	} {
		err := s.Reconfigure(opts...)
		if !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("%s: Reconfigure = %v, want an error wrapping registry.ErrInvalid", name, err)
		}
		if s.Picker() != before {
			t.Errorf("%s: a failed Reconfigure published a new picker", name)
		}
	}
	if err := s.Reconfigure(WithStrategy(Maglev)); err != nil {
		t.Fatalf("Reconfigure without the zone = %v, want it kept from New", err)
	}
}

// TestReconfigureBeforeUpdate: a selector reconfigured before its first
// snapshot builds the first one with the new options.
func TestReconfigureBeforeUpdate(t *testing.T) {
	s := mustNew(t)
	if err := s.Reconfigure(WithStrategy(ConsistentHash)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Pick(context.Background(), PickOptions{}); !errors.Is(err, ErrNoInstances) {
		t.Fatalf("Pick before Update = %v, want ErrNoInstances", err)
	}
	s.Update(snap(20))
	first, _, _ := s.Pick(context.Background(), PickOptions{Key: "user-1"})
	for range 100 {
		if in, _, _ := s.Pick(context.Background(), PickOptions{Key: "user-1"}); in.ID != first.ID {
			t.Fatalf("key user-1 went to %s and %s: not consistent hashing", first.ID, in.ID)
		}
	}
}

// TestReconfigureConcurrent: picks, Done, Updates and Reconfigures race
// (under -race) without an error or a lost count.
func TestReconfigureConcurrent(t *testing.T) {
	s := mustNew(t)
	s.Update(snap(10))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				r := Route{}
				if i%3 == 0 {
					r.Version = "v2"
				}
				_, d, err := s.Pick(ctx, PickOptions{Key: keys[i&1023], Route: r})
				if err != nil && !errors.Is(err, ErrNoInstances) {
					t.Error(err)
					return
				}
				d.Done(nil, time.Millisecond)
			}
		})
	}
	wg.Go(func() {
		sts := Strategies()
		for i := 0; ctx.Err() == nil; i++ {
			if err := s.Reconfigure(WithStrategy(sts[i%len(sts)]), WithBoundedLoad(float64(i%2)*1.25),
				WithSplit(Split{Route: Route{Tag: "x"}, Percent: float64(i % 100)})); err != nil {
				t.Error(err)
				return
			}
			s.Update(snap(10 + i%3))
			s.Rewarm("i0001")
		}
	})
	wg.Wait()
	for id, ep := range s.eps {
		if n := s.sh.count(&ep.inflight); n != 0 {
			t.Errorf("%s: %d in flight after every Done, want 0", id, n)
		}
	}
}
