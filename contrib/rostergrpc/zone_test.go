package rostergrpc_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	testpb "google.golang.org/grpc/interop/grpc_testing"

	rostergrpc "github.com/roster-go/roster/contrib/rostergrpc"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// burst makes n calls on workers goroutines and returns the failures.
func burst(c testpb.TestServiceClient, workers, n int) []error {
	var (
		mu   sync.Mutex
		errs []error
		left atomic.Int64
		wg   sync.WaitGroup
	)
	left.Store(int64(n))
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if _, err := call(context.Background(), c); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return errs
}

// TestZoneFailoverOnEtcd is the zone probe of issue 27 on the gRPC path,
// on a real etcd: the caller prefers zone a (selector.WithLocality), two
// zone-a servers answer Unavailable to every call, two in zone b are
// healthy. The first failures are retried in zone b; the quarantine
// ejects the failing zone (past its 10% cap: the failure is confined to
// zone a, zone b is healthy), the balancer counts its instances
// unusable and sends everything to zone b, and the throttle does not
// count the contained failures. When zone a recovers, its probes
// readmit it and the traffic comes back.
func TestZoneFailoverOnEtcd(t *testing.T) {
	_, open := startEtcd(t)
	srv := open()
	zoned := func(name, zone string) *server {
		return startInstance(t, srv, registry.Instance{Service: "api", Zone: zone}, name, 0)
	}
	a := []*server{zoned("a1", "a"), zoned("a2", "a")}
	b := []*server{zoned("b1", "b"), zoned("b2", "b")}
	hits := func(ss []*server) int64 { return ss[0].calls.Load() + ss[1].calls.Load() }
	q := middleware.NewQuarantine(middleware.QuarantineConfig{BaseEjection: 300 * time.Millisecond})
	c := dial(t, open(), "api", rostergrpc.WithQuarantine(q), rostergrpc.WithSelector(selector.WithLocality("a")))
	waitAnswered(t, c, "a1", "a2")
	for _, s := range a {
		s.fail.Store(true)
	}

	failover := func(phase string) {
		t.Helper()
		a0, b0 := hits(a), hits(b)
		errs := burst(c, 4, 400)
		// 99.5% of 400: two calls may fail.
		if len(errs) > 2 {
			t.Fatalf("%s: %d of 400 calls failed: %v", phase, len(errs), errs[0])
		}
		// Five failures each eject the zone, then a probe each per
		// ejection end; everything else goes to zone b.
		if n := hits(a) - a0; n > 30 {
			t.Fatalf("%s: zone a took %d attempts, want the first few failures only", phase, n)
		}
		if n := hits(b) - b0; n < 398 {
			t.Fatalf("%s: zone b took %d of 400 calls", phase, n)
		}
		t.Logf("%s: %d of 400 calls failed, zone a took %d attempts, zone b %d", phase, len(errs), hits(a)-a0, hits(b)-b0)
	}
	failover("zone a failing")

	for _, s := range a {
		s.fail.Store(false)
	}
	// The ejections end, the probes succeed, zone a is back: a window of
	// 100 calls that all go there.
	recovered := time.Now()
	deadline := recovered.Add(30 * time.Second)
	for {
		a0 := hits(a)
		if errs := burst(c, 4, 100); len(errs) > 0 {
			t.Fatalf("recovery: %d of 100 calls failed: %v", len(errs), errs[0])
		}
		if hits(a)-a0 == 100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("zone a took %d of the last 100 calls 30 s after it recovered; ejected %v", hits(a)-a0, q.Ejected("api"))
		}
		time.Sleep(50 * time.Millisecond) // wall time for the ejections to end
	}
	t.Logf("zone a takes every call again %v after it recovered", time.Since(recovered).Round(10*time.Millisecond))

	for _, s := range a {
		s.fail.Store(true)
	}
	failover("zone a failing again")
}
