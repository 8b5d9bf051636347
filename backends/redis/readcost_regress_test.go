package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	rredis "github.com/roster-go/roster/backends/redis"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// watchMany opens n watches on r, of the services name(0) to name(n-1),
// and reads their first state.
func watchMany(t *testing.T, r *registry.Registry, n int, name func(int) string) []*registry.Watcher {
	t.Helper()
	ws := make([]*registry.Watcher, n)
	for i := range ws {
		w, err := r.Watch(t.Context(), name(i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Close() })
		if _, err := w.Next(t.Context()); err != nil {
			t.Fatal(err)
		}
		ws[i] = w
	}
	return ws
}

// Watched services that stay empty cost the server (close to) nothing:
// their sweeps stop once they are found empty, and one MGET per shared
// read checks their revisions. 300 of them, swept every 100ms, cost 12,000
// commands a second before, and their quiet checks one GET each per quiet
// period. A registration in one of them wakes its sweeps again: a crashed
// instance still leaves watchers within its TTL and a sweep.
func TestHashIdleServicesCostNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	rdb := srv.Client()
	defer rdb.Close()
	const n, sweep, quiet = 300, 100 * time.Millisecond, 500 * time.Millisecond
	obs := open(t, fmt.Sprintf("redis://%s?sweep=%v&quiet=%v", srv.Addr(), sweep, quiet))
	ws := watchMany(t, obs, n, func(i int) string { return fmt.Sprintf("empty-%03d", i) })
	time.Sleep(quiet) // the first claims, sweeps and quiet checks
	got := rate(ctx, t, rdb, 2*time.Second)
	t.Logf("%d empty watched services: %.0f server commands/s", n, got)
	// What remains: the registry's resync lists (n per 60s, 4 commands
	// each) and the quiet checks.
	if max := float64(n) / 2; got > max {
		t.Errorf("%d empty watched services cost %.0f commands/s, want at most %.0f", n, got, max)
	}
	d := openDriver(t, "redis://"+srv.Addr())
	if _, err := d.Register(ctx, driver.Instance{ID: "crash", Service: "empty-007", Address: "10.0.0.1:80"}, time.Second); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	nextWith(ctx, t, ws[7], 7, 1)
	nextWith(ctx, t, ws[7], 7, 0) // never heartbeaten: it expires
	if took := time.Since(start); took > time.Second+time.Second {
		t.Errorf("the crashed instance left the watcher after %v, want within its TTL (1s) and a second", took)
	}
}

// Log entries whose revisions do not follow (another writer of the
// keyspace, buggy or hostile) make a watch relist, at most once a second:
// 100 of them in a second cost a watch of a large service 100 relists
// before. The watch still converges.
func TestHashBadLogEntriesThrottled(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	rdb := srv.Client()
	defer rdb.Close()
	r := open(t, "redis://"+srv.Addr())
	obs := open(t, "redis://"+srv.Addr())
	const n = 50
	for i := range n {
		if _, err := r.Register(ctx, registry.Instance{Service: "bad", Address: fmt.Sprintf("10.0.0.%d:80", i+1)}, registry.WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	w := watchMany(t, obs, 1, func(int) string { return "bad" })[0]
	mon := startMonitor(t, srv.Addr())
	_, from := mon.since(0)
	const window, entries = 2 * time.Second, 200
	for range entries {
		rdb.XAdd(ctx, &goredis.XAddArgs{Stream: "roster:{bad}:log", Values: []string{"rev", "1", "op", "del", "id", "x"}})
		time.Sleep(window / entries)
	}
	lines, _ := mon.since(from)
	relists := 0
	for _, l := range lines {
		if l.isScript(rredis.SnapshotScriptSHA) {
			relists++
		}
	}
	t.Logf("%d bad log entries in %v: %d relists", entries, window, relists)
	if max := int(window/time.Second) + 2; relists > max {
		t.Errorf("%d bad log entries in %v: %d relists, want at most %d", entries, window, relists, max)
	}
	if _, err := r.Register(ctx, registry.Instance{Service: "bad", Address: "10.0.1.1:80"}, registry.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nextWith(wctx, t, w, 0, n+1)
}
