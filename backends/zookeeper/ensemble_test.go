package zookeeper_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/servers/zktest"
	"github.com/roster-go/roster/registry"
)

// TestEnsembleSurvivesLosingAMember: on a 3-server ensemble, killing the
// leader neither expires a lease nor ends a watch. The lease's session
// moves to a surviving server within its timeout; the watcher goes on
// delivering, and never loses the instance on the way.
func TestEnsembleSurvivesLosingAMember(t *testing.T) {
	e := zktest.StartEnsemble(t, 3)
	// TTLs of 6s: a leader election on a loaded 2-core machine under -race
	// must fit in the session timeout with room to spare.
	url := e.URL("/ensemble", "session_timeout=6s")
	owner, obs := open(t, url), open(t, url)
	var changes atomic.Int32
	l, err := owner.Register(t.Context(), registry.Instance{Service: "svc", Address: "10.0.0.1:80"},
		registry.WithTTL(6*time.Second), registry.WithStateHook(func(registry.LeaseState, error) { changes.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	id := l.Instance().ID
	w, err := obs.Watch(t.Context(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	waitFor(t, w, 5*time.Second, func(s registry.Snapshot) bool { _, ok := s.Find(id); return ok }, "")

	leader := e.Leader()
	if leader < 0 {
		t.Fatal("no leader")
	}
	e.Servers[leader].Stop()
	t.Logf("killed server %d, the leader", leader+1)

	// A change made after the loss reaches the watcher, whose every
	// snapshot on the way still holds the first instance.
	var l2 *registry.Lease
	deadline := time.Now().Add(20 * time.Second)
	for l2 == nil {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		l2, err = owner.Register(ctx, registry.Instance{Service: "svc", Address: "10.0.0.2:80"}, registry.WithTTL(6*time.Second))
		cancel()
		if err != nil && time.Now().After(deadline) {
			t.Fatalf("register after losing a member: %v", err)
		}
	}
	waitFor(t, w, 20*time.Second, func(s registry.Snapshot) bool {
		_, ok := s.Find(l2.Instance().ID)
		return ok && !s.Stale
	}, id)
	// More than a TTL later the first lease is still the same
	// registration: had its session been lost, it would have expired.
	time.Sleep(7 * time.Second)
	if l.State() != registry.LeaseHealthy || changes.Load() != 0 {
		t.Fatalf("lease state %v after %d changes: the member loss cost the registration", l.State(), changes.Load())
	}
	s, err := obs.Lookup(t.Context(), "svc")
	if err != nil || len(s.Instances) != 2 {
		t.Fatalf("after the loss: %v, %v", s.Instances, err)
	}
}

// waitFor reads w until pred holds, failing if a snapshot on the way
// lacks the instance keep (unless keep is empty).
func waitFor(t *testing.T, w *registry.Watcher, d time.Duration, pred func(registry.Snapshot) bool, keep string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	for {
		s, err := w.Next(ctx)
		if ctx.Err() != nil {
			t.Fatalf("watcher: condition not met within %v (last %v, %v)", d, s.Instances, err)
		}
		if _, ok := s.Find(keep); keep != "" && !ok {
			t.Fatalf("watcher lost %s: %v (stale %v)", keep, s.Instances, s.Stale)
		}
		if pred(s) {
			return
		}
	}
}
