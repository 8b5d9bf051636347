package rostergrpc_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	rostergrpc "github.com/roster-go/roster/contrib/rostergrpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/roster-go/roster/policy"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

func canaryPolicy(percent float64) policy.Policy {
	return policy.Policy{Split: []policy.SplitEntry{{Version: "2.0", Percent: percent}}}
}

// share makes n RPCs and returns how many the canary answered; every RPC
// must succeed.
func share(t *testing.T, c testpb.TestServiceClient, n int) int {
	t.Helper()
	got := 0
	for range n {
		name, err := call(context.Background(), c)
		if err != nil {
			t.Fatalf("an RPC failed: %v", err)
		}
		if name == "v2" {
			got++
		}
	}
	return got
}

// TestStoredSplitFollowed: a canary split stored at 5% applies from the
// first RPCs; moved to 50% by writing the stored policy, a running
// channel follows within 2 s, with no failed RPC, and the measured
// shares are within 4σ of the policy's.
func TestStoredSplitFollowed(t *testing.T) {
	ctx := context.Background()
	reg := openMem(t)
	for _, n := range []string{"v1a", "v1b", "v1c"} {
		startInstance(t, reg, registry.Instance{Service: "echo", Version: "1.0"}, n, 0)
	}
	startInstance(t, reg, registry.Instance{Service: "echo", Version: "2.0"}, "v2", 0)
	if _, err := policy.Put(ctx, reg, "echo", canaryPolicy(5)); err != nil {
		t.Fatal(err)
	}
	c := dial(t, reg, "echo", rostergrpc.WithStrategy(selector.RoundRobin))
	waitAnswered(t, c, "v1a", "v1b", "v1c")
	const calls = 400
	// Binomial(400, 0.05): σ = 4.4; 4σ around 20.
	if got := share(t, c, calls); got < 3 || got > 37 {
		t.Errorf("the 5%% canary took %d of %d RPCs", got, calls)
	} else {
		t.Logf("the 5%% canary took %d of %d RPCs", got, calls)
	}

	if _, err := policy.Put(ctx, reg, "echo", canaryPolicy(50)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Followed: 15 of the last 30 RPCs to the canary, which a 5% split
	// does with a chance below 1e-11.
	var window []bool
	for {
		name, err := call(ctx, c)
		if err != nil {
			t.Fatalf("an RPC failed while the policy changed: %v", err)
		}
		window = append(window, name == "v2")
		if len(window) > 30 {
			window = window[1:]
		}
		n := 0
		for _, v := range window {
			if v {
				n++
			}
		}
		if n >= 15 {
			break
		}
		if time.Since(start) > 2*time.Second {
			t.Fatalf("the 50%% split was not followed within 2 s")
		}
	}
	t.Logf("the 50%% split was followed after %v", time.Since(start).Round(time.Millisecond))
	// Binomial(400, 0.5): σ = 10; 4σ around 200.
	if got := share(t, c, calls); got < 160 || got > 240 {
		t.Errorf("the 50%% canary took %d of %d RPCs", got, calls)
	} else {
		t.Logf("the 50%% canary took %d of %d RPCs", got, calls)
	}

	// Deleted: back to the code's configuration, no split: v2 is one of
	// four under round robin.
	if err := policy.Delete(ctx, reg, "echo"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "the split to end", func() bool {
		got := share(t, c, 40)
		return got >= 5 && got <= 15
	})
}

// TestPolicyInCode: WithPolicy's filter applies to every pick, a stored
// policy replaces it, and WithStoredPolicies(false) ignores the stored
// one.
func TestPolicyInCode(t *testing.T) {
	ctx := context.Background()
	reg := openMem(t)
	startInstance(t, reg, registry.Instance{Service: "echo", Version: "1.0"}, "v1", 0)
	startInstance(t, reg, registry.Instance{Service: "echo", Version: "2.0"}, "v2", 0)
	if _, err := policy.Put(ctx, reg, "echo", policy.Policy{Filter: &policy.Filter{Version: "1.0"}}); err != nil {
		t.Fatal(err)
	}
	only2 := rostergrpc.WithPolicy("echo", policy.Policy{Filter: &policy.Filter{Version: "2.0"}})
	code := dial(t, reg, "echo", only2, rostergrpc.WithStoredPolicies(false))
	stored := dial(t, reg, "echo", only2)
	for range 50 {
		if name, err := call(ctx, code); err != nil || name != "v2" {
			t.Fatalf("WithPolicy's filter on version 2.0: got %q, %v", name, err)
		}
		if name, err := call(ctx, stored); err != nil || name != "v1" {
			t.Fatalf("the stored filter on version 1.0: got %q, %v", name, err)
		}
	}
	if err := policy.Delete(ctx, reg, "echo"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "WithPolicy's filter back", func() bool {
		name, err := call(ctx, stored)
		if err != nil {
			t.Fatal(err)
		}
		return name == "v2"
	})
}

// TestBadPolicy: NewClient names an invalid policy's field in a typed
// error, and makes no channel.
func TestBadPolicy(t *testing.T) {
	reg := openMem(t)
	cc, err := rostergrpc.NewClient(reg, "echo",
		[]rostergrpc.Option{rostergrpc.WithPolicy("echo", canaryPolicy(150))},
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err == nil {
		cc.Close()
		t.Fatal("a split of 150% was accepted")
	}
	var fe *policy.FieldError
	if !errors.As(err, &fe) || fe.Field != "split[0].percent" || !errors.Is(err, registry.ErrInvalid) {
		t.Errorf("%v: want a *policy.FieldError on split[0].percent", err)
	}
}

// A channel whose service policy sends 5% of the RPCs to version v2, and
// that follows the policy stored in the registry for the service.
func ExampleWithPolicy() {
	ctx := context.Background()
	reg, _ := registry.Open(ctx, "mem://")
	defer reg.Close()
	p := policy.Policy{Strategy: "round_robin", Split: []policy.SplitEntry{{Version: "v2", Percent: 5}}}
	conn, err := rostergrpc.NewClient(reg, "inventory", []rostergrpc.Option{rostergrpc.WithPolicy("inventory", p)},
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	// Raising the canary for the whole fleet is one write; running
	// channels follow it.
	if _, err := policy.Put(ctx, reg, "inventory", policy.Policy{Split: []policy.SplitEntry{{Version: "v2", Percent: 50}}}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(conn.Target())
	// Output: roster:///inventory
}

// TestPolicyHashKey: a policy's hash_key names the outgoing metadata
// key whose value places an RPC under consistent_hash: RPCs of one
// tenant go to one instance, and tenants spread over the instances.
func TestPolicyHashKey(t *testing.T) {
	reg := openMem(t)
	for _, n := range []string{"a", "b", "c"} {
		startServer(t, reg, "echo", n, 0)
	}
	c := dial(t, reg, "echo", rostergrpc.WithPolicy("echo", policy.Policy{Strategy: "consistent_hash", HashKey: "x-tenant"}))
	waitAnswered(t, c, "a", "b", "c")
	used := map[string]bool{}
	for i := range 30 {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant", fmt.Sprint("tenant-", i))
		first := ""
		for range 5 {
			name, err := call(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			if first == "" {
				first = name
			} else if name != first {
				t.Fatalf("tenant-%d went to %s then %s", i, first, name)
			}
		}
		used[first] = true
	}
	if len(used) < 2 {
		t.Errorf("30 tenants all went to %v: the key was not read", used)
	}
}
