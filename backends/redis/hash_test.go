package redis_test

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	rredis "github.com/roster-go/roster/backends/redis"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

func openDriver(t *testing.T, rawURL string) *rredis.Driver {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	d, err := rredis.OpenURL(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// A log trimmed past a watcher's position shows up as a revision gap: the
// watcher relists and loses nothing.
func TestHashTrimmedLogRelists(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	d := openDriver(t, "redis://"+srv.Addr())
	st, err := d.Watch(ctx, "trim")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if s, err := st.Next(ctx); err != nil || len(s.Instances) != 0 {
		t.Fatalf("first Next = %v, %v", s.Instances, err)
	}
	// Five changes while the watcher is not reading, then trim the log to
	// the last entry: four are gone for good.
	for i := range 5 {
		in := registry.Instance{ID: "i" + string(rune('0'+i)), Service: "trim", Address: "127.0.0.1:1", Weight: 1}
		if _, err := d.Register(ctx, in, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	rdb := srv.Client()
	defer rdb.Close()
	if err := rdb.XTrimMaxLen(ctx, "roster:{trim}:log", 1).Err(); err != nil {
		t.Fatal(err)
	}
	nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// The stream may have read some entries before the trim, and then
	// returns that state first: what matters is that it reaches all five.
	var s registry.Snapshot
	for len(s.Instances) != 5 {
		if s, err = st.Next(nctx); err != nil {
			t.Fatalf("after the trim, Next = %v, %v; want all 5 instances", s.Instances, err)
		}
	}
	if s.Revision != 5 {
		t.Errorf("revision %d, want 5", s.Revision)
	}
}

// A crashed instance reaches a watcher at its deadline, not at the next
// full sweep interval: the sweep is scheduled by the earliest deadline.
func TestHashCrashReachesWatcherNearTTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	r := open(t, "redis://"+srv.Addr()+"?sweep=5s")
	obs := open(t, "redis://"+srv.Addr()+"?sweep=5s")
	w, err := obs.Watch(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Next(ctx); err != nil {
		t.Fatal(err)
	}
	const ttl = 500 * time.Millisecond
	l, err := r.Register(ctx, registry.Instance{Service: "crash", Address: "127.0.0.1:1"}, registry.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if s, err := w.Next(ctx); err != nil || len(s.Instances) != 1 {
		t.Fatalf("registration: %v, %v", s.Instances, err)
	}
	l.Abandon()
	crashed := time.Now()
	nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if s, err := w.Next(nctx); err != nil || len(s.Instances) != 0 {
		t.Fatalf("crash: %v, %v", s.Instances, err)
	}
	// The sweep interval is 5s; the removal must come near the TTL. 1s of
	// slack absorbs a loaded CI machine.
	if el := time.Since(crashed); el > ttl+time.Second {
		t.Fatalf("crash reached the watcher after %v; want about the TTL %v, not the 5s sweep interval", el, ttl)
	}
}

// A record deleted by hand (DEL of its key only) is written again by its
// owner within a heartbeat or two.
func TestHashRawDeleteHealed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	r := open(t, "redis://"+srv.Addr())
	l, err := r.Register(ctx, registry.Instance{Service: "raw", Address: "127.0.0.1:1"}, registry.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rdb := srv.Client()
	defer rdb.Close()
	key := "roster:{raw}:i:" + l.Instance().ID
	if n := rdb.Del(ctx, key).Val(); n != 1 {
		t.Fatalf("DEL %s = %d", key, n)
	}
	waitFor(t, 3*time.Second, "record written again", func() bool { return rdb.Exists(ctx, key).Val() == 1 })
	s, err := r.Lookup(ctx, "raw")
	if err != nil || len(s.Instances) != 1 {
		t.Fatalf("Lookup after healing = %v, %v", s.Instances, err)
	}
}

// Deadlines are the server's clock plus the TTL, whatever the client's
// clock says: the index score matches the server's TIME, not time.Now.
func TestHashDeadlineFromServerClock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	d := openDriver(t, "redis://"+srv.Addr())
	in := registry.Instance{ID: "clock", Service: "clock", Address: "127.0.0.1:1", Weight: 1}
	if _, err := d.Register(ctx, in, time.Hour); err != nil {
		t.Fatal(err)
	}
	rdb := srv.Client()
	defer rdb.Close()
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	score, err := rdb.ZScore(ctx, "roster:{clock}:idx", "clock").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := now.Add(time.Hour).UnixMilli()
	if diff := int64(score) - want; diff > 0 || diff < -2000 {
		t.Fatalf("deadline %d is %dms from server TIME + TTL (%d)", int64(score), diff, want)
	}
	pttl := rdb.PTTL(ctx, "roster:{clock}:i:clock").Val()
	if pttl <= time.Hour-2*time.Second || pttl > time.Hour {
		t.Fatalf("record PTTL %v, want about 1h", pttl)
	}
}

// The registrations of one service in one process share the refresh of
// the services index: its entry is rewritten once per TTL/2 in all, not
// once per TTL/2 for each registration, and Services keeps listing the
// service.
func TestHashServicesIndexSharedRefresh(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	const (
		n   = 20
		ttl = time.Second // heartbeats every ~333ms
	)
	r := open(t, "redis://"+srv.Addr())
	mon := startMonitor(t, srv.Addr())
	for i := range n {
		if _, err := r.Register(ctx, registry.Instance{Service: "shared", Address: fmt.Sprintf("10.0.0.%d:80", i+1)}, registry.WithTTL(ttl)); err != nil {
			t.Fatal(err)
		}
	}
	_, from := mon.since(0)
	const window = 3 * time.Second
	time.Sleep(window)
	lines, _ := mon.since(from)
	writes, beats := 0, 0
	for _, l := range lines {
		switch {
		case l.isScript(rredis.ServicesScriptSHA):
			writes++
		case l.args[0] == "evalsha":
			beats++
		}
	}
	t.Logf("%d heartbeat scripts, %d services index writes in %v", beats, writes, window)
	// Per registration it would be n per TTL/2: 120 here. Shared, one per
	// TTL/2 and heartbeat round: about 6, 12 with scheduling jitter.
	if max := 2 * int(window/(ttl/2)); writes > max || writes == 0 {
		t.Errorf("%d services index writes in %v, want 1 to %d", writes, window, max)
	}
	if beats < n*int(window/ttl) {
		t.Errorf("%d heartbeats in %v for %d leases of TTL %v: the leases did not run", beats, window, n, ttl)
	}
	if svcs, err := r.Services(ctx); err != nil || !slices.Contains(svcs, "shared") {
		t.Fatalf("Services = %v, %v; want it to list shared", svcs, err)
	}
}

// A quiet watch checks the revision counter (one MGET for all the quiet
// watches of a shared read) instead of relisting; a change that bypassed
// the change log moves the counter, and the check relists and delivers it
// within quiet.
func TestHashQuietCheck(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	rdb := srv.Client()
	defer rdb.Close()
	const quiet = 300 * time.Millisecond
	r := open(t, "redis://"+srv.Addr())
	obs := open(t, fmt.Sprintf("redis://%s?quiet=%v", srv.Addr(), quiet))
	if _, err := r.Register(ctx, registry.Instance{Service: "quiet", Address: "10.0.0.1:80"}, registry.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	w, err := obs.Watch(ctx, "quiet")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	nextWith(ctx, t, w, 0, 1)
	mon := startMonitor(t, srv.Addr())
	_, from := mon.since(0)
	gets := mon.waitLines(t, from, 3, 10*quiet+5*time.Second, "quiet checks", func(l monitorLine) bool {
		return l.args[0] == "mget" && slices.ContainsFunc(l.args[1:], func(k string) bool { return strings.HasSuffix(k, "{quiet}:rev") })
	})
	lines, _ := mon.since(from)
	for _, l := range lines {
		if l.isScript(rredis.SnapshotScriptSHA) && l.at.Before(gets[2].at) {
			t.Fatalf("a quiet watch relisted (snapshot at %v) with nothing changed", l.at)
		}
	}
	// A second instance written behind the log's back.
	in := `{"id":"raw","service":"quiet","address":"10.0.0.2:80"}`
	if err := rdb.Set(ctx, "roster:{quiet}:i:raw", in, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.ZAdd(ctx, "roster:{quiet}:idx", goredis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: "raw"})
	rdb.Incr(ctx, "roster:{quiet}:rev")
	wctx, cancel := context.WithTimeout(ctx, 2*quiet+5*time.Second)
	defer cancel()
	nextWith(wctx, t, w, 0, 2)
}
