package rostergrpc_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	_ "github.com/roster-go/roster/backends/memory"
	rostergrpc "github.com/roster-go/roster/contrib/rostergrpc"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

func openMem(t *testing.T) *registry.Registry {
	t.Helper()
	reg, err := registry.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return reg
}

func TestRoundRobinFollowsRegistry(t *testing.T) {
	reg := openMem(t)
	a := startServer(t, reg, "echo", "a", 0)
	b := startServer(t, reg, "echo", "b", 0)
	c := startServer(t, reg, "echo", "c", 0)
	cl := dial(t, reg, "echo", rostergrpc.WithStrategy(selector.RoundRobin))
	ctx := context.Background()

	seen := map[string]int{}
	waitFor(t, 10*time.Second, "all three servers answer", func() bool {
		name, err := call(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		seen[name]++
		return len(seen) == 3
	})
	// Round robin over three READY instances: a full cycle hits each once.
	clear(seen)
	for range 30 {
		name, err := call(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		seen[name]++
	}
	if seen["a"] != 10 || seen["b"] != 10 || seen["c"] != 10 {
		t.Fatalf("round robin over 3 instances, 30 calls: %v", seen)
	}

	// Drain a (weight 0): it stays connected but gets nothing while
	// others are left.
	if err := a.lease.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	before := a.calls.Load()
	waitFor(t, 10*time.Second, "a drained", func() bool {
		before = a.calls.Load()
		for range 6 {
			if _, err := call(ctx, cl); err != nil {
				t.Fatal(err)
			}
		}
		return a.calls.Load() == before
	})
	// Deregister b: only c is left.
	if err := b.lease.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "only c answers", func() bool {
		name, err := call(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return name == "c"
	})
	for range 10 {
		if name, err := call(ctx, cl); err != nil || name != "c" {
			t.Fatalf("after drain a and deregister b: %q, %v", name, err)
		}
	}
	// The last active instance leaves: the draining one serves.
	if err := c.lease.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "draining a serves as last resort", func() bool {
		name, err := call(ctx, cl)
		return err == nil && name == "a"
	})
}

func TestEWMAPrefersFastInstance(t *testing.T) {
	reg := openMem(t)
	startServer(t, reg, "echo", "slow", 50*time.Millisecond)
	startServer(t, reg, "echo", "fast", 0)
	cl := dial(t, reg, "echo", rostergrpc.WithStrategy(selector.P2CEWMA))
	ctx := context.Background()
	seen := map[string]int{}
	waitFor(t, 10*time.Second, "both answer", func() bool {
		name, err := call(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		seen[name]++
		return len(seen) == 2
	})
	clear(seen)
	for range 100 {
		name, err := call(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		seen[name]++
	}
	// Latencies are fed back through Done: after its first answers the
	// slow instance (50ms vs about a millisecond) is only picked again when
	// its decayed estimate has fallen far enough.
	if seen["fast"] < 80 {
		t.Fatalf("p2c_ewma with a 50ms and a fast instance, 100 calls: %v; want ≥ 80 on fast", seen)
	}
}

func TestQuarantineEjectsFailingInstance(t *testing.T) {
	reg := openMem(t)
	bad := startServer(t, reg, "echo", "bad", 0)
	startServer(t, reg, "echo", "good", 0)
	bad.fail.Store(true)
	q := middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: 3, MaxEjectedPercent: 50})
	// No retries: every failure reaches the caller, so the test sees
	// exactly what the quarantine does.
	cl := dial(t, reg, "echo", rostergrpc.WithStrategy(selector.RoundRobin), rostergrpc.WithRetry(1), rostergrpc.WithQuarantine(q))
	ctx := context.Background()
	failures := 0
	waitFor(t, 10*time.Second, "bad ejected", func() bool {
		if _, err := call(ctx, cl); err != nil {
			failures++
		}
		return slices.Contains(q.Ejected("echo"), bad.lease.Instance().ID)
	})
	if failures != 3 {
		t.Fatalf("%d failures before ejection, want 3 (ConsecutiveFailures)", failures)
	}
	n := bad.calls.Load()
	for range 20 {
		if name, err := call(ctx, cl); err != nil || name != "good" {
			t.Fatalf("after ejection: %q, %v", name, err)
		}
	}
	if bad.calls.Load() != n {
		t.Fatalf("ejected instance got %d calls", bad.calls.Load()-n)
	}
}

func TestRetryAvoidsFailedInstance(t *testing.T) {
	reg := openMem(t)
	bad := startServer(t, reg, "echo", "bad", 0)
	startServer(t, reg, "echo", "good", 0)
	bad.fail.Store(true)
	// Quarantine that never ejects, to see the retry alone.
	q := middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: 1 << 30})
	cl := dial(t, reg, "echo", rostergrpc.WithStrategy(selector.RoundRobin), rostergrpc.WithRetry(2), rostergrpc.WithQuarantine(q))
	ctx := context.Background()
	waitFor(t, 10*time.Second, "bad is tried", func() bool {
		if _, err := call(ctx, cl); err != nil {
			t.Fatalf("with a retry on another instance, a call failed: %v", err)
		}
		return bad.calls.Load() > 0
	})
	for range 40 {
		if name, err := call(ctx, cl); err != nil || name != "good" {
			t.Fatalf("%q, %v", name, err)
		}
	}
	if bad.calls.Load() < 10 {
		t.Fatalf("round robin sent only %d calls to bad: the retries did not go through it", bad.calls.Load())
	}
}

func TestConsistentHashKey(t *testing.T) {
	reg := openMem(t)
	for _, n := range []string{"a", "b", "c"} {
		startServer(t, reg, "echo", n, 0)
	}
	cl := dial(t, reg, "echo", rostergrpc.WithStrategy(selector.ConsistentHash))
	ctx := context.Background()
	waitFor(t, 10*time.Second, "three instances ready", func() bool {
		seen := map[string]bool{}
		for i := range 60 {
			name, err := call(rostergrpc.WithKey(ctx, string(rune('a'+i%26))+"-key"), cl)
			if err != nil {
				t.Fatal(err)
			}
			seen[name] = true
		}
		return len(seen) == 3
	})
	for _, key := range []string{"user-1", "user-2", "user-3"} {
		first, err := call(rostergrpc.WithKey(ctx, key), cl)
		if err != nil {
			t.Fatal(err)
		}
		for range 10 {
			if name, _ := call(rostergrpc.WithKey(ctx, key), cl); name != first {
				t.Fatalf("key %s went to %s then %s", key, first, name)
			}
		}
	}
}

func TestBadTarget(t *testing.T) {
	reg := openMem(t)
	cl := dial(t, reg, "Not_A_Service")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := cl.UnaryCall(ctx, nil); err == nil {
		t.Fatal("call on an invalid service name succeeded")
	}
}

// The resolver alone works with gRPC's own policies.
func TestResolverWithGRPCRoundRobin(t *testing.T) {
	reg := openMem(t)
	startServer(t, reg, "echo", "a", 0)
	startServer(t, reg, "echo", "b", 0)
	cc, err := grpc.NewClient(rostergrpc.Target("echo"),
		grpc.WithResolvers(rostergrpc.NewResolverBuilder(reg)),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cl := testpb.NewTestServiceClient(cc)
	seen := map[string]bool{}
	waitFor(t, 10*time.Second, "both instances answer through round_robin", func() bool {
		name, err := call(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		seen[name] = true
		return len(seen) == 2
	})
}
