package middleware_test

import (
	"context"
	"testing"
	"time"

	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/selector"
)

// TestSuccessRateOnEtcd: six real HTTP instances registered in a real
// etcd, one of them answering 503 to 3 calls in 10 (never twice in a row,
// so consecutive failures never eject it). Success-rate detection ejects
// that one, and only that one, while every call succeeds (retried on a
// healthy instance).
func TestSuccessRateOnEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, reg := startEtcd(ctx, t, "/sr")
	var bs []*backend
	for range 6 {
		bs = append(bs, startBackend(t, reg, "api", 100))
	}
	bad := bs[2]
	bad.flaky.Store(true)

	q := middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: 1 << 30,
		SuccessRateInterval: time.Second, SuccessRateRequestVolume: 20})
	c, err := middleware.NewClient(reg, middleware.WithQuarantine(q), middleware.WithSelector(selector.WithStrategy(selector.RoundRobin)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	deadline := time.Now().Add(30 * time.Second)
	for len(q.Ejected("api")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no instance ejected after 30 s; the flaky one took %d calls", bad.hits.Load())
		}
		if errs := load(c, "api", 4, 200, nil); len(errs) > 0 {
			t.Fatalf("%d calls failed: %v", len(errs), errs[0])
		}
	}
	if ej := q.Ejected("api"); len(ej) != 1 || ej[0] != bad.id() {
		t.Fatalf("ejected %v, want only the flaky instance %s", ej, bad.id())
	}
	before := bad.hits.Load()
	if errs := load(c, "api", 4, 300, nil); len(errs) > 0 {
		t.Fatalf("%d calls failed after the ejection: %v", len(errs), errs[0])
	}
	if n := bad.hits.Load() - before; n != 0 {
		t.Fatalf("the ejected instance took %d of 300 calls", n)
	}
}
