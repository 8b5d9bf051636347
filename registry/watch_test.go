package registry_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
)

type countSnapshots struct{ n atomic.Int64 }

func (c *countSnapshots) Lookup(string, bool, time.Duration, error)                {}
func (c *countSnapshots) Snapshot(registry.Snapshot)                               { c.n.Add(1) }
func (c *countSnapshots) LeaseState(registry.Instance, registry.LeaseState, error) {}
func (c *countSnapshots) Resync(string, time.Time, time.Duration, error)           {}

// A watcher that does not read while its cache goes stale and fresh again
// with the same instances must not then return that same state twice in
// a row: the Watcher contract promises a different state on every Next.
func TestWatcherSkipsStateEqualToLastReturned(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	srv := memory.NewServer()
	obs := &countSnapshots{}
	drv := memory.NewDriver(srv)
	r := registry.New(drv, registry.WithObserver(obs), registry.WithResyncInterval(0))
	defer r.Close()
	l, err := r.Register(ctx, registry.Instance{Service: "svc", Address: "127.0.0.1:1"}, registry.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	w, err := r.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	first, err := w.Next(ctx)
	if err != nil || len(first.Instances) != 1 {
		t.Fatalf("first Next = %v, %v", first.Instances, err)
	}
	before := obs.n.Load()
	// Stale while the reader is away…
	drv.SetReachable(false)
	for {
		s, err := r.Lookup(ctx, "svc")
		if s.Stale && errors.Is(err, registry.ErrUnavailable) {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("never went stale")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// …and fresh again, with the same instance, before it reads.
	drv.SetReachable(true)
	for obs.n.Load() == before {
		if ctx.Err() != nil {
			t.Fatal("never fresh again")
		}
		time.Sleep(5 * time.Millisecond)
	}
	nctx, ncancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer ncancel()
	if s, err := w.Next(nctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next after a stale/fresh bounce = %v stale=%v, %v; want no delivery (same state as the last one returned)", s.Instances, s.Stale, err)
	}
	// A real change still arrives.
	_ = l.Deregister(ctx)
	if s, err := w.Next(ctx); err != nil || len(s.Instances) != 0 {
		t.Fatalf("Next after deregister = %v, %v; want empty", s.Instances, err)
	}
}
