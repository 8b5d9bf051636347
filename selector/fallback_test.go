package selector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/roster-go/roster/registry"
)

// idIn returns a predicate true for the instances whose IDs are listed.
func idIn(ids ...string) func(*registry.Instance) bool {
	return func(i *registry.Instance) bool { return slices.Contains(ids, i.ID) }
}

// The fallback order of PickOptions, for every strategy, with and without
// a key: untried and admitted, then tried but admitted, then anything;
// Exclude holds throughout.
func TestFallbackOrder(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name                  string
		exclude, tried, avoid []string
		want                  []string // acceptable picks; nil: ErrAllExcluded
	}{
		{"untried and admitted first", nil, []string{"i0000", "i0001"}, []string{"i0000", "i0002"}, []string{"i0003"}},
		{"then tried but admitted", nil, []string{"i0000", "i0001", "i0003"}, []string{"i0000", "i0002"}, []string{"i0001", "i0003"}},
		{"then anything", nil, []string{"i0000", "i0001"}, []string{"i0000", "i0001", "i0002", "i0003"}, []string{"i0000", "i0001", "i0002", "i0003"}},
		{"exclude holds when tried is relaxed", []string{"i0001"}, []string{"i0000", "i0001", "i0003"}, []string{"i0000", "i0002"}, []string{"i0003"}},
		{"exclude holds when everything is relaxed", []string{"i0000", "i0003"}, []string{"i0001"}, []string{"i0001", "i0002"}, []string{"i0001", "i0002"}},
		{"tried alone is relaxed", nil, []string{"i0000", "i0001", "i0002", "i0003"}, nil, []string{"i0000", "i0001", "i0002", "i0003"}},
		{"avoid alone is relaxed", nil, nil, []string{"i0000", "i0001", "i0002", "i0003"}, []string{"i0000", "i0001", "i0002", "i0003"}},
		{"only exclude fails", []string{"i0000", "i0001", "i0002", "i0003"}, []string{"i0000"}, []string{"i0001"}, nil},
	}
	for _, st := range Strategies() {
		s := mustNew(t, WithStrategy(st))
		s.Update(snap(4))
		for _, c := range cases {
			o := PickOptions{}
			if c.exclude != nil {
				o.Exclude = idIn(c.exclude...)
			}
			if c.tried != nil {
				o.Tried = idIn(c.tried...)
			}
			if c.avoid != nil {
				o.Avoid = idIn(c.avoid...)
			}
			for i := range 50 {
				o.Key = fmt.Sprint("user-", i%5) // hashing strategies: keyed half the time
				if i%2 == 0 {
					o.Key = ""
				}
				got, done, err := s.Pick(ctx, o)
				done.Done(nil, time.Millisecond)
				switch {
				case c.want == nil && !errors.Is(err, ErrAllExcluded):
					t.Fatalf("%s, %s: Pick = %s, %v; want ErrAllExcluded", st, c.name, got.ID, err)
				case c.want != nil && (err != nil || !slices.Contains(c.want, got.ID)):
					t.Fatalf("%s, %s: Pick = %s, %v; want one of %v", st, c.name, got.ID, err, c.want)
				}
			}
		}
	}
}

// Within each step draining instances come last, but an untried draining
// instance still goes before a tried serving one.
func TestFallbackDrainingWithinStep(t *testing.T) {
	ctx := context.Background()
	s := mustNew(t, WithStrategy(RoundRobin))
	s.Update(snap(3, 100, 100, 0)) // i0002 is draining
	o := PickOptions{Tried: idIn("i0000", "i0001")}
	for range 10 {
		if got, _, err := s.Pick(ctx, o); err != nil || got.ID != "i0002" {
			t.Fatalf("Pick = %s, %v; want the untried draining i0002", got.ID, err)
		}
	}
	o = PickOptions{Tried: idIn("i0000"), Avoid: idIn("i0001")}
	for range 10 {
		if got, _, err := s.Pick(ctx, o); err != nil || got.ID != "i0002" {
			t.Fatalf("Pick = %s, %v; want i0002 (untried, admitted, draining)", got.ID, err)
		}
	}
}

// Avoid accepting an instance means Pick returns it: a quarantine's
// probe admission is never spent on an instance that is then not used.
func TestAvoidAcceptsOnlyWhatIsPicked(t *testing.T) {
	ctx := context.Background()
	for _, st := range Strategies() {
		s := mustNew(t, WithStrategy(st))
		s.Update(snap(6, 100, 100, 100, 100, 0, 0))
		for i := range 200 {
			var accepted []string
			o := PickOptions{
				Key:     fmt.Sprint("k", i),
				Exclude: idIn("i0001"),
				Tried:   idIn("i0000", "i0002", "i0004"),
				Avoid: func(in *registry.Instance) bool {
					if (in.ID == "i0003" || in.ID == "i0005") && i%3 != 0 {
						return true
					}
					accepted = append(accepted, in.ID)
					return false
				},
			}
			got, done, err := s.Pick(ctx, o)
			done.Done(nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(accepted) > 1 || len(accepted) == 1 && accepted[0] != got.ID {
				t.Fatalf("%s: Avoid accepted %v, Pick returned %s", st, accepted, got.ID)
			}
		}
	}
}

// A Picker is immutable: after an Update it still picks from its own set,
// and its Done still balances the selector's in-flight counts.
func TestPickerKeepsItsSet(t *testing.T) {
	ctx := context.Background()
	for _, st := range Strategies() {
		s := mustNew(t, WithStrategy(st), WithBoundedLoad(1.25)) // every strategy counts in flight
		if _, _, err := s.Picker().Pick(ctx, PickOptions{}); !errors.Is(err, ErrNoInstances) {
			t.Fatalf("%s: Picker before any Update: %v, want ErrNoInstances", st, err)
		}
		s.Update(snap(3))
		old := s.Picker()
		next := snap(6)
		next.Instances = next.Instances[3:] // i0003..i0005: none of old's
		s.Update(next)
		if s.Picker() == old || old.size() != 3 || s.Len() != 3 {
			t.Fatalf("%s: Update did not publish a new Picker", st)
		}
		for i := range 30 {
			got, d, err := old.Pick(ctx, PickOptions{Key: fmt.Sprint(i)})
			if err != nil || got.ID > "i0002" {
				t.Fatalf("%s: old picker picked %s, %v; want one of i0000..i0002", st, got.ID, err)
			}
			d.Done(nil, time.Millisecond)
			got, d, _ = s.Pick(ctx, PickOptions{Key: fmt.Sprint(i)})
			if got.ID < "i0003" {
				t.Fatalf("%s: selector picked %s from the old set", st, got.ID)
			}
			d.Done(nil, time.Millisecond)
		}
		if n := s.sh.count(&s.sh.total); n != 0 {
			t.Fatalf("%s: in-flight total %d after every Done", st, n)
		}
	}
}

// With one instance, avoided or tried, a relaxed step still takes it:
// a route that narrows a pick to one quarantined instance picks it
// rather than fail.
func TestFallbackOneInstance(t *testing.T) {
	ctx := context.Background()
	for _, st := range Strategies() {
		s := mustNew(t, WithStrategy(st))
		s.Update(snap(1))
		for _, o := range []PickOptions{{Avoid: idIn("i0000")}, {Tried: idIn("i0000")}, {Tried: idIn("i0000"), Avoid: idIn("i0000")}} {
			got, done, err := s.Pick(ctx, o)
			done.Done(nil, time.Millisecond)
			if err != nil || got.ID != "i0000" {
				t.Fatalf("%s: Pick = %q, %v; want i0000", st, got.ID, err)
			}
		}
		if _, _, err := s.Pick(ctx, PickOptions{Exclude: idIn("i0000")}); !errors.Is(err, ErrAllExcluded) {
			t.Fatalf("%s: an excluded instance: %v, want ErrAllExcluded", st, err)
		}
	}
}
