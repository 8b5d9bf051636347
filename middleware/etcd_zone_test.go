package middleware_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/selector"
)

// TestZoneFailoverOnEtcd is the zone probe of issue 27 on a real etcd: a
// caller in zone a with locality, two instances in zone a answering 503
// to every call, two healthy ones in zone b. The quarantine ejects the
// whole failing zone (over its 10% cap: the failure is confined to zone a
// and zone b is healthy), the selector sends everything to zone b, and
// when zone a recovers its probes readmit it and the traffic comes back.
func TestZoneFailoverOnEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, reg := startEtcd(ctx, t, "/zone")
	a := []*backend{startZoned(t, reg, "api", 100, "a"), startZoned(t, reg, "api", 100, "a")}
	b := []*backend{startZoned(t, reg, "api", 100, "b"), startZoned(t, reg, "api", 100, "b")}
	hits := func(bs []*backend) int64 { return bs[0].hits.Load() + bs[1].hits.Load() }
	for _, x := range a {
		x.status.Store(503)
	}
	q := middleware.NewQuarantine(middleware.QuarantineConfig{BaseEjection: 300 * time.Millisecond})
	c, err := middleware.NewClient(reg, middleware.WithQuarantine(q),
		middleware.WithSelector(selector.WithStrategy(selector.P2CEWMA), selector.WithLocality("a")))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	failover := func(phase string) {
		t.Helper()
		a0, b0 := hits(a), hits(b)
		errs := load(c, "api", 4, 400, nil)
		throttled := 0
		for _, err := range errs {
			if errors.Is(err, middleware.ErrThrottled) {
				throttled++
			}
		}
		// 99.5% of 400: two calls may fail.
		if len(errs) > 2 {
			t.Fatalf("%s: %d of 400 calls failed (%d throttled): %v", phase, len(errs), throttled, errs[0])
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

	for _, x := range a {
		x.status.Store(200)
	}
	// The ejections end, the probes succeed, zone a is back: a window of
	// 100 calls that all go there.
	deadline := time.Now().Add(30 * time.Second)
	for {
		a0 := hits(a)
		if errs := load(c, "api", 4, 100, nil); len(errs) > 0 {
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

	for _, x := range a {
		x.status.Store(503)
	}
	failover("zone a failing again")
}

// TestRegionFailoverOnEtcd: a caller in zone a of region r1, zone a's
// two instances failing every call, zone b of r1 (two instances) and
// zone c of r2 (four) healthy: the traffic zone a sheds goes to zone b,
// the rest of its region, and none to region r2. When zone b fails too,
// the quarantine ejects the whole region and r2 takes the calls.
func TestRegionFailoverOnEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, reg := startEtcd(ctx, t, "/region")
	zone := func(z, r string, n int) []*backend {
		var bs []*backend
		for range n {
			bs = append(bs, startLocated(t, reg, "api", 100, z, r))
		}
		return bs
	}
	// Region r2 holds half the service: a whole region r1 out leaves the
	// quarantine's panic threshold (50%) admitted.
	a, b, c := zone("a", "r1", 2), zone("b", "r1", 2), zone("c", "r2", 4)
	hits := func(bs []*backend) (n int64) {
		for _, x := range bs {
			n += x.hits.Load()
		}
		return n
	}
	for _, x := range a {
		x.status.Store(503)
	}
	q := middleware.NewQuarantine(middleware.QuarantineConfig{BaseEjection: time.Minute})
	cl, err := middleware.NewClient(reg, middleware.WithQuarantine(q),
		middleware.WithSelector(selector.WithStrategy(selector.P2CEWMA), selector.WithLocality("a"), selector.WithRegion("r1")))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Every instance is registered before the client's first snapshot.
	a0, b0, c0 := hits(a), hits(b), hits(c)
	errs := load(cl, "api", 4, 400, nil)
	if len(errs) > 2 {
		t.Fatalf("zone a failing: %d of 400 calls failed: %v", len(errs), errs[0])
	}
	da, db, dc := hits(a)-a0, hits(b)-b0, hits(c)-c0
	t.Logf("zone a failing: %d of 400 calls failed, zone a took %d attempts, zone b (r1) %d, zone c (r2) %d", len(errs), da, db, dc)
	if da > 30 || db < 398 || dc != 0 {
		t.Fatalf("zone a failing: zone a took %d attempts, zone b %d of 400 calls, zone c (other region) %d; want the first few failures, about 400, none", da, db, dc)
	}

	for _, x := range b {
		x.status.Store(503)
	}
	b0, c0 = hits(b), hits(c)
	if errs = load(cl, "api", 4, 400, nil); len(errs) > 2 {
		t.Fatalf("region r1 failing: %d of 400 calls failed: %v", len(errs), errs[0])
	}
	db, dc = hits(b)-b0, hits(c)-c0
	t.Logf("region r1 failing: %d of 400 calls failed, zone b took %d attempts, zone c (r2) %d", len(errs), db, dc)
	if db > 30 || dc < 398 {
		t.Fatalf("region r1 failing: zone b took %d attempts, zone c %d of 400 calls", db, dc)
	}
}
