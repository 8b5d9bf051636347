package selector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/roster-go/roster/registry"
)

// ported returns a snapshot of three kinds of instance, nine in all:
// i0..i2 serve http (primary) and grpc, i3..i5 have one port, and
// i6..i8 serve grpc alone (their primary is named).
func ported() registry.Snapshot {
	s := snap(9)
	for i := range s.Instances {
		in := &s.Instances[i]
		switch {
		case i < 3:
			in.Endpoints = []registry.Endpoint{
				{Name: "http", Address: in.Address},
				{Name: "grpc", Address: fmt.Sprintf("10.1.0.%d:90", i)},
			}
		case i >= 6:
			in.Endpoints = []registry.Endpoint{{Name: "grpc", Address: in.Address}}
		}
		if i%2 == 1 {
			in.Version = "2.0"
		}
	}
	return s
}

// picked returns the addresses of n picks with o, sorted and unique.
func picked(t *testing.T, s *Selector, ctx context.Context, o PickOptions, n int) []string {
	t.Helper()
	var out []string
	for range n {
		in, done, err := s.Pick(ctx, o)
		if err != nil {
			t.Fatalf("Pick(%+v): %v", o, err)
		}
		done.Finish(nil)
		if !slices.Contains(out, in.Address) {
			out = append(out, in.Address)
		}
	}
	slices.Sort(out)
	return out
}

// TestPickEndpoint: a pick for a name reaches the instances that serve
// it, as Instance.Endpoint says, at that endpoint's address.
func TestPickEndpoint(t *testing.T) {
	ctx := context.Background()
	want := map[string][]string{
		"":        {"10.0.0.0:80", "10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80", "10.0.0.5:80", "10.0.0.6:80", "10.0.0.7:80", "10.0.0.8:80"},
		"grpc":    {"10.0.0.3:80", "10.0.0.4:80", "10.0.0.5:80", "10.0.0.6:80", "10.0.0.7:80", "10.0.0.8:80", "10.1.0.0:90", "10.1.0.1:90", "10.1.0.2:90"},
		"http":    {"10.0.0.0:80", "10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80", "10.0.0.5:80"},
		"metrics": {"10.0.0.3:80", "10.0.0.4:80", "10.0.0.5:80"},
	}
	for _, st := range Strategies() {
		s := mustNew(t, WithStrategy(st))
		s.Update(ported())
		for name, w := range want {
			got := picked(t, s, ctx, PickOptions{Endpoint: name}, 1000)
			// Round robin reaches every instance; latency and load
			// aware strategies may leave one out, but never pick
			// outside the set.
			if st == RoundRobin && !slices.Equal(got, w) || !isSubset(got, w) {
				t.Errorf("%s: Endpoint %q reached %v, want %v", st, name, got, w)
			}
		}
	}
}

func isSubset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// TestPickEndpointRoutes: a Route, the context's Route and a Split
// narrow the instances that serve the name, with their addresses.
func TestPickEndpointRoutes(t *testing.T) {
	s := mustNew(t, WithStrategy(RoundRobin), WithSplit(Split{Route: Route{Tag: "canary"}, Percent: 100}))
	snap := ported()
	snap.Instances[1].Tags = []string{"canary"}
	s.Update(snap)
	v2 := Route{Version: "2.0"}
	if got, want := picked(t, s, context.Background(), PickOptions{Endpoint: "grpc", Route: v2}, 200),
		[]string{"10.0.0.3:80", "10.0.0.5:80", "10.0.0.7:80", "10.1.0.1:90"}; !slices.Equal(got, want) {
		t.Errorf("grpc, version 2.0: %v, want %v", got, want)
	}
	ctx := WithRoute(context.Background(), v2)
	if got, want := picked(t, s, ctx, PickOptions{Endpoint: "http"}, 200),
		[]string{"10.0.0.1:80", "10.0.0.3:80", "10.0.0.5:80"}; !slices.Equal(got, want) {
		t.Errorf("http, version 2.0 from the context: %v, want %v", got, want)
	}
	// The split sends every call without a Route to the canary, at the
	// endpoint's address.
	if got, want := picked(t, s, context.Background(), PickOptions{Endpoint: "grpc"}, 200),
		[]string{"10.1.0.1:90"}; !slices.Equal(got, want) {
		t.Errorf("grpc through the split: %v, want %v", got, want)
	}
	if _, _, err := s.Pick(context.Background(), PickOptions{Endpoint: "metrics", Route: Route{Tag: "canary"}}); !errors.Is(err, ErrNoInstances) {
		t.Errorf("metrics of the canary, which names its primary: %v, want ErrNoInstances", err)
	}
}

// TestPickEndpointNoneServes: a name no instance serves fails as a Route
// that matches nothing does, and draining instances still serve last.
func TestPickEndpointNoneServes(t *testing.T) {
	s := mustNew(t)
	only := snap(2)
	for i := range only.Instances {
		only.Instances[i].Endpoints = []registry.Endpoint{{Name: "grpc", Address: only.Instances[i].Address}}
	}
	only.Instances[1].Weight = 0
	s.Update(only)
	if _, _, err := s.Pick(context.Background(), PickOptions{Endpoint: "http"}); !errors.Is(err, ErrNoInstances) {
		t.Errorf("http of grpc-only instances: %v, want ErrNoInstances", err)
	}
	ex := func(in *registry.Instance) bool { return in.ID == "i0000" }
	in, done, err := s.Pick(context.Background(), PickOptions{Endpoint: "grpc", Exclude: ex})
	if err != nil || in.ID != "i0001" {
		t.Fatalf("grpc with the active instance excluded: %s, %v; want the draining i0001", in.ID, err)
	}
	done.Finish(nil)
}

// TestEndpointPickersAreCached: a name's picker is prepared once per
// snapshot, and a snapshot without endpoints prepares none.
func TestEndpointPickersAreCached(t *testing.T) {
	s := mustNew(t)
	s.Update(snap(3))
	p := s.Picker()
	if p.ports {
		t.Fatal("a snapshot without endpoints: ports set")
	}
	s.Update(ported())
	p = s.Picker()
	if a, b := p.serving("grpc"), p.serving("grpc"); a != b || a == p {
		t.Errorf("serving(grpc) twice: %p, %p (root %p), want one cached picker", a, b, p)
	}
	for i := range maxNames + 2 {
		p.serving(fmt.Sprint("n", i))
	}
	if n := len(*p.routes.names.Load()); n != maxNames {
		t.Errorf("%d names cached, want the bound %d", n, maxNames)
	}
	s.Update(snap(3))
	if q := s.Picker(); q.routes.names.Load() != nil {
		t.Error("a new snapshot kept the names of the old one")
	}
}

// TestEndpointSharesInstanceState: the calls of every endpoint of an
// instance count in flight together, as one process's load.
func TestEndpointSharesInstanceState(t *testing.T) {
	s := mustNew(t, WithStrategy(LeastRequest))
	one := ported()
	one.Instances = one.Instances[:1]
	s.Update(one)
	in, d1, err := s.Pick(context.Background(), PickOptions{Endpoint: "grpc"})
	if err != nil || in.Address != "10.1.0.0:90" {
		t.Fatalf("grpc: %s, %v", in.Address, err)
	}
	_, d2, err := s.Pick(context.Background(), PickOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d1.ep != d2.ep {
		t.Error("the grpc and the primary picks of one instance have different state")
	}
	d1.Finish(nil)
	d2.Finish(nil)
}
