package registry_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// beatDriver records every heartbeat's time, by instance ID. The
// heartbeats of stuck block until their context ends.
type beatDriver struct {
	*memory.Driver
	stuck string

	mu    sync.Mutex
	beats map[string][]time.Time
}

type beatReg struct {
	driver.Registration
	d  *beatDriver
	id string
}

func (d *beatDriver) Register(ctx context.Context, in driver.Instance, ttl time.Duration) (driver.Registration, error) {
	reg, err := d.Driver.Register(ctx, in, ttl)
	if err != nil {
		return nil, err
	}
	return &beatReg{Registration: reg, d: d, id: in.ID}, nil
}

func (r *beatReg) Heartbeat(ctx context.Context) error {
	if r.id == r.d.stuck {
		<-ctx.Done()
		return ctx.Err()
	}
	r.d.mu.Lock()
	r.d.beats[r.id] = append(r.d.beats[r.id], time.Now())
	r.d.mu.Unlock()
	return r.Registration.Heartbeat(ctx)
}

// maxGap returns the longest time between two heartbeats of one
// instance (or from start to its first), and the fewest heartbeats any
// instance had.
func (d *beatDriver) maxGap(start time.Time, ids []string) (gap time.Duration, fewest int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fewest = -1
	for _, id := range ids {
		prev := start
		for _, at := range d.beats[id] {
			gap = max(gap, at.Sub(prev))
			prev = at
		}
		if n := len(d.beats[id]); fewest < 0 || n < fewest {
			fewest = n
		}
	}
	return gap, fewest
}

func registerN(t *testing.T, r *registry.Registry, n int, ttl time.Duration) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		l, err := r.Register(context.Background(), registry.Instance{ID: fmt.Sprintf("i%d", i), Service: "svc",
			Address: fmt.Sprintf("10.0.%d.%d:80", i/250, i%250+1)}, registry.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = l.Instance().ID
	}
	return ids
}

// TestLeasesHaveNoGoroutineOfTheirOwn: the registry's grid beats every
// lease without a health check, so a process holding many leases does
// not hold a goroutine (and wake it, with a timer of its own) for each.
func TestLeasesHaveNoGoroutineOfTheirOwn(t *testing.T) {
	d := &beatDriver{Driver: memory.NewDriver(memory.NewServer()), beats: map[string][]time.Time{}}
	r := registry.New(d)
	defer r.Close()
	before := runtime.NumGoroutine()
	start := time.Now()
	const n, ttl = 300, 600 * time.Millisecond // a heartbeat every 160–200ms
	ids := registerN(t, r, n, ttl)
	if grew := runtime.NumGoroutine() - before; grew > 20 {
		t.Errorf("%d leases added %d goroutines, want none of their own", n, grew)
	}
	waitUntil(t, 10*time.Second, "every lease beat 3 times", func() bool {
		_, fewest := d.maxGap(start, ids)
		return fewest >= 3
	})
	if gap, _ := d.maxGap(start, ids); gap > ttl*2/3 {
		t.Errorf("a lease went %v without a heartbeat, want within two intervals (%v)", gap, ttl*2/3)
	}
}

// TestStuckHeartbeatHoldsNoOtherBack: leases due in the same slot share
// a goroutine, and one whose backend call hangs (here for its whole
// timeout, 1s, on every heartbeat) gets help: the others still beat on
// time.
func TestStuckHeartbeatHoldsNoOtherBack(t *testing.T) {
	d := &beatDriver{Driver: memory.NewDriver(memory.NewServer()), beats: map[string][]time.Time{}, stuck: "i0"}
	r := registry.New(d)
	defer r.Close()
	start := time.Now()
	const ttl = 600 * time.Millisecond
	ids := registerN(t, r, 60, ttl)[1:]
	time.Sleep(3 * time.Second) // three stuck heartbeats of i0, fifteen of the others
	gap, fewest := d.maxGap(start, ids)
	if gap > 900*time.Millisecond {
		t.Errorf("a lease went %v without a heartbeat beside a stuck one, want under 900ms (interval %v)", gap, ttl/3)
	}
	if fewest < 8 {
		t.Errorf("a lease beat %d times in 3s, want at least 8 (interval %v)", fewest, ttl/3)
	}
}
