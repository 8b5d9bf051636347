package middleware_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// countingDriver counts the backend watches open on it.
type countingDriver struct {
	driver.Driver
	open atomic.Int64
}

func (d *countingDriver) Watch(ctx context.Context, service string) (driver.Stream, error) {
	st, err := d.Driver.Watch(ctx, service)
	if err != nil {
		return nil, err
	}
	d.open.Add(1)
	return &countedStream{Stream: st, d: d}, nil
}

type countedStream struct {
	driver.Stream
	d      *countingDriver
	closed atomic.Bool
}

func (s *countedStream) Close() error {
	if s.closed.CompareAndSwap(false, true) {
		s.d.open.Add(-1)
	}
	return s.Stream.Close()
}

// A client used for 2,000 distinct services ends up following only
// those called in the last two sweeps: the others' watches are closed,
// and the next call to one of them follows it again.
func TestClientFollowsOnlyRecentServices(t *testing.T) {
	srv := memory.NewServer()
	writer := registry.New(memory.NewDriver(srv))
	defer writer.Close()
	ctx := context.Background()
	const n, perSweep = 2000, 100
	name := func(i int) string { return fmt.Sprintf("svc-%04d", i) }
	for i := range n {
		if _, err := writer.Register(ctx, registry.Instance{Service: name(i), Address: fmt.Sprintf("10.1.%d.%d:80", i/250, i%250+1)},
			registry.WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	d := &countingDriver{Driver: memory.NewDriver(srv)}
	reader := registry.New(d)
	defer reader.Close()
	c := newClient(t, reader, middleware.WithServiceIdle(0)) // sweeps by hand
	called := map[string]bool{}
	for i := range n {
		if err := c.Do(ctx, name(i), func(_ context.Context, in registry.Instance) error {
			called[in.Service] = true
			return nil
		}); err != nil {
			t.Fatalf("Do(%s): %v", name(i), err)
		}
		if (i+1)%perSweep == 0 {
			c.Sweep()
		}
	}
	if len(called) != n {
		t.Fatalf("%d services called, want %d", len(called), n)
	}
	// The last sweep keeps the services of its two previous epochs.
	if got, open := c.Followed(), d.open.Load(); got != 2*perSweep || open != 2*perSweep {
		t.Fatalf("after %d services: %d followed, %d watches open; want %d", n, got, open, 2*perSweep)
	}
	if _, ok := c.Snapshot(name(0)); ok {
		t.Errorf("%s, idle since the start, still followed", name(0))
	}
	if _, ok := c.Snapshot(name(n - 1)); !ok {
		t.Errorf("%s, just called, not followed", name(n-1))
	}
	if err := c.Do(ctx, name(0), noop); err != nil {
		t.Fatalf("Do(%s) after it was forgotten: %v", name(0), err)
	}
	if got, open := c.Followed(), d.open.Load(); got != 2*perSweep+1 || open != 2*perSweep+1 {
		t.Fatalf("after calling %s again: %d followed, %d watches open; want %d", name(0), got, open, 2*perSweep+1)
	}
}

// The client sweeps on its own every idle/2.
func TestClientSweepsIdleServices(t *testing.T) {
	e := newEnv(t)
	startBackend(t, e.writer, "api", 100)
	c := newClient(t, e.reader, middleware.WithServiceIdle(20*time.Millisecond))
	if err := c.Do(context.Background(), "api", get); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.Followed() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("api still followed 10s after its only call, with an idle bound of 20ms")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.Do(context.Background(), "api", get); err != nil {
		t.Fatalf("Do after the service was forgotten: %v", err)
	}
}

// A service served stale is kept however idle: the outage must not cost
// it the instances it last knew. Once forgotten, a service persisted in
// the snapshot directory is served from the file during an outage.
func TestIdleEvictionKeepsTheStaleCache(t *testing.T) {
	e := newEnv(t)
	startBackend(t, e.writer, "api", 100)
	startBackend(t, e.writer, "web", 100)
	dir := t.TempDir()
	c := newClient(t, e.reader, middleware.WithServiceIdle(0), middleware.WithSnapshotDir(dir))
	for _, svc := range []string{"api", "web"} {
		if err := c.Do(context.Background(), svc, get); err != nil {
			t.Fatal(err)
		}
	}
	// web idles out while the registry answers.
	for range 3 {
		c.Sweep()
	}
	if _, ok := c.Snapshot("web"); ok {
		t.Fatal("web still followed after three sweeps without a call")
	}
	if err := c.Do(context.Background(), "api", get); err != nil {
		t.Fatal(err)
	}
	e.link.SetReachable(false)
	waitStale(t, c, "api")
	for range 5 {
		c.Sweep()
	}
	if s, ok := c.Snapshot("api"); !ok || !s.Stale || len(s.Instances) != 1 {
		t.Fatalf("api during the outage after 5 idle sweeps: %+v (followed %v), want its last instance, stale", s, ok)
	}
	for _, svc := range []string{"api", "web"} {
		if err := c.Do(context.Background(), svc, get); err != nil {
			t.Errorf("Do(%s) during the outage: %v", svc, err)
		}
	}
	if s, _ := c.Snapshot("web"); !s.Stale || len(s.Instances) != 1 {
		t.Errorf("web followed again during the outage: %+v, want the persisted instance, stale", s)
	}
}
