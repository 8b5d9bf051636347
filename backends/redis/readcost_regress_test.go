package redis_test

import (
	"context"
	"fmt"
	"slices"
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

// A driver's keys-layout watches share one keyspace subscription and one
// scan per poll interval: 200 watched services held 200 pub/sub
// connections and scanned the database 200 times per interval before.
// An event still reaches the watch of its service at once.
func TestKeysWatchesShareSubscriptionAndScan(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--notify-keyspace-events", "KEA")
	ctx := t.Context()
	rdb := srv.Client()
	defer rdb.Close()
	const n, poll = 200, 200 * time.Millisecond
	obs := open(t, fmt.Sprintf("redis://%s?layout=keys&notify=on&poll=%v&client_name=keyswatch", srv.Addr(), poll))
	ws := watchMany(t, obs, n, func(i int) string { return fmt.Sprintf("k-%03d", i) })
	// One keyspace subscription for every service, and one for the
	// records channel: the Registry's one watch of overrides.
	if got := pubsubClients(ctx, t, rdb); got != 2 {
		t.Errorf("%d watched services: %d pub/sub connections, want 2", n, got)
	}
	before := commandStats(ctx, t, rdb)
	const window = 2 * time.Second
	time.Sleep(window)
	after := commandStats(ctx, t, rdb)
	scans := after["scan"] - before["scan"]
	t.Logf("%d watched services, poll %v: %.0f SCAN in %v", n, poll, scans, window)
	if max := float64(window/poll) + 2; scans > max {
		t.Errorf("%d watched services, poll %v: %.0f SCAN in %v, want at most %.0f", n, poll, scans, window, max)
	}
	slow := open(t, "redis://"+srv.Addr()+"?layout=keys&notify=on&poll=1h")
	w := watchMany(t, slow, 1, func(int) string { return "k-042" })[0]
	if err := articleRegister(ctx, rdb, "k-042", "10.0.0.1:80"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nextWith(wctx, t, w, 0, 1)
	nextWith(wctx, t, ws[42], 42, 1)
}

// A large service is read in pages: no script reads more than 1,000
// records, so a relist does not block the server for other tenants. The
// pages, and the log entries replayed after them, give the same state as
// one atomic read, with writes going on meanwhile.
func TestHashLargeServicePaged(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	rdb := srv.Client()
	defer rdb.Close()
	const n = 2500
	deadline := float64(time.Now().Add(time.Hour).UnixMilli())
	_, err := rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i := range n {
			id := fmt.Sprintf("p-%05d", i)
			p.Set(ctx, "roster:{paged}:i:"+id, fmt.Sprintf(`{"id":%q,"service":"paged","address":"10.1.%d.%d:80"}`, id, i/250, i%250), time.Hour)
			p.ZAdd(ctx, "roster:{paged}:idx", goredis.Z{Score: deadline, Member: id})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mon := startMonitor(t, srv.Addr())
	_, from := mon.since(0)
	r := open(t, "redis://"+srv.Addr())
	obs := open(t, "redis://"+srv.Addr())
	w := watchMany(t, obs, 1, func(int) string { return "paged" })[0]
	if s, err := obs.Lookup(ctx, "paged"); err != nil || len(s.Instances) != n {
		t.Fatalf("Lookup: %d instances, %v; want %d", len(s.Instances), err, n)
	}
	const more = 20
	for i := range more {
		if _, err := r.Register(ctx, registry.Instance{Service: "paged", Address: fmt.Sprintf("10.2.0.%d:80", i+1)}, registry.WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if i%5 == 0 { // a relist, while the registrations go on
			rdb.XAdd(ctx, &goredis.XAddArgs{Stream: "roster:{paged}:log", Values: []string{"rev", "1", "op", "del", "id", "x"}})
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nextWith(wctx, t, w, 0, n+more)
	lines, _ := mon.since(from)
	scans, inScript := 0, 0
	for _, l := range lines {
		switch {
		case l.args[0] == "zscan":
			scans++
		case l.client == "lua" && l.args[0] == "get":
			inScript++
		}
	}
	if scans == 0 || inScript > 1000 {
		t.Errorf("%d ZSCAN pages, %d records read inside scripts; want pages and at most 1,000", scans, inScript)
	}
}

// A paged read that started before writes replays the log entries logged
// since: its state is the state at the new head. When the log lost some
// of them (trimmed), it reads atomically instead.
func TestHashPagedReplay(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	rdb := srv.Client()
	defer rdb.Close()
	d := openDriver(t, "redis://"+srv.Addr())
	var regs []driver.Registration
	for i := range 1200 {
		reg, err := d.Register(ctx, driver.Instance{ID: fmt.Sprintf("r-%04d", i), Service: "replay", Address: fmt.Sprintf("10.3.%d.%d:80", i/250, i%250)}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		regs = append(regs, reg)
	}
	rev, lastID, err := rredis.Head(ctx, d, "replay")
	if err != nil {
		t.Fatal(err)
	}
	for _, reg := range regs[:10] {
		if err := reg.Deregister(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Register(ctx, driver.Instance{ID: "late", Service: "replay", Address: "10.4.0.1:80"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	mon := startMonitor(t, srv.Addr())
	// atomic reports whether the read fell back to one atomic script.
	atomic := func(from int) bool {
		lines, _ := mon.since(from)
		return slices.ContainsFunc(lines, func(l monitorLine) bool {
			return l.isScript(rredis.SnapshotScriptSHA) && l.args[len(l.args)-1] == "-1"
		})
	}
	check := func(what string, wantAtomic bool) {
		t.Helper()
		_, from := mon.since(0)
		s, err := rredis.PagedSnapshot(ctx, d, "replay", rev, lastID)
		// MONITOR's lines are in order: once a marker shows, the read's have.
		rdb.Echo(ctx, "mark-"+what)
		mon.waitLines(t, from, 1, 5*time.Second, "marker", func(l monitorLine) bool { return l.args[0] == "echo" && l.args[1] == "mark-"+what })
		if got := atomic(from); got != wantAtomic {
			t.Errorf("%s: read atomically: %v, want %v", what, got, wantAtomic)
		}
		want, _ := d.List(ctx, "replay")
		if err != nil || len(s.Instances) != 1191 || s.Revision != want.Revision {
			t.Fatalf("%s: %d instances at revision %d, %v; want 1191 at %d", what, len(s.Instances), s.Revision, err, want.Revision)
		}
		has := func(id string) bool {
			return slices.ContainsFunc(s.Instances, func(in driver.Instance) bool { return in.ID == id })
		}
		if !has("late") {
			t.Fatalf("%s: the late registration is missing", what)
		}
		if has("r-0003") {
			t.Fatalf("%s: a deregistered instance is listed", what)
		}
	}
	check("replayed", false)
	if err := rdb.XTrimMaxLen(ctx, "roster:{replay}:log", 1).Err(); err != nil {
		t.Fatal(err)
	}
	check("trimmed log", true)
}
