package selector_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// A selector following a service through the registry's watch cache.
func Example() {
	ctx := context.Background()
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	defer reg.Close()
	lease, _ := reg.Register(ctx, registry.Instance{Service: "user-svc", Address: "10.0.0.1:8080"})
	defer lease.Deregister(ctx)

	w, _ := reg.Watch(ctx, "user-svc")
	defer w.Close()
	sel, _ := selector.New(selector.WithStrategy(selector.P2CEWMA))
	if err := sel.Start(ctx, w); err != nil { // applies the first snapshot
		fmt.Println(err)
		return
	}
	defer sel.Close()

	inst, done, err := sel.Pick(ctx, selector.PickOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	// ... call inst.Address ...
	done.Finish(nil) // the selector times the call on its coarse clock
	fmt.Println(inst.Address)
	// Output: 10.0.0.1:8080
}

func instances(addrs ...string) registry.Snapshot {
	s := registry.Snapshot{Service: "cart"}
	for i, a := range addrs {
		s.Instances = append(s.Instances, registry.Instance{
			ID: fmt.Sprint("cart-", i), Service: "cart", Address: a, Weight: registry.DefaultWeight,
		})
	}
	return s
}

// Consistent hashing keeps a user on one instance; when another instance
// leaves, the user stays where it was.
func ExampleSelector_Pick_consistentHash() {
	ctx := context.Background()
	sel, _ := selector.New(selector.WithStrategy(selector.ConsistentHash))
	sel.Update(instances("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80"))

	first, _, _ := sel.Pick(ctx, selector.PickOptions{Key: "user-42"})
	again, _, _ := sel.Pick(ctx, selector.PickOptions{Key: "user-42"})
	fmt.Println("same instance:", first.Address == again.Address)

	var rest []string
	for _, a := range []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80"} {
		if a != first.Address && len(rest) < 2 {
			continue // drop two other instances
		}
		rest = append(rest, a)
	}
	sel.Update(instances(rest...))
	after, _, _ := sel.Pick(ctx, selector.PickOptions{Key: "user-42"})
	fmt.Println("still there:", after.Address == first.Address)
	// Output:
	// same instance: true
	// still there: true
}

// A retry loop never picks the same instance twice; when every instance
// was tried, Pick says so with ErrAllExcluded.
func ExamplePickOptions_exclude() {
	ctx := context.Background()
	sel, _ := selector.New(selector.WithStrategy(selector.RoundRobin))
	sel.Update(instances("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"))

	var tried []string
	exclude := func(in *registry.Instance) bool {
		for _, id := range tried {
			if id == in.ID {
				return true
			}
		}
		return false
	}
	for attempt := 1; ; attempt++ {
		inst, done, err := sel.Pick(ctx, selector.PickOptions{Exclude: exclude})
		if errors.Is(err, selector.ErrAllExcluded) {
			fmt.Println("attempt", attempt, "nothing left to try")
			break
		}
		tried = append(tried, inst.ID)
		done.Done(errors.New("unavailable"), time.Millisecond)
	}
	fmt.Println("distinct instances tried:", len(tried))
	// Output:
	// attempt 4 nothing left to try
	// distinct instances tried: 3
}

// Unknown strategy names fail at construction, as configuration errors
// should.
func ExampleParseStrategy() {
	_, err := selector.ParseStrategy("fastest")
	fmt.Println(errors.Is(err, registry.ErrInvalid))
	s, _ := selector.ParseStrategy("weighted_round_robin")
	fmt.Println(s == selector.WeightedRoundRobin)
	// Output:
	// true
	// true
}

// Tried and Avoid are relaxed in one order rather than fail the pick: an
// untried, admitted instance; then a tried, admitted one; then any that
// Exclude lets through. middleware.Client and contrib/rostergrpc both pick this
// way (Tried: the call's earlier attempts; Avoid: quarantined instances).
func ExamplePickOptions_fallback() {
	ctx := context.Background()
	sel, _ := selector.New(selector.WithStrategy(selector.RoundRobin))
	sel.Update(instances("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80")) // cart-0, cart-1, cart-2
	is := func(ids ...string) func(*registry.Instance) bool {
		return func(in *registry.Instance) bool { return slices.Contains(ids, in.ID) }
	}
	for _, o := range []selector.PickOptions{
		{Tried: is("cart-0"), Avoid: is("cart-1")},
		{Tried: is("cart-2"), Avoid: is("cart-0", "cart-1")},
		{Tried: is("cart-2"), Avoid: is("cart-0", "cart-1", "cart-2"), Exclude: is("cart-1", "cart-2")},
	} {
		in, _, err := sel.Pick(ctx, o)
		fmt.Println(in.ID, err)
	}
	// Output:
	// cart-2 <nil>
	// cart-2 <nil>
	// cart-0 <nil>
}

// A Picker is the view one Update built. Holding it keeps picking from
// that set while the selector moves on, as a gRPC balancer's pickers do.
func ExampleSelector_Picker() {
	ctx := context.Background()
	sel, _ := selector.New(selector.WithStrategy(selector.RoundRobin))
	sel.Update(instances("10.0.0.1:80"))
	old := sel.Picker()
	sel.Update(instances("10.0.0.9:80"))

	was, _, _ := old.Pick(ctx, selector.PickOptions{})
	now, _, _ := sel.Pick(ctx, selector.PickOptions{})
	fmt.Println(was.Address, now.Address)
	// Output: 10.0.0.1:80 10.0.0.9:80
}

// A header pins one call to a version; the other calls are split, 5 % to
// the canary, each user always on the same side.
func ExampleWithRoute() {
	ctx := context.Background()
	snap := instances("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80")
	snap.Instances[0].Version, snap.Instances[1].Version, snap.Instances[2].Version = "1.0", "1.0", "2.0"
	sel, _ := selector.New(selector.WithSplit(selector.Split{Route: selector.Route{Version: "2.0"}, Percent: 5}))
	sel.Update(snap)

	pinned := selector.WithRoute(ctx, selector.Route{Version: "2.0"}) // e.g. from X-Roster-Version
	inst, done, _ := sel.Pick(pinned, selector.PickOptions{})
	done.Finish(nil)
	fmt.Println("pinned:", inst.Version)

	canary := 0
	for i := range 1000 {
		inst, done, _ := sel.Pick(ctx, selector.PickOptions{Key: fmt.Sprint("user-", i)})
		done.Finish(nil)
		if inst.Version == "2.0" {
			canary++
		}
	}
	fmt.Println("split: about 5 % to the canary:", canary > 20 && canary < 80)
	// Output:
	// pinned: 2.0
	// split: about 5 % to the canary: true
}

// A pick for the "grpc" endpoint: an instance that announces it is
// reached there, a one-port instance on its address, and an instance
// whose only endpoint is http is not picked.
func ExampleSelector_Pick_endpoint() {
	ctx := context.Background()
	sel, _ := selector.New(selector.WithStrategy(selector.RoundRobin))
	sel.Update(registry.Snapshot{Service: "shop", Instances: []registry.Instance{
		{ID: "a", Address: "10.0.0.1:8080", Weight: 100, Endpoints: []registry.Endpoint{
			{Name: "http", Address: "10.0.0.1:8080"}, {Name: "grpc", Address: "10.0.0.1:9090"}}},
		{ID: "b", Address: "10.0.0.2:7000", Weight: 100},
		{ID: "c", Address: "10.0.0.3:8080", Weight: 100, Endpoints: []registry.Endpoint{
			{Name: "http", Address: "10.0.0.3:8080"}}},
	}})
	var got []string
	for range 4 {
		inst, done, _ := sel.Pick(ctx, selector.PickOptions{Endpoint: "grpc"})
		done.Finish(nil)
		got = append(got, inst.ID+" "+inst.Address)
	}
	slices.Sort(got)
	fmt.Println(slices.Compact(got))
	// Output: [a 10.0.0.1:9090 b 10.0.0.2:7000]
}

// Locality that follows health: zone a keeps its calls while enough of
// it is usable, and spills to zone b in proportion when it is not.
func ExampleWithLocality() {
	sel, _ := selector.New(selector.WithLocality("a"))
	sel.Update(registry.Snapshot{Service: "user-svc", Instances: []registry.Instance{
		{ID: "a1", Zone: "a", Address: "10.0.0.1:80", Weight: 100},
		{ID: "a2", Zone: "a", Address: "10.0.0.2:80", Weight: 100},
		{ID: "b1", Zone: "b", Address: "10.0.1.1:80", Weight: 100},
		{ID: "b2", Zone: "b", Address: "10.0.1.2:80", Weight: 100},
	}})
	fmt.Printf("healthy: %.2f local\n", sel.LocalShare())
	sel.SetUsable("a1", false) // what a quarantine's ejection does
	fmt.Printf("a1 out: %.2f local\n", sel.LocalShare())
	sel.SetUsable("a2", false)
	fmt.Printf("zone out: %.2f local\n", sel.LocalShare())
	in, done, _ := sel.Pick(context.Background(), selector.PickOptions{})
	done.Finish(nil)
	fmt.Println("picked zone", in.Zone)
	// Output:
	// healthy: 1.00 local
	// a1 out: 0.70 local
	// zone out: 0.00 local
	// picked zone b
}

// ExampleWithRegion: zone a fails over to zone b of its own region
// before region r2 takes anything.
func ExampleWithRegion() {
	sel, _ := selector.New(selector.WithLocality("a"), selector.WithRegion("r1"))
	sel.Update(registry.Snapshot{Service: "user-svc", Instances: []registry.Instance{
		{ID: "a1", Zone: "a", Region: "r1", Address: "10.0.0.1:80", Weight: 100},
		{ID: "a2", Zone: "a", Region: "r1", Address: "10.0.0.2:80", Weight: 100},
		{ID: "b1", Zone: "b", Region: "r1", Address: "10.0.1.1:80", Weight: 100},
		{ID: "c1", Zone: "c", Region: "r2", Address: "10.1.0.1:80", Weight: 100},
	}})
	sel.SetUsable("a1", false) // what a quarantine's ejection does
	zone, region, rest := sel.TierShares()
	fmt.Printf("a1 out: zone %.2f, region %.2f, elsewhere %.2f\n", zone, region, rest)
	sel.SetUsable("a2", false)
	zone, region, rest = sel.TierShares()
	fmt.Printf("zone a out: zone %.2f, region %.2f, elsewhere %.2f\n", zone, region, rest)
	sel.SetUsable("b1", false)
	zone, region, rest = sel.TierShares()
	fmt.Printf("region r1 out: zone %.2f, region %.2f, elsewhere %.2f\n", zone, region, rest)
	// Output:
	// a1 out: zone 0.70, region 0.30, elsewhere 0.00
	// zone a out: zone 0.00, region 1.00, elsewhere 0.00
	// region r1 out: zone 0.00, region 0.00, elsewhere 1.00
}
