package rostergrpc_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	_ "github.com/roster-go/roster/backends/etcd"
	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"

	rostergrpc "github.com/roster-go/roster/contrib/rostergrpc"
)

// startEtcd starts a real etcd member and returns it with an opener of
// registries on it (each its own client, as separate processes would
// have).
func startEtcd(t *testing.T) (*etcdtest.Cluster, func() *registry.Registry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := etcdtest.Start(ctx, etcdtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	open := func() *registry.Registry {
		// progress_interval: a watch silenced by the restart is noticed
		// within ~2s rather than waiting for the connection to drop.
		reg, err := registry.Open(ctx, c.URL("/"+t.Name(), "progress_interval=1s"), registry.WithResyncInterval(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { reg.Close() }) // before the cluster's Close (LIFO)
		return reg
	}
	return c, open
}

// TestEtcdStopGracefullyAndKillUnderLoad: three servers on a real etcd;
// under continuous load one is stopped in the graceful order and another
// is killed (connections cut, lease abandoned as in a crash). No RPC
// fails: the graceful one is gone from every picker before it stops, and
// the RPCs caught on the killed one are retried by gRPC's retry policy
// on an instance they have not tried.
func TestEtcdStopGracefullyAndKillUnderLoad(t *testing.T) {
	_, open := startEtcd(t)
	srvReg := open()
	ttl := registry.WithTTL(3 * time.Second)
	// Calls take 2ms, 20ms on b so that RPCs are in flight when it dies.
	a := startServer(t, srvReg, "echo", "a", 2*time.Millisecond, ttl)
	b := startServer(t, srvReg, "echo", "b", 20*time.Millisecond, ttl)
	c := startServer(t, srvReg, "echo", "c", 2*time.Millisecond, ttl)
	// Five attempts (gRPC's cap) rather than the default three: on a loaded
	// machine the balancer may take a moment to see b's connections die,
	// and an attempt picked in that moment fails fast on b again.
	cl := dial(t, open(), "echo", rostergrpc.WithStrategy(selector.LeastRequest), rostergrpc.WithRetry(5, codes.Unavailable))

	l := startLoad(cl, 6, time.Millisecond)
	defer l.end()
	waitFor(t, 20*time.Second, "all three serve", func() bool {
		return l.count("a") > 0 && l.count("b") > 0 && l.count("c") > 0
	})
	l.progressed(t, 200)

	// Graceful: deregister, wait until the client no longer routes to a,
	// then stop. The client's picker is the watcher that must have seen it.
	a.gracefulStop(t, func() bool {
		n := a.calls.Load()
		l.progressed(t, 30)
		return a.calls.Load() == n
	})
	l.progressed(t, 200)

	// Crash: b's process dies with RPCs in flight; its registration
	// lingers until the TTL runs out.
	var cut int64 // about the RPCs in flight when b dies
	waitFor(t, 10*time.Second, "RPCs in flight on b", func() bool {
		cut = b.calls.Load() - b.ended.Load()
		return cut > 0
	})
	b.kill()
	l.progressed(t, 300)
	killedAt := time.Now()
	waitFor(t, 10*time.Second, "b's registration expires", func() bool {
		s, err := srvReg.Lookup(context.Background(), "echo")
		return err == nil && len(s.Instances) == 1
	})
	l.progressed(t, 100)
	l.end()

	if len(l.failures) > 0 {
		t.Fatalf("%d RPCs failed (first: %v)", len(l.failures), l.failures[0])
	}
	t.Logf("ok calls: a=%d b=%d c=%d; %d RPCs in flight on b when it was killed (retried); b's registration expired %v later",
		l.count("a"), l.count("b"), l.count("c"), cut, time.Since(killedAt).Round(100*time.Millisecond))
	if l.count("c") == 0 || c.calls.Load() == 0 {
		t.Fatal("c served nothing")
	}
}

// TestEtcdResolverRecoversAfterRestart: the etcd server restarts under
// load. Calls keep succeeding on the known instances while it is down
// (stale list, never emptied), and afterwards the resolver follows the
// registry again: a server registered after the restart receives
// traffic, and one deregistered after it stops receiving any.
func TestEtcdResolverRecoversAfterRestart(t *testing.T) {
	cluster, open := startEtcd(t)
	srvReg := open()
	old := startServer(t, srvReg, "echo", "old", time.Millisecond, registry.WithTTL(5*time.Second))
	cl := dial(t, open(), "echo", rostergrpc.WithStrategy(selector.RoundRobin))
	l := startLoad(cl, 4, 2*time.Millisecond)
	defer l.end()
	l.progressed(t, 100)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cluster.Restart(ctx, true); err != nil {
		t.Fatal(err)
	}
	l.progressed(t, 100)

	// After the restart: a new instance joins and the old one leaves.
	nw := startServer(t, srvReg, "echo", "new", time.Millisecond, registry.WithTTL(5*time.Second))
	waitFor(t, 20*time.Second, "the new server gets traffic", func() bool { return nw.calls.Load() > 0 })
	old.gracefulStop(t, func() bool {
		n := old.calls.Load()
		l.progressed(t, 30)
		return old.calls.Load() == n
	})
	l.progressed(t, 100)
	l.end()
	if len(l.failures) > 0 {
		t.Fatalf("%d RPCs failed across the registry restart (first: %v)", len(l.failures), l.failures[0])
	}
}

// TestEtcdResolverRecoversAfterWipe: etcd restarts with no data (every
// key, lease and revision gone). The server's lease writes its
// registration again by itself, the watch starts over from the new
// revisions, and the client reaches both the re-registered server and
// one registered after the wipe. (Calls may fail in between, while the
// registry truly lists no instance.)
func TestEtcdResolverRecoversAfterWipe(t *testing.T) {
	cluster, open := startEtcd(t)
	srvReg := open()
	old := startServer(t, srvReg, "echo", "old", 0, registry.WithTTL(3*time.Second))
	cl := dial(t, open(), "echo", rostergrpc.WithStrategy(selector.RoundRobin))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if name, err := call(ctx, cl); err != nil || name != "old" {
		t.Fatalf("%q, %v", name, err)
	}
	if err := cluster.Wipe(ctx); err != nil {
		t.Fatal(err)
	}
	nw := startServer(t, srvReg, "echo", "new", 0, registry.WithTTL(3*time.Second))
	oldBefore := old.calls.Load()
	waitFor(t, 30*time.Second, "old re-registered by its lease", func() bool {
		s, err := srvReg.Lookup(ctx, "echo")
		return err == nil && len(s.Instances) == 2
	})
	waitFor(t, 30*time.Second, "both servers reached after the wipe", func() bool {
		_, _ = call(ctx, cl)
		return nw.calls.Load() > 0 && old.calls.Load() > oldBefore+1
	})
}
