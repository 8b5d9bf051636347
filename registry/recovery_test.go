package registry_test

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/roster-go/roster/internal/backend"

	"sync/atomic"
	"testing"
	"time"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// put writes an instance straight through a driver, with no lease: it
// stays until its TTL, and never comes back by itself.
func put(t *testing.T, srv *memory.Server, id string) registry.Instance {
	t.Helper()
	in := registry.Instance{ID: id, Service: "svc", Address: "127.0.0.1:1", Weight: 1}
	d := memory.NewDriver(srv)
	defer d.Close()
	if _, err := d.Register(context.Background(), in, time.Hour); err != nil {
		t.Fatal(err)
	}
	return in
}

func idsOf(s registry.Snapshot) []string {
	var out []string
	for _, in := range s.Instances {
		out = append(out, in.ID)
	}
	return out
}

// nextWhere reads deliveries until one satisfies cond, failing on any
// delivery rejected by every (an invariant over all of them).
func nextWhere(t *testing.T, w *registry.Watcher, d time.Duration, what string, every, cond func(registry.Snapshot) bool) registry.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		s, err := w.Next(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: not delivered within %v", what, d)
		}
		if every != nil && !every(s) {
			t.Fatalf("%s: delivered %v (stale %v, err %v), which breaks the invariant", what, idsOf(s), s.Stale, err)
		}
		if cond(s) {
			return s
		}
	}
}

func hasAll(ids ...string) func(registry.Snapshot) bool {
	return func(s registry.Snapshot) bool {
		for _, id := range ids {
			if _, ok := s.Find(id); !ok {
				return false
			}
		}
		return true
	}
}

func exactly(ids ...string) func(registry.Snapshot) bool {
	return func(s registry.Snapshot) bool { return len(s.Instances) == len(ids) && hasAll(ids...)(s) }
}

// TestWatchHoldsInstancesWhenBackendReturnsEmpty: the backend goes away,
// comes back without its data, and only some instances return. Watchers
// never see the list emptied; the absent ones are held for the recovery
// window, then dropped.
func TestWatchHoldsInstancesWhenBackendReturnsEmpty(t *testing.T) {
	srv := memory.NewServer()
	a, b := put(t, srv, "a"), put(t, srv, "b")
	const window = 400 * time.Millisecond
	r := registry.New(memory.NewDriver(srv), registry.WithRecoveryWindow(window), registry.WithResyncInterval(0))
	defer r.Close()
	w, err := r.Watch(context.Background(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	both := hasAll(a.ID, b.ID)
	nextWhere(t, w, 2*time.Second, "both instances", nil, both)

	srv.SetReachable(false)
	nextWhere(t, w, 2*time.Second, "stale while down", both, func(s registry.Snapshot) bool { return s.Stale })
	srv.Wipe()
	srv.SetReachable(true)
	back := time.Now()
	nextWhere(t, w, 2*time.Second, "fresh after the restart", both, func(s registry.Snapshot) bool { return !s.Stale })
	if lk, err := r.Lookup(context.Background(), "svc"); err != nil || !both(lk) {
		t.Errorf("Lookup during recovery = %v, %v; want the held instances", idsOf(lk), err)
	}
	put(t, srv, "a") // a's lease came back; b's did not (it died meanwhile)
	nextWhere(t, w, 2*time.Second, "only a after the window", func(s registry.Snapshot) bool {
		return !s.Stale && has(s, a.ID) && (has(s, b.ID) || time.Since(back) >= window)
	}, exactly(a.ID))
}

func has(s registry.Snapshot, id string) bool { _, ok := s.Find(id); return ok }

// TestWatchHoldsThroughWipeWhileConnected: the data vanishes while the
// watch stays connected (FLUSHALL, a wiped etcd the client did not see
// restart): the revision goes back, and that alone starts the hold.
func TestWatchHoldsThroughWipeWhileConnected(t *testing.T) {
	srv := memory.NewServer()
	a, a2 := put(t, srv, "a"), put(t, srv, "a2") // revision 2
	r := registry.New(memory.NewDriver(srv), registry.WithRecoveryWindow(300*time.Millisecond), registry.WithResyncInterval(0))
	defer r.Close()
	w, err := r.Watch(context.Background(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	first := nextWhere(t, w, 2*time.Second, "a", nil, hasAll(a.ID, a2.ID))
	srv.Wipe()
	put(t, srv, "c") // revision 1, below the one the watch saw
	s := nextWhere(t, w, 2*time.Second, "c while a is held", hasAll(a.ID, a2.ID), hasAll("c"))
	if s.Revision <= first.Revision {
		t.Errorf("revision went from %d to %d", first.Revision, s.Revision)
	}
	nextWhere(t, w, 2*time.Second, "a dropped after the window", nil, exactly("c"))
}

// TestRecoveryWindowZeroAppliesAtOnce: the knob turns the hold off.
func TestRecoveryWindowZeroAppliesAtOnce(t *testing.T) {
	srv := memory.NewServer()
	a := put(t, srv, "a")
	r := registry.New(memory.NewDriver(srv), registry.WithRecoveryWindow(0), registry.WithResyncInterval(0))
	defer r.Close()
	w, err := r.Watch(context.Background(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	nextWhere(t, w, 2*time.Second, "a", nil, hasAll(a.ID))
	srv.Wipe()
	nextWhere(t, w, 2*time.Second, "empty at once", nil, exactly())
}

// TestResyncRepairsARevisionResetTheStreamMissed: the stream delivered
// revision N and then nothing; the backend was wiped and rewritten, so a
// relist returns a lower revision with other instances. It must be
// applied, not dropped as older than the stream.
func TestResyncRepairsARevisionResetTheStreamMissed(t *testing.T) {
	srv := memory.NewServer()
	for i := range 5 {
		put(t, srv, fmt.Sprint("old-", i)) // revision 5
	}
	r := registry.New(stallingDriver{memory.NewDriver(srv)},
		registry.WithResyncInterval(100*time.Millisecond), registry.WithRecoveryWindow(0))
	defer r.Close()
	w, err := r.Watch(context.Background(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	nextWhere(t, w, 2*time.Second, "the old instances", nil, hasAll("old-0"))
	srv.Wipe()
	put(t, srv, "new") // revision 1
	nextWhere(t, w, 3*time.Second, "the relisted state after the reset", nil, exactly("new"))
}

// countingDriver counts driver calls and the deregistrations in flight.
type countingDriver struct {
	*memory.Driver
	heartbeats, lookups atomic.Int64
	inFlight, maxDereg  atomic.Int64
	gate                chan struct{} // when set, each Deregister waits on it
}

func (d *countingDriver) Register(ctx context.Context, in registry.Instance, ttl time.Duration) (driver.Registration, error) {
	reg, err := d.Driver.Register(ctx, in, ttl)
	if err != nil {
		return nil, err
	}
	return &countingReg{Registration: reg, d: d}, nil
}

type countingReg struct {
	driver.Registration
	d *countingDriver
}

func (d *countingDriver) List(ctx context.Context, service string) (registry.Snapshot, error) {
	d.lookups.Add(1)
	return d.Driver.List(ctx, service)
}

func (r *countingReg) Heartbeat(ctx context.Context) error {
	r.d.heartbeats.Add(1)
	return r.Registration.Heartbeat(ctx)
}

func (r *countingReg) Deregister(ctx context.Context) error {
	n := r.d.inFlight.Add(1)
	defer r.d.inFlight.Add(-1)
	for {
		m := r.d.maxDereg.Load()
		if n <= m || r.d.maxDereg.CompareAndSwap(m, n) {
			break
		}
	}
	if r.d.gate != nil {
		select {
		case <-r.d.gate:
		case <-ctx.Done():
		}
	}
	return r.Registration.Deregister(ctx)
}

// TestCloseBoundsConcurrentDeregistrations: a thousand leases must not
// become a thousand connections to the backend at Close, and every one
// must still be deregistered.
func TestCloseBoundsConcurrentDeregistrations(t *testing.T) {
	srv := memory.NewServer()
	d := &countingDriver{Driver: memory.NewDriver(srv), gate: make(chan struct{})}
	r := registry.New(d)
	for i := range 300 {
		if _, err := r.Register(context.Background(), registry.Instance{Service: "svc", Address: fmt.Sprintf("127.0.0.1:%d", 1000+i)}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error)
	go func() { done <- r.Close() }()
	// Let the first deregistrations pile up on the gate, then release all.
	waitUntil(t, 2*time.Second, "deregistrations started", func() bool { return d.inFlight.Load() > 0 })
	waitUntil(t, 2*time.Second, "no new deregistration starts while the first are blocked", func() bool {
		n := d.inFlight.Load()
		time.Sleep(20 * time.Millisecond)
		return d.inFlight.Load() == n
	})
	close(d.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if m := d.maxDereg.Load(); m > 32 {
		t.Errorf("Close ran %d deregistrations at once, want at most 32", m)
	}
	obs := registry.New(memory.NewDriver(srv))
	defer obs.Close()
	if s, err := obs.Lookup(context.Background(), "svc"); err != nil || len(s.Instances) != 0 {
		t.Errorf("after Close: %d instances left, %v", len(s.Instances), err)
	}
}

// TestLeaseOptionsAtTheirExtremes: any Duration a caller can pass gives a
// clear error or a working lease, never a panic in the lease goroutine.
func TestLeaseOptionsAtTheirExtremes(t *testing.T) {
	ctx := context.Background()
	srv := memory.NewServer()
	d := &countingDriver{Driver: memory.NewDriver(srv)}
	r := registry.New(d)
	defer r.Close()
	in := registry.Instance{Service: "svc", Address: "127.0.0.1:1"}

	_, err := r.Register(ctx, in, registry.WithTTL(time.Second), registry.WithHeartbeatInterval(1<<62))
	if !errors.Is(err, registry.ErrInvalid) {
		t.Errorf("heartbeat interval 2^62 with TTL 1s: err = %v, want ErrInvalid", err)
	}
	if _, err := backend.ValidateTTL(math.MaxInt64, registry.Limits{TTLGranularity: time.Second}); !errors.Is(err, registry.ErrInvalid) {
		t.Errorf("ValidateTTL(MaxInt64) = %v, want ErrInvalid (not a wrapped negative TTL)", err)
	}

	// Backoff doubling past math.MaxInt64 used to panic in rand.N after
	// ~35 failed heartbeats.
	l, err := r.Register(ctx, in, registry.WithTTL(time.Hour), registry.WithHeartbeatInterval(5*time.Millisecond),
		registry.WithRetryBackoff(200*time.Millisecond, math.MaxInt64))
	if err != nil {
		t.Fatal(err)
	}
	d.SetReachable(false)
	start := d.heartbeats.Load()
	waitUntil(t, 10*time.Second, "100 failed heartbeats", func() bool { return d.heartbeats.Load()-start >= 100 })
	d.SetReachable(true)
	waitUntil(t, 2*time.Second, "healthy again", func() bool { return l.State() == registry.LeaseHealthy && l.Err() == nil })
}

// TestTimingsBelowTheirFloors: a negative health-check interval or
// backoff is ErrInvalid naming the option; a nanosecond where a second
// was meant (resync, heartbeat and health-check intervals) is raised to
// a floor instead of becoming a busy loop against the backend.
func TestTimingsBelowTheirFloors(t *testing.T) {
	ctx := context.Background()
	d := &countingDriver{Driver: memory.NewDriver(memory.NewServer())}
	r := registry.New(d, registry.WithResyncInterval(1))
	defer r.Close()
	in := registry.Instance{Service: "svc", Address: "127.0.0.1:1"}
	ok := func(context.Context) error { return nil }
	for field, opt := range map[string]registry.RegisterOption{
		"health check interval": registry.WithHealthCheck(ok, -time.Second),
		"retry backoff":         registry.WithRetryBackoff(-1, 0),
		"heartbeat interval":    registry.WithHeartbeatInterval(-time.Second),
	} {
		var fe *registry.FieldError
		if _, err := r.Register(ctx, in, opt); !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("Register with a negative %s = %v, want a FieldError naming it", field, err)
		}
	}
	var checks atomic.Int64
	l, err := r.Register(ctx, in, registry.WithTTL(time.Second), registry.WithHeartbeatInterval(1),
		registry.WithHealthCheck(func(context.Context) error { checks.Add(1); return nil }, 1))
	if err != nil {
		t.Fatal(err)
	}
	if got := l.HeartbeatInterval(); got != time.Millisecond {
		t.Errorf("heartbeat interval 1ns became %v, want the 1ms floor", got)
	}
	w, err := r.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	hb, lk, ck := d.heartbeats.Load(), d.lookups.Load(), checks.Load()
	start := time.Now()
	time.Sleep(200 * time.Millisecond) // a window to count in, not a wait for an event
	elapsed := time.Since(start)
	w.Close()
	l.Deregister(ctx)
	// Floors of 1ms (heartbeat, check) and 10ms (resync, jittered down to
	// half): a busy loop would make thousands in the window.
	if n, max := d.heartbeats.Load()-hb, int64(elapsed/time.Millisecond)+2; n > max {
		t.Errorf("%d heartbeats in %v, want at most %d (1ms floor)", n, elapsed, max)
	}
	if n, max := checks.Load()-ck, int64(elapsed/time.Millisecond)+2; n > max {
		t.Errorf("%d health checks in %v, want at most %d (1ms floor)", n, elapsed, max)
	}
	if n, max := d.lookups.Load()-lk, int64(elapsed/(5*time.Millisecond))+2; n > max {
		t.Errorf("%d relists in %v, want at most %d (10ms floor, jittered)", n, elapsed, max)
	}
}

// TestUserCallbacksCannotCrashTheLease: a panicking health check counts
// as failing; a panicking state hook is logged and ignored.
func TestUserCallbacksCannotCrashTheLease(t *testing.T) {
	ctx := context.Background()
	r := registry.New(memory.NewDriver(memory.NewServer()))
	defer r.Close()
	var fail atomic.Bool
	var hooks atomic.Int64
	l, err := r.Register(ctx, registry.Instance{Service: "svc", Address: "127.0.0.1:1"},
		registry.WithTTL(300*time.Millisecond),
		registry.WithHealthCheck(func(context.Context) error {
			if fail.Load() {
				panic("check exploded")
			}
			return nil
		}, 10*time.Millisecond),
		registry.WithStateHook(func(registry.LeaseState, error) { hooks.Add(1); panic("hook exploded") }))
	if err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	waitUntil(t, 2*time.Second, "withdrawn by the panicking check", func() bool { return l.State() == registry.LeaseWithdrawn })
	if err := l.Err(); err == nil {
		t.Error("withdrawn with no error")
	}
	fail.Store(false)
	waitUntil(t, 2*time.Second, "healthy again", func() bool { return l.State() == registry.LeaseHealthy })
	if hooks.Load() < 2 {
		t.Errorf("state hook called %d times", hooks.Load())
	}
}

// TestLeasesReturnWithinAnIntervalAfterALongOutage: re-registration backs
// off no further than the heartbeat interval, so every lease is back
// within about one interval of the backend's return, however long the
// outage (it used to back off up to 10s whatever the TTL).
func TestLeasesReturnWithinAnIntervalAfterALongOutage(t *testing.T) {
	ctx := context.Background()
	srv := memory.NewServer()
	r := registry.New(memory.NewDriver(srv))
	defer r.Close()
	const ttl = 900 * time.Millisecond // heartbeat every 300ms
	var ids []string
	for i := range 20 {
		l, err := r.Register(ctx, registry.Instance{Service: "svc", Address: fmt.Sprintf("127.0.0.1:%d", 1000+i)}, registry.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, l.Instance().ID)
	}
	srv.SetReachable(false)
	srv.Wipe()
	// Long enough for an uncapped 200ms-doubling backoff to reach seconds.
	time.Sleep(4 * time.Second)
	srv.SetReachable(true)
	back := time.Now()
	obs := registry.New(memory.NewDriver(srv))
	defer obs.Close()
	waitUntil(t, 5*time.Second, "every lease back", func() bool {
		s, err := obs.Lookup(ctx, "svc")
		return err == nil && hasAll(ids...)(s)
	})
	if took := time.Since(back); took > ttl {
		t.Errorf("leases back %v after the backend returned, want within the TTL (%v)", took, ttl)
	}
}

// TestResyncAheadOfTheStreamIsNoWipe: a relist may be answered from a
// newer view than the stream has reached (Kubernetes lists two resources
// and reports the higher resourceVersion). The stream's next snapshot is
// then below the relist's revision: it is lagging, not a backend that went
// back, and a removal it carries is served at once, not held for the
// recovery window (seen in CI: an expiry held for 15s).
func TestResyncAheadOfTheStreamIsNoWipe(t *testing.T) {
	srv := memory.NewServer()
	d := &aheadListDriver{Driver: memory.NewDriver(srv)}
	w, a, b := watchTwo(t, srv, d)
	// Wait for relists ahead of the stream to have been applied.
	for start := d.lists.Load(); d.lists.Load() < start+2; {
		time.Sleep(5 * time.Millisecond)
	}
	srv.Delete("svc", a.ID) // the stream delivers revision 3, below the lists' 3+ahead
	nextWhere(t, w, 2*time.Second, "a's removal", nil, exactly(b.ID))
}

// watchTwo puts instances a and b of "svc" on srv and watches it through
// d, relisting every 20ms with a recovery window of a minute, until both
// are delivered.
func watchTwo(t *testing.T, srv *memory.Server, d driver.Driver) (w *registry.Watcher, a, b registry.Instance) {
	t.Helper()
	a, b = put(t, srv, "a"), put(t, srv, "b")
	r := registry.New(d, registry.WithResyncInterval(20*time.Millisecond), registry.WithRecoveryWindow(time.Minute))
	t.Cleanup(func() { r.Close() })
	w, err := r.Watch(context.Background(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	nextWhere(t, w, 2*time.Second, "a and b", nil, hasAll(a.ID, b.ID))
	return w, a, b
}

// aheadListDriver answers relists with a revision ahead of the stream's.
type aheadListDriver struct {
	*memory.Driver
	lists atomic.Int64
}

func (d *aheadListDriver) List(ctx context.Context, service string) (registry.Snapshot, error) {
	s, err := d.Driver.List(ctx, service)
	s.Revision += 5
	d.lists.Add(1)
	return s, err
}

// TestFailedResyncIsNoOutage: a relist that fails (a timeout on a loaded
// backend) while the stream runs marks the cache stale, but the stream is
// still connected: a removal it delivers next is an event seen live, not
// a backend coming back without the instances, and is served at once,
// not held for the recovery window.
func TestFailedResyncIsNoOutage(t *testing.T) {
	srv := memory.NewServer()
	d := &failingListDriver{Driver: memory.NewDriver(srv)}
	w, a, b := watchTwo(t, srv, d)
	d.fail.Store(true)
	nextWhere(t, w, 2*time.Second, "stale after a failed relist", nil, func(s registry.Snapshot) bool { return s.Stale })
	srv.Delete("svc", a.ID) // the stream, still connected, delivers it
	nextWhere(t, w, 2*time.Second, "a's removal", nil, func(s registry.Snapshot) bool { return !s.Stale && !has(s, a.ID) && has(s, b.ID) })
}

// failingListDriver fails every relist once fail is set.
type failingListDriver struct {
	*memory.Driver
	fail atomic.Bool
}

func (d *failingListDriver) List(ctx context.Context, service string) (registry.Snapshot, error) {
	if d.fail.Load() {
		return registry.Snapshot{}, fmt.Errorf("list: %w: no answer within 5s", registry.ErrUnavailable)
	}
	return d.Driver.List(ctx, service)
}
