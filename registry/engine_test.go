package registry_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// states records lease state changes.
type states struct {
	mu  sync.Mutex
	seq []registry.LeaseState
}

func (s *states) hook(st registry.LeaseState, _ error) {
	s.mu.Lock()
	s.seq = append(s.seq, st)
	s.mu.Unlock()
}

func (s *states) saw(st registry.LeaseState) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.seq {
		if x == st {
			return true
		}
	}
	return false
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func present(t *testing.T, r *registry.Registry, svc, id string) bool {
	s, err := r.Lookup(context.Background(), svc)
	if err != nil {
		return false
	}
	_, ok := s.Find(id)
	return ok
}

func TestLeaseReregistersAfterBackendDropped(t *testing.T) {
	ctx := context.Background()
	srv := memory.NewServer()
	r := registry.New(memory.NewDriver(srv))
	defer r.Close()
	var st states
	l, err := r.Register(ctx, registry.Instance{Service: "svc", Address: "127.0.0.1:1"},
		registry.WithTTL(300*time.Millisecond), registry.WithStateHook(st.hook))
	if err != nil {
		t.Fatal(err)
	}
	id := l.Instance().ID
	srv.Wipe() // the backend lost everything
	if present(t, r, "svc", id) {
		t.Fatal("wipe did not remove the instance")
	}
	waitUntil(t, 2*time.Second, "instance back after the wipe", func() bool { return present(t, r, "svc", id) })
	waitUntil(t, time.Second, "lease healthy", func() bool { return l.State() == registry.LeaseHealthy })
	if !st.saw(registry.LeaseReregistering) {
		t.Errorf("state changes %v: the lease never reported re-registering", st.seq)
	}
}

func TestLeaseRetriesThroughLongOutage(t *testing.T) {
	ctx := context.Background()
	srv := memory.NewServer()
	d := memory.NewDriver(srv)
	r := registry.New(d)
	defer r.Close()
	obs := registry.New(memory.NewDriver(srv))
	defer obs.Close()
	l, err := r.Register(ctx, registry.Instance{Service: "svc", Address: "127.0.0.1:1"},
		registry.WithTTL(150*time.Millisecond), registry.WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	id := l.Instance().ID
	d.SetReachable(false)
	waitUntil(t, 2*time.Second, "instance expired during the outage", func() bool { return !present(t, obs, "svc", id) })
	waitUntil(t, 2*time.Second, "lease re-registering", func() bool { return l.State() == registry.LeaseReregistering })
	if err := l.Err(); !errors.Is(err, registry.ErrUnavailable) {
		t.Errorf("Lease.Err during the outage = %v, want ErrUnavailable", err)
	}
	d.SetReachable(true)
	waitUntil(t, 2*time.Second, "instance back after the outage", func() bool { return present(t, obs, "svc", id) })
	waitUntil(t, time.Second, "lease healthy with no error", func() bool { return l.State() == registry.LeaseHealthy && l.Err() == nil })
}

func TestHealthCheckFailingAtStart(t *testing.T) {
	ctx := context.Background()
	r := registry.New(memory.NewDriver(memory.NewServer()))
	defer r.Close()
	var ok atomic.Bool
	l, err := r.Register(ctx, registry.Instance{Service: "svc", Address: "127.0.0.1:1"},
		registry.WithTTL(300*time.Millisecond),
		registry.WithHealthCheck(func(context.Context) error {
			if ok.Load() {
				return nil
			}
			return errors.New("warming up")
		}, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if l.State() != registry.LeaseWithdrawn || l.Err() == nil {
		t.Fatalf("lease with a failing first check: state %v err %v, want withdrawn with the check's error", l.State(), l.Err())
	}
	id := l.Instance().ID
	if present(t, r, "svc", id) {
		t.Fatal("registered although the health check fails")
	}
	ok.Store(true)
	waitUntil(t, time.Second, "registered once the check passes", func() bool { return present(t, r, "svc", id) })
	if err := l.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	if present(t, r, "svc", id) {
		t.Fatal("present after Deregister")
	}
}

func TestDeregisterWhileUnreachable(t *testing.T) {
	ctx := context.Background()
	srv := memory.NewServer()
	d := memory.NewDriver(srv)
	r := registry.New(d)
	defer r.Close()
	l, err := r.Register(ctx, registry.Instance{Service: "svc", Address: "127.0.0.1:1"}, registry.WithTTL(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	d.SetReachable(false)
	if err := l.Deregister(ctx); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("Deregister while unreachable = %v, want ErrUnavailable", err)
	}
	if l.State() != registry.LeaseClosed {
		t.Fatalf("state = %v, want closed: no more heartbeats", l.State())
	}
	// Without heartbeats the backend drops it with the TTL.
	obs := registry.New(memory.NewDriver(srv))
	defer obs.Close()
	waitUntil(t, time.Second, "expired after a failed deregister", func() bool { return !present(t, obs, "svc", l.Instance().ID) })
}

// stallingDriver delivers the first snapshot of each stream and then
// nothing: a change feed that silently lost events. Only resync can heal it.
type stallingDriver struct{ *memory.Driver }

func (d stallingDriver) Watch(ctx context.Context, svc string) (driver.Stream, error) {
	st, err := d.Driver.Watch(ctx, svc)
	if err != nil {
		return nil, err
	}
	return &stallingStream{Stream: st}, nil
}

type stallingStream struct {
	driver.Stream
	once bool
}

func (s *stallingStream) Next(ctx context.Context) (registry.Snapshot, error) {
	if !s.once {
		s.once = true
		return s.Stream.Next(ctx)
	}
	<-ctx.Done()
	return registry.Snapshot{}, ctx.Err()
}

func TestResyncHealsALossyStream(t *testing.T) {
	ctx := context.Background()
	srv := memory.NewServer()
	r := registry.New(stallingDriver{memory.NewDriver(srv)}, registry.WithResyncInterval(100*time.Millisecond))
	defer r.Close()
	w, err := r.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	first, err := w.Next(ctx)
	if err != nil || len(first.Instances) != 0 {
		t.Fatalf("first = %v, %v", first.Instances, err)
	}
	writer := registry.New(memory.NewDriver(srv))
	defer writer.Close()
	if _, err := writer.Register(ctx, registry.Instance{Service: "svc", Address: "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	nctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := w.Next(nctx)
	if err != nil || len(s.Instances) != 1 {
		t.Fatalf("resync did not deliver the missed registration: %v, %v", s.Instances, err)
	}
	if s.Revision <= first.Revision {
		t.Errorf("revision %d after %d", s.Revision, first.Revision)
	}
}

func TestWatchUnreachableFromStart(t *testing.T) {
	ctx := context.Background()
	srv := memory.NewServer()
	d := memory.NewDriver(srv)
	d.SetReachable(false)
	r := registry.New(d)
	defer r.Close()
	w, err := r.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	nctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := w.Next(nctx)
	if !s.Stale || len(s.Instances) != 0 || !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("first Next while unreachable = %+v, %v; want a stale empty snapshot and ErrUnavailable", s, err)
	}
	d.SetReachable(true)
	s, err = w.Next(nctx)
	if err != nil || s.Stale {
		t.Fatalf("after reconnecting: %+v, %v; want a fresh snapshot", s, err)
	}
}

type recorder struct {
	mu        sync.Mutex
	hits      int
	misses    int
	snapshots int
	states    int
}

func (o *recorder) Lookup(_ string, hit bool, _ time.Duration, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if hit {
		o.hits++
	} else {
		o.misses++
	}
}
func (o *recorder) Snapshot(registry.Snapshot)                     { o.mu.Lock(); o.snapshots++; o.mu.Unlock() }
func (o *recorder) Resync(string, time.Time, time.Duration, error) {}
func (o *recorder) LeaseState(registry.Instance, registry.LeaseState, error) {
	o.mu.Lock()
	o.states++
	o.mu.Unlock()
}

func TestObserver(t *testing.T) {
	ctx := context.Background()
	obs := &recorder{}
	r := registry.New(memory.NewDriver(memory.NewServer()), registry.WithObserver(obs))
	l, err := r.Register(ctx, registry.Instance{Service: "svc", Address: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Lookup(ctx, "svc"); err != nil { // miss: no watch yet
		t.Fatal(err)
	}
	w, _ := r.Watch(ctx, "svc")
	if _, err := w.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Lookup(ctx, "svc"); err != nil { // hit
		t.Fatal(err)
	}
	l.Deregister(ctx)
	w.Close()
	r.Close()
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.hits != 1 || obs.misses != 1 || obs.snapshots < 1 || obs.states < 1 {
		t.Fatalf("observer saw hits=%d misses=%d snapshots=%d states=%d; want 1, 1, ≥1, ≥1", obs.hits, obs.misses, obs.snapshots, obs.states)
	}
}

// hangingDriver's deregistrations wait for their context: a backend that
// stopped answering.
type hangingDriver struct{ driver.Driver }

func (d hangingDriver) Register(ctx context.Context, in driver.Instance, ttl time.Duration) (driver.Registration, error) {
	reg, err := d.Driver.Register(ctx, in, ttl)
	return hangingRegistration{reg}, err
}

type hangingRegistration struct{ driver.Registration }

func (hangingRegistration) Deregister(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestShutdownHonoursItsContext: Shutdown returns by its deadline with
// the leases it could not deregister named, where Close would give each
// of 100 leases its grace (32 at a time: 20s) against a backend that
// hangs.
func TestShutdownHonoursItsContext(t *testing.T) {
	r := registry.New(hangingDriver{memory.NewDriver(memory.NewServer())}, registry.AllowLoopback())
	for range 100 {
		if _, err := r.Register(t.Context(), registry.Instance{Service: "api", Address: "127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := r.Shutdown(ctx)
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Shutdown with a 200ms deadline took %v", el)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v, want the deadline's error", err)
	}
	if err := r.Close(); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Close after Shutdown = %v, want ErrClosed", err)
	}
}
