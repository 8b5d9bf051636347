package redis_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	rredis "github.com/roster-go/roster/backends/redis"
	"github.com/roster-go/roster/backends/redis/redistest"
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
	s, err := st.Next(nctx)
	if err != nil || len(s.Instances) != 5 {
		t.Fatalf("after the trim, Next = %v, %v; want all 5 instances", s.Instances, err)
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
