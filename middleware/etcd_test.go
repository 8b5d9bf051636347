package middleware_test

import (
	"context"
	"testing"
	"time"

	_ "github.com/roster-go/roster/backends/etcd"
	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// TestChainOnEtcd runs the whole chain on a real etcd: an instance killed
// under load costs no call and is quarantined, and a client cut off from
// etcd keeps calling from its stale snapshot, then converges again.
func TestChainOnEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, writer := startEtcd(ctx, t, "/mw")
	link, err := cl.NewLink()
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	reader, err := registry.Open(ctx, link.URL("/mw", "progress_interval=500ms", "request_timeout=1s"))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()

	bs := []*backend{startBackend(t, writer, "api", 100), startBackend(t, writer, "api", 100), startBackend(t, writer, "api", 100)}
	q := middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: 2, BaseEjection: time.Minute, MaxEjectedPercent: 50})
	c, err := middleware.NewClient(reader, middleware.WithQuarantine(q), middleware.WithSelector(selector.WithStrategy(selector.RoundRobin)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	victim := bs[0]
	if errs := load(c, "api", 4, 1000, victim.kill); len(errs) > 0 {
		t.Fatalf("%d calls failed after an instance was killed: %v", len(errs), errs[0])
	}
	if ej := q.Ejected("api"); len(ej) != 1 || ej[0] != victim.id() {
		t.Fatalf("quarantined %v, want the killed instance", ej)
	}

	// Cut the client off from etcd: calls go on from the stale snapshot.
	if err := link.SetConnected(ctx, false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s, _ := c.Snapshot("api"); !s.Stale; s, _ = c.Snapshot("api") {
		if time.Now().After(deadline) {
			t.Fatal("the client never noticed that etcd is unreachable")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if errs := load(c, "api", 2, 200, nil); len(errs) > 0 {
		t.Fatalf("%d calls failed while etcd was unreachable: %v", len(errs), errs[0])
	}
	// A new instance registers meanwhile; once reconnected the client sees it.
	fresh := startBackend(t, writer, "api", 100)
	if err := link.SetConnected(ctx, true); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(15 * time.Second)
	for {
		s, _ := c.Snapshot("api")
		if _, ok := s.Find(fresh.id()); ok && !s.Stale {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after reconnecting, the client's snapshot is %+v", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if errs := load(c, "api", 2, 200, nil); len(errs) > 0 || fresh.hits.Load() == 0 {
		t.Fatalf("after recovery: %d failed calls, %d hits on the new instance", len(errs), fresh.hits.Load())
	}
}

// startEtcd starts an embedded etcd for the test and opens a registry on
// it under prefix; both are closed when the test ends.
func startEtcd(ctx context.Context, t *testing.T, prefix string) (*etcdtest.Cluster, *registry.Registry) {
	t.Helper()
	cl, err := etcdtest.Start(ctx, etcdtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	reg, err := registry.Open(ctx, cl.URL(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return cl, reg
}
