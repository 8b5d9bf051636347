package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/registry"
)

// The full conformance suite runs on a 3-member cluster too
// (conformance_test.go), where its restarts and wipes take the whole
// cluster down. The tests here add the faults the suite cannot name: one
// member of several failing, and a quorum lost while a member answers.

// TestClusterMemberFailures runs registrations and a watch on a 3-member
// cluster while first the leader, then a follower, is stopped and started
// again. The registration made before the faults must never disappear
// from a fresh snapshot, and registrations and removals made during and
// after each fault must reach the watcher.
func TestClusterMemberFailures(t *testing.T) {
	c := startCluster(t, etcdtest.Config{Members: 3})
	url := c.URL("/roster-cluster", progress)
	open := func() *registry.Registry {
		r, err := registry.Open(t.Context(), url, registry.WithResyncInterval(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() }) // before the cluster's cleanup
		return r
	}
	reg, obs := open(), open()
	const ttl = 3 * time.Second
	ctx := t.Context()
	register := func(addr string) *registry.Lease {
		t.Helper()
		// A call may land in an election: retry within a bound.
		var l *registry.Lease
		var err error
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
			if l, err = reg.Register(ctx, registry.Instance{Service: "svc", Address: addr}, registry.WithTTL(ttl)); err == nil {
				return l
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("Register(%s) during cluster faults: %v", addr, err)
		return nil
	}
	stay := register("127.0.0.1:1000")
	w, err := obs.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	// await reads the watcher until want holds, failing if a fresh
	// snapshot ever lacks the instance registered before the faults.
	await := func(what string, want func(registry.Snapshot) bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			nctx, cancel := context.WithDeadline(ctx, deadline)
			sn, err := w.Next(nctx)
			cancel()
			if err != nil && !sn.Stale {
				t.Fatalf("%s: watcher: %v", what, err)
			}
			if sn.Stale {
				t.Logf("%s: watcher stale for a moment: %v", what, err)
				continue
			}
			if _, ok := sn.Find(stay.Instance().ID); !ok {
				t.Fatalf("%s: the long-lived registration left a fresh snapshot (lease %v, %v)", what, stay.State(), stay.Err())
			}
			if want(sn) {
				return
			}
		}
	}
	has := func(l *registry.Lease) func(registry.Snapshot) bool {
		return func(sn registry.Snapshot) bool { _, ok := sn.Find(l.Instance().ID); return ok }
	}
	await("initial", has(stay))

	for round, pick := range []string{"leader", "follower"} {
		var victim int
		for deadline := time.Now().Add(10 * time.Second); ; {
			lead := c.Leader()
			if lead >= 0 {
				victim = lead
				if pick == "follower" {
					victim = (lead + 1) % c.Members()
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no leader")
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("round %d: stopping member %d (%s)", round, victim, pick)
		start := time.Now()
		if err := c.StopMember(victim); err != nil {
			t.Fatal(err)
		}
		during := register(fmt.Sprintf("127.0.0.1:%d", 2000+round))
		await(pick+" down: registration made during the fault", has(during))
		t.Logf("round %d: registration during the fault seen %v after the stop", round, time.Since(start))
		if err := c.StartMember(ctx, victim); err != nil {
			t.Fatal(err)
		}
		if err := during.Deregister(ctx); err != nil {
			t.Fatalf("Deregister after restarting the %s: %v", pick, err)
		}
		await(pick+" back: removal", func(sn registry.Snapshot) bool { return !has(during)(sn) })
		after := register(fmt.Sprintf("127.0.0.1:%d", 3000+round))
		await(pick+" back: registration", has(after))
	}
	// The first lease heartbeated through both faults.
	for deadline := time.Now().Add(2 * ttl); stay.State() != registry.LeaseHealthy; {
		if time.Now().After(deadline) {
			t.Fatalf("long-lived lease %v (%v) after the faults, want healthy", stay.State(), stay.Err())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClusterQuorumLossIsStale stops two of three members: the one left
// is up and connected but has no leader, so nothing can be read. Watchers
// must say so (Stale, ErrUnavailable) rather than wait silently, and
// recover once quorum is back.
func TestClusterQuorumLossIsStale(t *testing.T) {
	c := startCluster(t, etcdtest.Config{Members: 3})
	ctx := t.Context()
	r, err := registry.Open(ctx, c.URL("/roster-quorum", progress), registry.WithResyncInterval(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	l, err := r.Register(ctx, registry.Instance{Service: "svc", Address: "127.0.0.1:1"}, registry.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	w, err := r.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if sn, err := w.Next(ctx); err != nil || len(sn.Instances) != 1 {
		t.Fatalf("initial: %v %v", sn.Instances, err)
	}
	lead := c.Leader()
	stopped := []int{(lead + 1) % 3, (lead + 2) % 3}
	for _, i := range stopped {
		if err := c.StopMember(i); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	nctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	sn, err := w.Next(nctx)
	cancel()
	if !sn.Stale || !errors.Is(err, registry.ErrUnavailable) || len(sn.Instances) != 1 {
		t.Fatalf("after losing quorum: Next = %v stale=%v, %v; want the last instances marked stale with ErrUnavailable", sn.Instances, sn.Stale, err)
	}
	t.Logf("quorum loss reported after %v: %v", time.Since(start), err)
	for _, i := range stopped {
		if err := c.StartMember(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	nctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		sn, err := w.Next(nctx)
		if nctx.Err() != nil {
			t.Fatalf("no fresh snapshot after quorum came back: %v", err)
		}
		if !sn.Stale {
			if _, ok := sn.Find(l.Instance().ID); !ok {
				t.Fatalf("fresh snapshot after quorum came back lacks the instance: %v", sn.Instances)
			}
			break
		}
	}
}
