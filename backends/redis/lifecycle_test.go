package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

// scanKeys lists the keys matching pattern with SCAN (which never returns
// a key whose expiry has passed, reclaimed or not).
func scanKeys(ctx context.Context, t *testing.T, rdb *goredis.Client, pattern string) []string {
	t.Helper()
	var keys []string
	iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// memoryUsage sums MEMORY USAGE over keys (an expired key counts 0).
func memoryUsage(ctx context.Context, rdb *goredis.Client, keys []string) int64 {
	var n int64
	for _, k := range keys {
		n += rdb.MemoryUsage(ctx, k).Val()
	}
	return n
}

// memInfo is INFO memory's used_memory (everything Redis allocated:
// clients, scripts…) and used_memory_dataset (the data).
type memInfo struct{ used, dataset int64 }

func usedMemory(ctx context.Context, t *testing.T, rdb *goredis.Client) memInfo {
	t.Helper()
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	var m memInfo
	for _, line := range strings.Split(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "used_memory":
			m.used = n
		case "used_memory_dataset":
			m.dataset = n
		}
	}
	return m
}

func (m memInfo) since(before memInfo) string {
	return fmt.Sprintf("used_memory %+d bytes, used_memory_dataset %+d bytes", m.used-before.used, m.dataset-before.dataset)
}

// metadata of about 1 KiB, as real instances carry (build, owner, URLs…).
func kibMetadata(marker string) map[string]string {
	md := map[string]string{"marker": marker}
	for i := range 8 {
		md[fmt.Sprintf("k%d", i)] = strings.Repeat(string(rune('a'+i)), 120)
	}
	return md
}

// 200 short-lived services — half drained then deregistered, half crashed,
// some of them watched and swept, the others not — leave no key behind
// once the documented bound has passed: linger after the last removal,
// 2 × linger after the last deadline of an instance that crashed unswept,
// 3 sweep intervals after the last watch for the sweeper key.
func TestHashShortLivedServicesLeaveNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	rdb := srv.Client()
	defer rdb.Close()
	const (
		services = 200
		ttl      = 500 * time.Millisecond
		linger   = 500 * time.Millisecond
		sweep    = 100 * time.Millisecond
	)
	q := fmt.Sprintf("?linger=%v&sweep=%v", linger, sweep)
	r := open(t, "redis://"+srv.Addr()+q)
	obs := open(t, "redis://"+srv.Addr()+q)
	before := usedMemory(ctx, t, rdb)
	var ws []*registry.Watcher
	for i := range services {
		svc := fmt.Sprintf("short-%03d", i)
		if i%10 == 0 {
			w, err := obs.Watch(ctx, svc)
			if err != nil {
				t.Fatal(err)
			}
			ws = append(ws, w)
		}
		l, err := r.Register(ctx, registry.Instance{Service: svc, Address: "10.0.0.1:80", Metadata: kibMetadata(svc)}, registry.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			l.Abandon()
			continue
		}
		if err := l.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Deregister(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ended := time.Now()
	keys := scanKeys(ctx, t, rdb, "*")
	t.Logf("when the last service ended: %d keys, %d bytes (MEMORY USAGE), %s",
		len(keys), memoryUsage(ctx, rdb, keys), usedMemory(ctx, t, rdb).since(before))
	for _, w := range ws {
		_ = w.Close()
	}
	bound := ttl + 2*linger + 3*sweep
	for {
		keys = scanKeys(ctx, t, rdb, "*")
		if len(keys) == 0 {
			break
		}
		if el := time.Since(ended); el > bound+2*time.Second {
			n := min(len(keys), 5)
			t.Fatalf("%v after the last service ended (bound %v): %d keys left, %d bytes (MEMORY USAGE), %s; e.g. %v",
				el, bound, len(keys), memoryUsage(ctx, rdb, keys), usedMemory(ctx, t, rdb).since(before), keys[:n])
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("no key left %v after the last service ended (bound %v); %s",
		time.Since(ended), bound, usedMemory(ctx, t, rdb).since(before))
}

// The keys of a service outlive its last deadline by linger to 2 × linger
// (heartbeats extend them in steps of linger), and its last removal by
// linger exactly; a registration makes them last again.
func TestHashEmptyServiceKeysLinger(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	rdb := srv.Client()
	defer rdb.Close()
	const linger = 3 * time.Second
	d := openDriver(t, "redis://"+srv.Addr()+"?linger="+linger.String())
	in := registry.Instance{ID: "a", Service: "linger", Address: "127.0.0.1:1", Weight: 1}
	reg, err := d.Register(ctx, in, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	expires := func(key string, lo, hi time.Duration) {
		t.Helper()
		if p := rdb.PTTL(ctx, key).Val(); p <= lo || p > hi {
			t.Fatalf("%s: PTTL %v, want in (%v, %v]", key, p, lo, hi)
		}
	}
	live := func() {
		t.Helper()
		for _, k := range []string{"roster:{linger}:idx", "roster:{linger}:rev", "roster:{linger}:log"} {
			expires(k, time.Minute+linger-time.Second, time.Minute+2*linger)
		}
		expires("roster:services", time.Minute+linger-time.Second, time.Minute+linger)
	}
	live()
	if err := reg.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, "roster:{linger}:idx").Val(); n != 0 {
		t.Fatal("the empty index is still there")
	}
	for _, k := range []string{"roster:{linger}:rev", "roster:{linger}:log"} {
		expires(k, 0, linger)
	}
	if _, err := d.Register(ctx, in, time.Minute); err != nil {
		t.Fatal(err)
	}
	live()
}

// A removal's log entry names the instance and nothing more, and the log
// drops the data of an instance that left once linger has passed (at the
// next write: the remaining instance's heartbeat).
func TestHashLogForgetsDepartedInstances(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	rdb := srv.Client()
	defer rdb.Close()
	r := open(t, "redis://"+srv.Addr()+"?linger=300ms")
	const marker = "departed-3f9c"
	gone, err := r.Register(ctx, registry.Instance{Service: "forget", Address: "127.0.0.1:1", Metadata: kibMetadata(marker)}, registry.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Register(ctx, registry.Instance{Service: "forget", Address: "127.0.0.1:2"}, registry.WithTTL(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := gone.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	log := func() []goredis.XMessage {
		t.Helper()
		msgs, err := rdb.XRange(ctx, "roster:{forget}:log", "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		return msgs
	}
	msgs := log()
	del := msgs[len(msgs)-1]
	if len(del.Values) != 3 || del.Values["op"] != "del" || del.Values["id"] != gone.Instance().ID || del.Values["rev"] == nil {
		t.Fatalf("removal entry %v; want exactly rev, op=del and id", del.Values)
	}
	holds := func() int {
		n := 0
		for _, m := range log() {
			for _, v := range m.Values {
				if s, _ := v.(string); strings.Contains(s, marker) {
					n++
				}
			}
		}
		return n
	}
	if holds() == 0 {
		t.Fatal("the registration's log entry does not carry the instance (test broken)")
	}
	start := time.Now()
	for n := holds(); n > 0; n = holds() {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("%v after the deregistration %d log entries still carry the departed instance's data (XLEN %d, MEMORY USAGE %d bytes)",
				time.Since(start), n, rdb.XLen(ctx, "roster:{forget}:log").Val(), rdb.MemoryUsage(ctx, "roster:{forget}:log").Val())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("departed instance's data left the log %v after its deregistration", time.Since(start))
}

// When a service's keys have expired and it comes back, its revision
// starts over and its log is a new stream. A watch still blocked on the
// old log's position gets the new state at once (not at its quiet relist,
// 1m here), and a registry Watcher's revisions keep growing.
func TestHashWatchAcrossKeyExpiry(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	rdb := srv.Client()
	defer rdb.Close()
	q := "?linger=200ms&quiet=1m"
	d := openDriver(t, "redis://"+srv.Addr()+q)
	st, err := d.Watch(ctx, "again")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := open(t, "redis://"+srv.Addr()+q)
	w, err := r.Watch(ctx, "again")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	next := func(want ...string) (uint64, uint64) {
		t.Helper()
		nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		s, err := st.Next(nctx)
		if err != nil || !sameIDs(s, want) {
			t.Fatalf("driver stream: %v, %v; want %v", s.Instances, err, want)
		}
		for {
			ws, err := w.Next(nctx)
			if err != nil {
				t.Fatalf("registry watcher: %v; want %v", err, want)
			}
			if sameIDs(ws, want) {
				return s.Revision, ws.Revision
			}
		}
	}
	next()
	a := registry.Instance{ID: "a", Service: "again", Address: "127.0.0.1:1", Weight: 1}
	reg, err := d.Register(ctx, a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	next("a")
	if err := reg.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	_, before := next()
	waitFor(t, 5*time.Second, "revision and log expired", func() bool {
		return rdb.Exists(ctx, "roster:{again}:rev", "roster:{again}:log").Val() == 0
	})
	b := registry.Instance{ID: "b", Service: "again", Address: "127.0.0.1:2", Weight: 1}
	if _, err := d.Register(ctx, b, time.Minute); err != nil {
		t.Fatal(err)
	}
	drv, after := next("b")
	if drv != 1 {
		t.Errorf("driver revision %d after the keys expired, want 1 (a new counter)", drv)
	}
	if after <= before {
		t.Fatalf("registry watcher's revision went from %d to %d", before, after)
	}
}

func sameIDs(s registry.Snapshot, want []string) bool {
	if len(s.Instances) != len(want) {
		return false
	}
	for i, in := range s.Instances {
		if in.ID != want[i] {
			return false
		}
	}
	return true
}
