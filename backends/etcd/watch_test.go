package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// The tests in this file drive a stream by hand into the states that are
// hard to reach from outside: a watch that starts behind a compaction, and
// one resumed at a revision the server has not reached (wiped data).

func startServer(t *testing.T) *etcdtest.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := etcdtest.Start(ctx, etcdtest.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newTestDriver(t *testing.T, c *etcdtest.Cluster, progress time.Duration) *Driver {
	t.Helper()
	d, err := New(Options{Client: clientv3.Config{Endpoints: c.Endpoints()}, Prefix: "/t", ProgressInterval: progress})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() }) // runs before the cluster's cleanup
	return d
}

func register(t *testing.T, d *Driver, svc, id string) driver.Registration {
	t.Helper()
	r, err := d.Register(t.Context(), registry.Instance{ID: id, Service: svc, Address: "127.0.0.1:1"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func ids(s registry.Snapshot) []string {
	var out []string
	for _, in := range s.Instances {
		out = append(out, in.ID)
	}
	return out
}

// nextWithin calls Next with a deadline.
func nextWithin(t *testing.T, st driver.Stream, d time.Duration) (registry.Snapshot, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	return st.Next(ctx)
}

func TestStreamRelistsAfterCompaction(t *testing.T) {
	c := startServer(t)
	d := newTestDriver(t, c, time.Minute)
	a := register(t, d, "svc", "a")
	snapA, err := d.List(t.Context(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	register(t, d, "svc", "b")
	if err := a.Deregister(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A stream that listed {a} back then and only now starts watching:
	// the history it needs is compacted away.
	stI, err := d.Watch(t.Context(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer stI.Close()
	st := stI.(*stream)
	st.state = map[string]registry.Instance{"a": snapA.Instances[0]}
	st.rev = int64(snapA.Revision)
	st.lost = d.lostC()
	if err := st.watchFrom(st.rev + 1); err != nil {
		t.Fatal(err)
	}
	sn, err := nextWithin(t, st, 10*time.Second)
	if err != nil {
		t.Fatalf("Next after compaction: %v, want a relisted snapshot", err)
	}
	if got := ids(sn); len(got) != 1 || got[0] != "b" {
		t.Fatalf("after ErrCompacted the stream delivered %v, want [b]", got)
	}
	if st.lists != 1 {
		t.Fatalf("stream listed %d times, want 1 relist after ErrCompacted", st.lists)
	}
}

func TestStreamRelistsWhenRevisionGoesBack(t *testing.T) {
	c := startServer(t)
	d := newTestDriver(t, c, 300*time.Millisecond)
	register(t, d, "svc", "a")
	stI, err := d.Watch(t.Context(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer stI.Close()
	st := stI.(*stream)
	// As after a wipe: the stream's revision is far ahead of the server's,
	// so a resumed watch would wait silently for a revision to come.
	st.state = map[string]registry.Instance{}
	st.rev = 1_000_000
	st.lost = d.lostC()
	if err := st.watchFrom(st.rev + 1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	sn, err := nextWithin(t, st, 10*time.Second)
	if err != nil {
		t.Fatalf("Next on a watch ahead of the server: %v, want a relisted snapshot", err)
	}
	if got := ids(sn); len(got) != 1 || got[0] != "a" {
		t.Fatalf("relisted snapshot %v, want [a]", got)
	}
	t.Logf("revision regression detected and relisted after %v", time.Since(start))
}

func TestStreamReportsLostConnection(t *testing.T) {
	c := startServer(t)
	l, err := c.NewLink()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	u, _ := parse(t, l.URL("/t", "progress_interval=1m"))
	d, err := New(u)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	st, err := d.Watch(t.Context(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := nextWithin(t, st, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	_ = l.SetConnected(t.Context(), false)
	start := time.Now()
	_, err = nextWithin(t, st, 10*time.Second)
	if !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("Next on a cut-off stream = %v, want ErrUnavailable", err)
	}
	t.Logf("cut reported after %v: %v", time.Since(start), err)
}

func TestStreamCloseUnblocksNext(t *testing.T) {
	c := startServer(t)
	d := newTestDriver(t, c, time.Minute)
	st, err := d.Watch(t.Context(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nextWithin(t, st, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := st.Next(context.Background()); errc <- err }()
	st.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, registry.ErrClosed) {
			t.Fatalf("Next after Close = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Next")
	}
}

func TestForeignKeysIgnored(t *testing.T) {
	c := startServer(t)
	d := newTestDriver(t, c, time.Minute)
	register(t, d, "svc", "good")
	for k, v := range map[string]string{
		"/t/svc/bad-json":    "{",
		"/t/svc/no-address":  `{"id":"x"}`,
		"/t/svc/deep/er":     `{"address":"127.0.0.1:2"}`,
		"/t/Bad_Service/id":  `{"address":"127.0.0.1:2"}`,
		"/t/svc-a/other":     `{"address":"127.0.0.1:3"}`,
		"/tother/svc/x":      `{"address":"127.0.0.1:4"}`,
		"/t/svc/ok-external": `{"address":"127.0.0.1:5","weight":7}`,
	} {
		if _, err := d.cli.Put(t.Context(), k, v); err != nil {
			t.Fatal(err)
		}
	}
	sn, err := d.List(t.Context(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(sn); len(got) != 2 || got[0] != "good" || got[1] != "ok-external" {
		t.Fatalf("List = %v, want [good ok-external]", got)
	}
	if in, _ := sn.Find("ok-external"); in.Service != "svc" || in.Weight != 7 {
		t.Fatalf("instance written by another tool read as %+v", in)
	}
	svcs, err := d.Services(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs) != 2 || svcs[0] != "svc" || svcs[1] != "svc-a" {
		t.Fatalf("Services = %v, want [svc svc-a]", svcs)
	}
}

func TestHeartbeatReportsLostLease(t *testing.T) {
	c := startServer(t)
	d := newTestDriver(t, c, time.Minute)
	r := register(t, d, "svc", "a")
	if err := r.Heartbeat(t.Context()); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	if _, err := d.cli.Revoke(t.Context(), r.(*registration).current().id); err != nil {
		t.Fatal(err)
	}
	renewalDue(r.(*registration).current()) // the loss shows at the next renewal
	if err := r.Heartbeat(t.Context()); kindOf(d, err) != driver.ErrNotFound {
		t.Fatalf("Heartbeat on a revoked lease = %v, want ErrNotFound", err)
	}
	// Update puts the key back on a new lease rather than failing.
	if err := r.Update(t.Context(), registry.Instance{ID: "a", Service: "svc", Address: "127.0.0.1:9"}); err != nil {
		t.Fatalf("Update after the lease was lost: %v", err)
	}
	if err := r.Heartbeat(t.Context()); err != nil {
		t.Fatalf("Heartbeat after Update re-granted: %v", err)
	}
	sn, _ := d.List(t.Context(), "svc")
	if in, ok := sn.Find("a"); !ok || in.Address != "127.0.0.1:9" {
		t.Fatalf("after Update: %v", ids(sn))
	}
	if err := r.Deregister(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := r.Deregister(t.Context()); err != nil {
		t.Fatalf("second Deregister = %v, want nil (already gone is not an error)", err)
	}
}

func TestUnreachableIsUnavailable(t *testing.T) {
	d, err := New(Options{Client: clientv3.Config{Endpoints: []string{"http://127.0.0.1:1"}}, RequestTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.List(t.Context(), "svc"); kindOf(d, err) != driver.ErrUnavailable {
		t.Fatalf("List on an unreachable server = %v, want ErrUnavailable", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := d.Register(ctx, registry.Instance{ID: "a", Service: "svc", Address: "127.0.0.1:1"}, 2*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Register with a cancelled context = %v, want context.Canceled", err)
	}
}

// A watcher that falls behind a burst of changes catches up in one
// snapshot, not one per change: snapshots of a large service cost
// O(n log n) each, and one per registration never caught up with 10,000
// instances registering into one service.
func TestStreamCoalescesBursts(t *testing.T) {
	c := startServer(t)
	d := newTestDriver(t, c, time.Minute)
	st, err := d.Watch(t.Context(), "burst")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if s, err := nextWithin(t, st, 10*time.Second); err != nil || len(s.Instances) != 0 {
		t.Fatalf("first snapshot: %v, %v", ids(s), err)
	}
	const n = 300
	for i := range n {
		register(t, d, "burst", fmt.Sprintf("i%03d", i))
	}
	// Every put is written before the watcher reads again: it takes in
	// what has arrived by then in a few snapshots, not 300.
	calls := 0
	for {
		s, err := nextWithin(t, st, 10*time.Second)
		if err != nil {
			t.Fatalf("after %d snapshots: %v", calls, err)
		}
		calls++
		if len(s.Instances) == n {
			break
		}
	}
	t.Logf("%d registrations reached the watcher in %d snapshots", n, calls)
	if calls > n/10 {
		t.Fatalf("%d snapshots for %d registrations made while the watcher was not reading; want a few", calls, n)
	}
}

// TestStreamAppliesEveryEventOfARevision: a lease revoked with all its
// keys, and a transaction that writes several, each change many keys at
// one revision. Every event of the revision reaches the state, not just
// the first (9 of 10 crashed instances were kept until the next resync).
func TestStreamAppliesEveryEventOfARevision(t *testing.T) {
	c := startServer(t)
	d := newTestDriver(t, c, time.Minute)
	st, err := d.Watch(t.Context(), "rev")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if s, err := nextWithin(t, st, 10*time.Second); err != nil || len(s.Instances) != 0 {
		t.Fatalf("first snapshot: %v, %v", ids(s), err)
	}
	const n = 10
	for i := range n {
		register(t, d, "rev", fmt.Sprintf("i%02d", i)) // one TTL: one shared lease
	}
	waitIDs(t, st, n)
	d.leases.mu.Lock()
	lease := d.leases.byTTL[10]
	d.leases.mu.Unlock()
	if lease == nil {
		t.Fatal("no shared lease for the TTL")
	}
	if _, err := d.cli.Revoke(t.Context(), lease.id); err != nil {
		t.Fatal(err)
	}
	waitIDs(t, st, 0)

	// One transaction puts n keys at one revision.
	var ops []clientv3.Op
	for i := range n {
		in := registry.Instance{ID: fmt.Sprintf("t%02d", i), Service: "rev", Address: "127.0.0.1:1"}
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, clientv3.OpPut(d.key("rev", in.ID), string(b)))
	}
	if _, err := d.cli.Txn(t.Context()).Then(ops...).Commit(); err != nil {
		t.Fatal(err)
	}
	waitIDs(t, st, n)
}

// waitIDs reads st until it holds n instances; a snapshot that stops
// short of n for 5s fails the test.
func waitIDs(t *testing.T, st driver.Stream, n int) {
	t.Helper()
	var last []string
	for {
		s, err := nextWithin(t, st, 5*time.Second)
		if err != nil {
			t.Fatalf("want %d instances, last snapshot %v: %v", n, last, err)
		}
		if last = ids(s); len(last) == n {
			return
		}
	}
}
