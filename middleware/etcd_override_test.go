package middleware_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
)

// TestDrainOverrideOnEtcd: an operator drains one of three instances
// serving calls through a Client on another registry. The client sees the
// drain within 1s, the instance then gets no new call, and no call fails.
func TestDrainOverrideOnEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, writer := startEtcd(ctx, t, "/mw-drain")
	reader, err := registry.Open(ctx, cl.URL("/mw-drain"))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	operator, err := registry.Open(ctx, cl.URL("/mw-drain"))
	if err != nil {
		t.Fatal(err)
	}
	defer operator.Close()
	bs := []*backend{startBackend(t, writer, "api", 100), startBackend(t, writer, "api", 100), startBackend(t, writer, "api", 100)}
	c, err := middleware.NewClient(reader)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const workers = 4
	var (
		calls, failed atomic.Int64
		firstErr      atomic.Value
		stop          = make(chan struct{})
		wg            sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				err := c.Do(cctx, "api", get)
				cancel()
				calls.Add(1)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	victim := bs[0]
	for deadline := time.Now().Add(10 * time.Second); victim.hits.Load() < 50; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the victim served %d calls in 10s, want it in rotation first", victim.hits.Load())
		}
	}
	start := time.Now()
	if err := operator.SetOverride(ctx, registry.Override{Service: "api", ID: victim.id(), Drain: true, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	for {
		s, _ := c.Snapshot("api")
		if in, ok := s.Find(victim.id()); ok && in.Weight == 0 {
			break
		}
		if time.Since(start) > time.Second {
			t.Fatalf("the client did not see the drain within 1s: %+v", s.Instances)
		}
		time.Sleep(5 * time.Millisecond)
	}
	seen := time.Since(start)
	at, callsAt := victim.hits.Load(), calls.Load()
	for calls.Load() < callsAt+2000 {
		if time.Since(start) > 30*time.Second {
			t.Fatal("load stalled")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Calls picked before the snapshot changed may still land: at most one
	// per worker.
	if late := victim.hits.Load() - at; late > workers {
		t.Fatalf("the drained instance got %d calls of the next %d, want none new", late, calls.Load()-callsAt)
	}
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d calls failed: %v", n, calls.Load(), firstErr.Load())
	}
	t.Logf("drain seen by the client after %v; the drained instance got %d of the next %d calls; %d calls, 0 failed",
		seen.Round(time.Millisecond), victim.hits.Load()-at, calls.Load()-callsAt, calls.Load())
}
