package policy_test

import (
	"context"
	"errors"
	"testing"

	"github.com/roster-go/roster/policy"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// TestLocalityTiersValidate: region, overprovisioning and panic
// threshold are accepted in their ranges, and out of them are a
// *FieldError naming the field.
func TestLocalityTiersValidate(t *testing.T) {
	good := []policy.Locality{
		{Zone: "a", Region: "r1"},
		{Zone: "a", Overprovisioning: 1},
		{Zone: "a", Overprovisioning: 100, PanicThreshold: 100},
		{Zone: "a", PanicThreshold: -1},
	}
	for _, l := range good {
		if err := (policy.Policy{Locality: &l}).Validate(); err != nil {
			t.Errorf("%+v: %v", l, err)
		}
	}
	bad := []struct {
		l     policy.Locality
		field string
	}{
		{policy.Locality{Region: "r1"}, "locality.region"},
		{policy.Locality{Zone: "a", Overprovisioning: 0.5}, "locality.overprovisioning"},
		{policy.Locality{Zone: "a", Overprovisioning: 101}, "locality.overprovisioning"},
		{policy.Locality{Zone: "a", PanicThreshold: 101}, "locality.panic_threshold"},
		{policy.Locality{Zone: "a", PanicThreshold: -2}, "locality.panic_threshold"},
		{policy.Locality{Zone: "a", PanicThreshold: 12.5}, "locality.panic_threshold"},
	}
	for _, b := range bad {
		err := policy.Policy{Locality: &b.l}.Validate()
		var fe *policy.FieldError
		if !errors.As(err, &fe) || fe.Field != b.field || !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("%+v: %v; want a *FieldError on %s", b.l, err, b.field)
		}
	}
}

// TestLocalityRegionApplied: a policy's region reaches the selector
// built with its options. With zone a down, the picks spill to zone b,
// of the caller's region, and none to zone c of another; without the
// region both take them. A running selector refuses a region change.
func TestLocalityRegionApplied(t *testing.T) {
	snap := registry.Snapshot{Service: "api"}
	for i, z := range []string{"a", "b", "c"} {
		snap.Instances = append(snap.Instances, registry.Instance{ID: z, Service: "api", Address: "10.0.0." + string(rune('1'+i)) + ":80",
			Zone: z, Region: []string{"r1", "r1", "r2"}[i], Weight: registry.DefaultWeight})
	}
	picks := func(l policy.Locality) map[string]int {
		t.Helper()
		opts, err := policy.Policy{Strategy: "round_robin", Locality: &l}.SelectorOptions()
		if err != nil {
			t.Fatal(err)
		}
		s, err := selector.New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		s.Baseline(snap)
		s.Update(snap)
		s.SetUsable("a", false)
		got := map[string]int{}
		for range 200 {
			in, done, err := s.Pick(context.Background(), selector.PickOptions{Exclude: func(in *registry.Instance) bool { return in.ID == "a" }})
			if err != nil {
				t.Fatal(err)
			}
			done.Done(nil, 0)
			got[in.ID]++
		}
		if l.Region != "" {
			other, _ := policy.Policy{Locality: &policy.Locality{Zone: "a", Region: "r2"}}.SelectorOptions()
			if err := s.Reconfigure(append(opts[:len(opts):len(opts)], other...)...); err == nil {
				t.Error("a running selector took a region change")
			}
		}
		return got
	}
	if got := picks(policy.Locality{Zone: "a", Region: "r1"}); got["b"] != 200 {
		t.Errorf("with region r1: picks %v; want all 200 on b", got)
	}
	if got := picks(policy.Locality{Zone: "a"}); got["c"] == 0 {
		t.Errorf("without a region: picks %v; want some on c", got)
	}
}
