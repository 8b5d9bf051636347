package selector

import (
	"context"
	"errors"
	"math"
	"strings"
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

// regioned returns six instances: i0000-i0001 in zone a of region r1,
// i0002-i0003 in zone b of r1, i0004-i0005 in zone c of r2.
func regioned() registry.Snapshot {
	s := snap(6)
	for i := range s.Instances {
		s.Instances[i].Zone, s.Instances[i].Region = [...]string{"a", "b", "c"}[i/2], [...]string{"r1", "r1", "r2"}[i/2]
	}
	return s
}

// tierFractions picks n times and returns the shares of zones a, b, c.
func tierFractions(t *testing.T, s *Selector, o PickOptions, n int) (a, b, c float64) {
	t.Helper()
	count := map[string]int{}
	for range n {
		in, done, err := s.Pick(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		done.Finish(nil)
		count[in.Zone]++
	}
	return float64(count["a"]) / float64(n), float64(count["b"]) / float64(n), float64(count["c"]) / float64(n)
}

// TestLocalityRegionTiers: the zone spills to the rest of its region
// before another region, each tier in proportion to its health.
func TestLocalityRegionTiers(t *testing.T) {
	for _, st := range Strategies() {
		s := mustNew(t, WithStrategy(st), WithLocality("a"), WithRegion("r1"))
		s.Update(regioned())
		steps := []struct {
			id     string
			usable bool
			want   [3]float64
		}{
			{"", true, [3]float64{1, 0, 0}},
			{"i0000", false, [3]float64{0.7, 0.3, 0}}, // 1/2 × 1.4 local, the rest to zone b
			{"i0001", false, [3]float64{0, 1, 0}},     // zone a out: all to r1's zone b, none to r2
			{"i0002", false, [3]float64{0, 0.7, 0.3}}, // zone b at 0.7: r2 takes the rest
			{"i0003", false, [3]float64{0, 0, 1}},     // region r1 out
			{"i0004", false, [3]float64{0, 0, 1}},     // r2 at 0.7 alone: scaled to one
			{"i0002", true, [3]float64{0, 0.7, 0.3}},  // 0.7 and 0.7: no scaling, r2 the rest
			{"i0005", false, [3]float64{0, 1, 0}},     // 0.7 alone: scaled to one
			{"i0002", false, [3]float64{1, 0, 0}},     // nothing usable: the zone takes all
		}
		for _, step := range steps {
			if step.id != "" {
				s.SetUsable(step.id, step.usable)
			}
			z, r, rest := s.TierShares()
			got := [3]float64{z, r, rest}
			for i := range got {
				if math.Abs(got[i]-step.want[i]) > 1e-9 {
					t.Fatalf("%s: after %s usable=%v: shares %v, want %v", st, step.id, step.usable, got, step.want)
				}
			}
		}
	}
	// Picks follow the shares.
	s := mustNew(t, WithLocality("a"), WithRegion("r1"))
	s.Update(regioned())
	s.SetUsable("i0000", false)
	s.SetUsable("i0001", false)
	if a, b, c := tierFractions(t, s, PickOptions{}, 2000); a != 0 || b != 1 || c != 0 {
		t.Fatalf("zone a out: picks a %.3f b %.3f c %.3f, want all in zone b (same region)", a, b, c)
	}
	s.SetUsable("i0002", false)
	if a, b, c := tierFractions(t, s, PickOptions{}, 20000); a != 0 || math.Abs(b-0.7) > 0.03 || math.Abs(c-0.3) > 0.03 {
		t.Fatalf("zone a out, b half: picks a %.3f b %.3f c %.3f, want 0, 0.7, 0.3", a, b, c)
	}
	// Without a region, zone b is as far as zone c.
	s = mustNew(t, WithLocality("a"))
	s.Update(regioned())
	s.SetUsable("i0000", false)
	s.SetUsable("i0001", false)
	if z, r, rest := s.TierShares(); z != 0 || r != 0 || rest != 1 {
		t.Fatalf("no region: shares %v %v %v, want 0 0 1", z, r, rest)
	}
	// Avoiding the region's instances spills to the next tier before
	// relaxing Avoid.
	s = mustNew(t, WithLocality("a"), WithRegion("r1"))
	s.Update(regioned())
	avoid := func(in *registry.Instance) bool { return in.Region == "r1" }
	if a, b, c := tierFractions(t, s, PickOptions{Avoid: avoid}, 1000); c != 1 {
		t.Fatalf("region r1 avoided: picks a %.3f b %.3f c %.3f, want all in r2", a, b, c)
	}
}

// TestLocalityPanic: when the tiers together are short, a tier under the
// panic threshold ignores Avoid (its instances all take calls); with the
// threshold off, or when enough is usable elsewhere, Avoid holds.
func TestLocalityPanic(t *testing.T) {
	out := map[string]bool{"i0000": true, "i0001": true, "i0002": true, "i0004": true, "i0005": true, "i0006": true}
	avoid := func(in *registry.Instance) bool { return out[in.ID] }
	for _, c := range []struct {
		name    string
		opts    []Option
		avoided bool // picks land on avoided instances
	}{
		{"default threshold", nil, true},
		{"threshold off", []Option{WithPanicThreshold(0)}, false},
		{"threshold 20%", []Option{WithPanicThreshold(20)}, false}, // 25% usable is not under 20%
	} {
		// Round robin: the share within a tier is then exact, where
		// p2c_ewma's would follow the latency of each Finish.
		s := mustNew(t, append([]Option{WithLocality("a"), WithStrategy(RoundRobin)}, c.opts...)...)
		s.Update(zoned(8, 4))
		for id := range out {
			s.SetUsable(id, false)
		}
		if got := s.LocalShare(); math.Abs(got-0.5) > 1e-9 {
			t.Fatalf("%s: local share %v with a quarter of each zone usable, want 0.5", c.name, got)
		}
		avoided := 0
		for range 2000 {
			in, done, err := s.Pick(context.Background(), PickOptions{Avoid: avoid})
			if err != nil {
				t.Fatal(err)
			}
			done.Finish(nil)
			if out[in.ID] {
				avoided++
			}
		}
		// In panic each zone's four instances share its half: 3/4 avoided.
		if c.avoided && math.Abs(float64(avoided)/2000-0.75) > 0.05 {
			t.Fatalf("%s: %d of 2000 picks on avoided instances, want about 3/4 (panic)", c.name, avoided)
		}
		if !c.avoided && avoided != 0 {
			t.Fatalf("%s: %d of 2000 picks on avoided instances, want none", c.name, avoided)
		}
	}
	// Zone a all out, zone b whole: no panic, Avoid holds.
	s := mustNew(t, WithLocality("a"))
	s.Update(zoned(4, 2))
	s.SetUsable("i0000", false)
	s.SetUsable("i0001", false)
	local := func(in *registry.Instance) bool { return in.Zone == "a" }
	if got := localFraction(t, s, PickOptions{Avoid: local}, 1000); got != 0 {
		t.Fatalf("zone a out, b healthy: %.3f of picks local, want none (no panic)", got)
	}
}

// TestLocalityOptionsValidated: out-of-range tuning is an error naming
// the option.
func TestLocalityOptionsValidated(t *testing.T) {
	for _, c := range []struct {
		opt  Option
		name string
	}{
		{WithOverprovisioning(0.5), "overprovisioning"},
		{WithOverprovisioning(math.NaN()), "overprovisioning"},
		{WithPanicThreshold(-1), "panic threshold"},
		{WithPanicThreshold(101), "panic threshold"},
	} {
		_, err := New(WithLocality("a"), c.opt)
		if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), c.name) {
			t.Errorf("New with a bad %s: %v, want ErrInvalid naming it", c.name, err)
		}
	}
	s := mustNew(t, WithLocality("a"), WithOverprovisioning(1))
	s.Update(zoned(4, 2))
	s.SetUsable("i0000", false)
	if got := s.LocalShare(); math.Abs(got-0.5) > 1e-9 {
		t.Fatalf("overprovisioning 1, half the zone out: local share %v, want 0.5", got)
	}
}

// TestLocalityEndpoint: a pick for a named endpoint follows the tiers
// too, and their shares after SetUsable.
func TestLocalityEndpoint(t *testing.T) {
	sn := zoned(4, 2)
	for i := range sn.Instances {
		in := &sn.Instances[i]
		in.Endpoints = []registry.Endpoint{{Name: "http", Address: in.Address}, {Name: "grpc", Address: strings.Replace(in.Address, ":80", ":90", 1)}}
	}
	s := mustNew(t, WithLocality("a"))
	s.Update(sn)
	o := PickOptions{Endpoint: "grpc"}
	if got := localFraction(t, s, o, 1000); got != 1 {
		t.Fatalf("healthy zone: %.3f of grpc picks local, want 1", got)
	}
	s.SetUsable("i0000", false)
	s.SetUsable("i0001", false)
	for range 1000 {
		in, done, err := s.Pick(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		done.Finish(nil)
		if in.Zone != "b" || !strings.HasSuffix(in.Address, ":90") {
			t.Fatalf("zone a out: grpc pick %s in zone %s at %s, want zone b's grpc port", in.ID, in.Zone, in.Address)
		}
	}
	s.SetUsable("i0000", true)
	s.SetUsable("i0001", true)
	if got := localFraction(t, s, o, 1000); got != 1 {
		t.Fatalf("zone back: %.3f of grpc picks local, want 1", got)
	}
}
