package selector

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/roster-go/roster/registry"
)

func TestFilters(t *testing.T) {
	s := snap(6)
	for i := range s.Instances {
		in := &s.Instances[i]
		in.Version = []string{"1.0", "1.1"}[i%2]
		in.Zone = []string{"a", "b", "b"}[i%3]
		in.Tags = []string{"x"}
		if i == 0 {
			in.Tags = append(in.Tags, "canary")
		}
		in.Metadata = map[string]string{"shard": fmt.Sprint(i % 2)}
	}
	ids := func(f Filter) []string {
		var out []string
		for _, in := range f(s.Instances) {
			out = append(out, in.ID)
		}
		return out
	}
	for _, c := range []struct {
		name string
		f    Filter
		want []string
	}{
		{"version", Version("1.1"), []string{"i0001", "i0003", "i0005"}},
		{"versions", Version("1.0", "1.1"), []string{"i0000", "i0001", "i0002", "i0003", "i0004", "i0005"}},
		{"tags", Tags("x", "canary"), []string{"i0000"}},
		{"metadata", Metadata(map[string]string{"shard": "0"}), []string{"i0000", "i0002", "i0004"}},
		{"zone", PreferZone("a", 2), []string{"i0000", "i0003"}},
		{"zone spill-over", PreferZone("a", 3), []string{"i0000", "i0001", "i0002", "i0003", "i0004", "i0005"}},
		{"zone unknown", PreferZone("z", 1), []string{"i0000", "i0001", "i0002", "i0003", "i0004", "i0005"}},
	} {
		if got := ids(c.f); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	// A draining local instance does not count as healthy.
	s.Instances[3].Weight = 0
	if got := ids(PreferZone("a", 2)); len(got) != 6 {
		t.Errorf("zone a with one draining instance: %v, want spill-over to all", got)
	}
	s.Instances[3].Weight = 100
	// Filters never modify their input.
	if s.Instances[0].ID != "i0000" || len(s.Instances) != 6 {
		t.Fatal("filter modified the snapshot")
	}
}

func TestSubset(t *testing.T) {
	s := snap(100)
	a := Subset(10, "client-a")(s.Instances)
	b := Subset(10, "client-b")(s.Instances)
	if len(a) != 10 || len(b) != 10 {
		t.Fatalf("subset sizes %d, %d", len(a), len(b))
	}
	if !slices.IsSortedFunc(a, func(x, y registryInstance) int { return cmpString(x.ID, y.ID) }) {
		t.Error("subset not in ID order")
	}
	again := Subset(10, "client-a")(s.Instances)
	if fmt.Sprint(again) != fmt.Sprint(a) {
		t.Error("subset not deterministic")
	}
	if fmt.Sprint(a) == fmt.Sprint(b) {
		t.Error("two clients got the same subset")
	}
	// Removing an instance outside the subset leaves the subset alone;
	// removing one inside replaces only that one.
	in := map[string]bool{}
	for _, x := range a {
		in[x.ID] = true
	}
	var outside, inside int = -1, -1
	for i, x := range s.Instances {
		if in[x.ID] && inside < 0 {
			inside = i
		}
		if !in[x.ID] && outside < 0 {
			outside = i
		}
	}
	without := func(i int) []registryInstance {
		return append(append([]registryInstance(nil), s.Instances[:i]...), s.Instances[i+1:]...)
	}
	if got := Subset(10, "client-a")(without(outside)); fmt.Sprint(got) != fmt.Sprint(a) {
		t.Error("removing an instance outside the subset changed it")
	}
	got := Subset(10, "client-a")(without(inside))
	common := 0
	for _, x := range got {
		if in[x.ID] {
			common++
		}
	}
	if common != 9 {
		t.Errorf("removing a member changed %d members, want 1", 10-common)
	}
	// Selector with a subset filter only ever picks inside it.
	sel := mustNew(t, WithStrategy(Random), WithFilters(Subset(5, "me")))
	sel.Update(s)
	if sel.Len() != 5 {
		t.Fatalf("Len %d, want 5", sel.Len())
	}
}

type registryInstance = registry.Instance

func cmpString(a, b string) int { return strings.Compare(a, b) }
