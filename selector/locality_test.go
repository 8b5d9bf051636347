package selector

import (
	"context"
	"math"
	"testing"

	"github.com/roster-go/roster/registry"
)

// zoned returns n instances, the first local of them in zone a, the
// others in zone b.
func zoned(n, local int) registry.Snapshot {
	s := snap(n)
	for i := range s.Instances {
		s.Instances[i].Zone = "b"
		if i < local {
			s.Instances[i].Zone = "a"
		}
	}
	return s
}

// localFraction picks n times and returns the share that went to zone a.
func localFraction(t *testing.T, s *Selector, o PickOptions, n int) float64 {
	t.Helper()
	local := 0
	for range n {
		in, done, err := s.Pick(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		done.Finish(nil)
		if in.Zone == "a" {
			local++
		}
	}
	return float64(local) / float64(n)
}

// TestLocalityShares: the local tier takes min(1, 1.4 × usable share),
// normalised when both tiers are short, everything local in panic.
func TestLocalityShares(t *testing.T) {
	for _, st := range Strategies() {
		s := mustNew(t, WithStrategy(st), WithLocality("a"))
		s.Update(zoned(8, 4)) // a: i0000-i0003, b: i0004-i0007
		steps := []struct {
			id     string
			usable bool
			want   float64
		}{
			{"", true, 1},
			{"i0000", false, 1},    // 3/4 × 1.4 > 1: no spill yet
			{"i0001", false, 0.7},  // 2/4 × 1.4
			{"i0002", false, 0.35}, // 1/4 × 1.4
			{"i0003", false, 0},    // the whole zone is out
			{"i0004", false, 0},    // b is short too, but a has nothing
			{"i0003", true, 0.35},  // b full (3/4 × 1.4 ≥ 1): no scaling
			{"i0005", false, 0.35}, // b at 0.7: 1.05 in all, still none
			{"i0006", false, 0.5},  // 0.35 and 0.35: scaled to one
			{"i0003", false, 0},
			{"i0007", false, 1}, // nothing usable anywhere: panic, all local
			{"i0000", true, 1},  // 0.35 local, 0 remote: normalised to 1
		}
		for _, step := range steps {
			if step.id != "" {
				s.SetUsable(step.id, step.usable)
			}
			if got := s.LocalShare(); math.Abs(got-step.want) > 1e-9 {
				t.Fatalf("%s: after %s usable=%v: local share %v, want %v", st, step.id, step.usable, got, step.want)
			}
		}
	}
}

// TestLocalitySpills: plain picks follow the share, and the share
// survives an update that keeps the instances.
func TestLocalitySpills(t *testing.T) {
	s := mustNew(t, WithStrategy(P2CEWMA), WithLocality("a"))
	s.Update(zoned(4, 2))
	if got := localFraction(t, s, PickOptions{}, 1000); got != 1 {
		t.Fatalf("healthy zone: %.3f of picks local, want 1", got)
	}
	s.SetUsable("i0000", false)
	s.Update(zoned(4, 2)) // same instances: the share is kept
	if got := localFraction(t, s, PickOptions{}, 20000); math.Abs(got-0.7) > 0.03 {
		t.Fatalf("half the zone out: %.3f of picks local, want 0.7", got)
	}
	s.SetUsable("i0001", false)
	if got := localFraction(t, s, PickOptions{}, 1000); got != 0 {
		t.Fatalf("zone out: %.3f of picks local, want 0", got)
	}
	s.SetUsable("i0000", true)
	s.SetUsable("i0001", true)
	if got := localFraction(t, s, PickOptions{}, 1000); got != 1 {
		t.Fatalf("zone back: %.3f of picks local, want 1", got)
	}
	// An instance that leaves the service takes its mark with it.
	s.SetUsable("i0001", false)
	s.Update(zoned(3, 2)) // i0002 (zone a? no: b) leaves; i0001 stays
	if len(s.unusable) != 1 {
		t.Fatalf("unusable marks %v, want i0001's only", s.unusable)
	}
	s.Update(zoned(1, 1))
	if len(s.unusable) != 0 {
		t.Fatalf("unusable marks %v after i0001 left, want none", s.unusable)
	}
}

// TestLocalityDrainingIsUnusable: a draining local instance counts out
// of the zone's usable share.
func TestLocalityDrainingIsUnusable(t *testing.T) {
	s := mustNew(t, WithLocality("a"))
	sn := zoned(4, 2)
	sn.Instances[0].Weight = 0
	s.Update(sn)
	if got := s.LocalShare(); math.Abs(got-0.7) > 1e-9 {
		t.Fatalf("local share %v with one of two local instances draining, want 0.7", got)
	}
}

// TestLocalityAvoidSpillsBeforeRelaxing: when every local instance is
// avoided, the pick goes to the other zone, not to an avoided instance.
func TestLocalityAvoidSpillsBeforeRelaxing(t *testing.T) {
	s := mustNew(t, WithLocality("a"))
	s.Update(zoned(4, 2))
	avoid := func(in *registry.Instance) bool { return in.Zone == "a" }
	if got := localFraction(t, s, PickOptions{Avoid: avoid}, 1000); got != 0 {
		t.Fatalf("%.3f of picks went to an avoided local instance", got)
	}
	tried := func(in *registry.Instance) bool { return in.ID == "i0000" || in.ID == "i0001" }
	if got := localFraction(t, s, PickOptions{Tried: tried}, 1000); got != 0 {
		t.Fatalf("%.3f of picks went to a tried local instance with zone b untried", got)
	}
	all := func(*registry.Instance) bool { return true }
	if got := localFraction(t, s, PickOptions{Avoid: all}, 1000); got != 1 {
		t.Fatalf("everything avoided: %.3f of picks local, want 1 (the preferred tier)", got)
	}
	if _, _, err := s.Pick(context.Background(), PickOptions{Exclude: all}); err != ErrAllExcluded {
		t.Fatalf("everything excluded: %v, want ErrAllExcluded", err)
	}
}

// TestLocalityOnlyOneZone: without instances elsewhere every pick is
// local; a routed pick ignores the tiers.
func TestLocalityOnlyOneZone(t *testing.T) {
	s := mustNew(t, WithLocality("a"))
	s.Update(zoned(2, 2))
	s.SetUsable("i0000", false)
	s.SetUsable("i0001", false)
	if got := s.LocalShare(); got != 1 {
		t.Fatalf("local share %v with no other zone, want 1", got)
	}
	s.Update(zoned(4, 2))
	if got := localFraction(t, s, PickOptions{Route: Route{Zone: "a"}}, 200); got != 1 {
		t.Fatalf("a route to zone a: %.3f local, want 1", got)
	}
}
