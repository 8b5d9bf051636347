package redis_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

// A FLUSHALL on the keys layout while the watch stays connected is held
// like a restart: the watcher's list never loses an instance while the
// leases write themselves back, and they are back within TTL + 1s.
func TestKeysFlushAllHeld(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	defer rdb.Close()
	ctx := t.Context()
	// A 50ms poll sees the wipe before any lease's next heartbeat (1s).
	url := "redis://" + srv.Addr() + "?layout=keys&poll=50ms&notify=off"
	r, obs := open(t, url), open(t, url)
	const n, ttl = 3, 3 * time.Second
	for i := range n {
		if _, err := r.Register(ctx, registry.Instance{Service: "wipe", Address: fmt.Sprintf("127.0.0.1:%d", 8000+i)}, registry.WithTTL(ttl)); err != nil {
			t.Fatal(err)
		}
	}
	w, err := obs.Watch(ctx, "wipe")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if s, err := w.Next(ctx); err != nil || len(s.Instances) != n {
		t.Fatalf("first Next: %d instances, %v", len(s.Instances), err)
	}
	var (
		mu     sync.Mutex
		fewest = n
		stop   = make(chan struct{})
		done   = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			nctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			s, _ := w.Next(nctx)
			cancel()
			if s.Service != "" {
				mu.Lock()
				fewest = min(fewest, len(s.Instances))
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	start := time.Now()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	back := waitFor(t, ttl+time.Second, "every instance registered again after FLUSHALL", func() bool {
		s, err := r.Lookup(ctx, "wipe") // r watches nothing: the backend's own answer
		return err == nil && len(s.Instances) == n
	})
	close(stop)
	<-done
	t.Logf("FLUSHALL: instances back %v after it; the watcher listed %d at fewest (%v in all)", back, fewest, time.Since(start))
	if fewest != n {
		t.Fatalf("after FLUSHALL the watcher listed %d of %d instances: it applied the wipe instead of holding", fewest, n)
	}
}
