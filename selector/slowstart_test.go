package selector

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/roster-go/roster/registry"
)

// TestSlowStartOnlyForNewInstances: the instances of the first snapshot
// are not ramped (a client start must not slow-start a running service);
// one that joins later is, from MinWeightPercent up to its full share.
func TestSlowStartOnlyForNewInstances(t *testing.T) {
	var now int64 = 1e9
	s := mustNew(t, WithStrategy(RoundRobin), withRand(seeded(1)), withClock(func() int64 { return now }),
		WithSlowStart(SlowStart{Window: 10 * time.Second}))
	s.Update(snap(3))
	share := func(id string) float64 {
		n := 0
		for range 30000 {
			in, _, err := s.Pick(context.Background(), PickOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if in.ID == id {
				n++
			}
		}
		return float64(n) / 30000
	}
	if got := share("i0000"); got < 0.30 || got > 0.36 {
		t.Fatalf("first snapshot: i0000 got %.3f, want 1/3 (no ramp)", got)
	}
	s.Update(snap(4)) // i0003 joins
	// At the start its weight is 10 %: 0.1 / (3 + 0.1) of the picks.
	if got := share("i0003"); got < 0.02 || got > 0.045 {
		t.Errorf("new instance at t=0 got %.3f, want ≈0.032", got)
	}
	now += int64(5 * time.Second) // halfway: 0.5 / 3.5
	if got := share("i0003"); got < 0.12 || got > 0.165 {
		t.Errorf("new instance halfway got %.3f, want ≈0.143", got)
	}
	now += int64(6 * time.Second) // done: 1/4
	if got := share("i0003"); got < 0.23 || got > 0.27 {
		t.Errorf("new instance after the window got %.3f, want 0.25", got)
	}
	if s.sh.warmEnd.Load() != 0 {
		t.Error("the ramp check stays on after every ramp ended")
	}
	s.Rewarm("i0001") // readmitted from quarantine
	if got := share("i0001"); got > 0.045 {
		t.Errorf("rewarmed instance got %.3f, want ≈0.032", got)
	}
	s.Rewarm("nope") // unknown: nothing happens
}

// TestSlowStartKeyedIsSticky: with a hash strategy a warming instance
// admits a growing set of keys, and an admitted key stays admitted.
func TestSlowStartKeyedIsSticky(t *testing.T) {
	var now int64 = 1e9
	s := mustNew(t, WithStrategy(Maglev), withClock(func() int64 { return now }), WithSlowStart(SlowStart{Window: 10 * time.Second}))
	s.Update(snap(3))
	s.Update(snap(4))
	keys := make([]string, 4000)
	for i := range keys {
		keys[i] = "k" + string(rune('a'+i%26)) + time.Duration(i).String()
	}
	admitted := func() map[string]bool {
		m := map[string]bool{}
		for _, k := range keys {
			for range 2 { // twice: the answer is the key's, not a draw's
				in, _, _ := s.Pick(context.Background(), PickOptions{Key: k})
				if in.ID == "i0003" {
					m[k] = true
				} else if m[k] {
					t.Fatalf("key %s went to i0003 once and elsewhere the next time", k)
				}
			}
		}
		return m
	}
	early := admitted()
	now += int64(6 * time.Second)
	late := admitted()
	for k := range early {
		if !late[k] {
			t.Errorf("key %s left the warming instance as its ramp grew", k)
		}
	}
	if !(len(early) < len(late)) || len(late) > len(keys)/4+len(keys)/20 {
		t.Errorf("keys on the new instance: %d at 0 s, %d at 6 s; want a growing share below 1/4", len(early), len(late))
	}
}

func TestSlowStartOptionErrors(t *testing.T) {
	for _, bad := range []SlowStart{{Window: -1}, {Window: time.Second, Aggression: -1}, {Window: time.Second, MinWeightPercent: 101}} {
		if _, err := New(WithSlowStart(bad)); !errors.Is(err, errInvalidOption) {
			t.Errorf("New(WithSlowStart(%+v)) = %v, want errInvalidOption", bad, err)
		}
	}
}

// TestSimulationSlowStart: a backend joins a service at 60 % load with
// cold capacity (2 workers growing to 8 over 10 s: pools, caches). With a
// slow start of the same window its p99 during the warm-up stays within
// 1.2× of its own steady state on every strategy; without one, the
// strategies that do not measure latency overload it.
func TestSimulationSlowStart(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation skipped in -short mode")
	}
	const (
		join   = 5 // s
		window = 10
		n      = 11
	)
	workers := func(b, at int64) int {
		if b != n-1 {
			return simWorkers
		}
		x := min(float64(at-join*1e9)/(window*1e9), 1)
		return 2 + int(6*x)
	}
	cold := func(st Strategy, ss SlowStart) (warming, steady time.Duration) {
		run := simulateRun(t, simConfig{
			strategy: st, backends: n, rate: 0.6 * 800 * n, joinAt: join * 1e9, seed: 7, workers: workers,
			opts: []Option{WithSlowStart(ss)},
		})
		return percentile(run.latencies(join, join+window, n-1), 0.99), percentile(run.latencies(join+window+5, simDuration, n-1), 0.99)
	}
	for _, st := range []Strategy{RoundRobin, WeightedRoundRobin, Random, WeightedRandom, LeastRequest, P2CEWMA} {
		warming, steady := cold(st, SlowStart{Window: window * time.Second})
		off, _ := cold(st, SlowStart{})
		t.Logf("%-20s cold p99 during warm-up %v, steady %v; without slow start %v", st, warming, steady, off)
		if ratio := float64(warming) / float64(steady); ratio > 1.2 {
			t.Errorf("%s: cold p99 %v during warm-up = %.2f × steady %v, want ≤ 1.2", st, warming, ratio, steady)
		}
		if st == RoundRobin && off < 2*steady {
			t.Errorf("round_robin without slow start: cold p99 %v, expected the cold backend overloaded (> 2 × %v)", off, steady)
		}
	}
}

// TestSlowStartNotForFilterSpillOver: an instance that a filter lets in
// later (PreferZone spilling over when the local zone drains) has been in
// the service all along: it is not slow-started.
func TestSlowStartNotForFilterSpillOver(t *testing.T) {
	sn := snap(4)
	for i := range sn.Instances {
		sn.Instances[i].Zone = []string{"a", "a", "b", "b"}[i]
	}
	s := mustNew(t, WithStrategy(RoundRobin), WithFilters(PreferZone("a", 2)))
	s.Update(sn)
	if s.Len() != 2 {
		t.Fatalf("picking from %d instances, want zone a's 2", s.Len())
	}
	drained := sn
	drained.Instances = append([]registry.Instance(nil), sn.Instances...)
	drained.Instances[0].Weight = 0 // zone a has one left: spill over
	s.Update(drained)
	if s.Len() != 3 {
		t.Fatalf("picking from %d instances, want 3 after the spill-over", s.Len())
	}
	if s.sh.warmEnd.Load() != 0 {
		t.Error("the spilled-over instances of zone b are slow-started")
	}
}
