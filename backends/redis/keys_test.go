package redis_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

func open(t *testing.T, rawURL string) *registry.Registry {
	t.Helper()
	r, err := registry.Open(t.Context(), rawURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// waitFor polls cond every 10ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// articleRegister is the article's registration code, verbatim but for
// the context and client.
func articleRegister(ctx context.Context, rdb *goredis.Client, service, addr string) error {
	info := map[string]string{
		"addr":     addr,
		"version":  "1.2.0",
		"weight":   "100",
		"metadata": "zone=hz-1",
	}
	data, _ := json.Marshal(info)
	return rdb.Set(ctx, "service:"+service+":"+addr, data, 10*time.Second).Err()
}

// Records written by scripts following the article are discovered; ours
// are readable by them; each side's deregistration (DEL) and expiry is
// seen by the other.
func TestKeysArticleCompatibility(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	defer rdb.Close()
	ctx := t.Context()
	r := open(t, "redis://"+srv.Addr()+"?layout=keys&poll=50ms&notify=off")

	// Theirs → ours.
	if err := articleRegister(ctx, rdb, "order", "10.0.0.1:8080"); err != nil {
		t.Fatal(err)
	}
	s, err := r.Lookup(ctx, "order")
	if err != nil || len(s.Instances) != 1 {
		t.Fatalf("Lookup of an article-written record = %v, %v", s.Instances, err)
	}
	got := s.Instances[0]
	want := registry.Instance{ID: "order-10.0.0.1-8080", Service: "order", Address: "10.0.0.1:8080", Version: "1.2.0", Zone: "hz-1", Weight: 100}
	if !got.Equal(want) {
		t.Fatalf("article record read as %+v, want %+v", got, want)
	}

	// Ours → theirs: the article's reader is GET + json into strings.
	l, err := r.Register(ctx, registry.Instance{Service: "order", Address: "10.0.0.2:8080", Version: "2.0", Zone: "hz-2",
		Weight: 50, Tags: []string{"canary", "a,b|c"}, Metadata: map[string]string{"k": "v=1,2", "zone": "user's"}}, registry.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	key := "service:order:10.0.0.2:8080"
	raw, err := rdb.Get(ctx, key).Result()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	var info map[string]string
	if err := json.Unmarshal([]byte(raw), &info); err != nil {
		t.Fatalf("our value %s does not decode as the article's map of strings: %v", raw, err)
	}
	if info["addr"] != "10.0.0.2:8080" || info["version"] != "2.0" || info["weight"] != "50" || !strings.HasPrefix(info["metadata"], "zone=hz-2,") {
		t.Fatalf("our value %s lacks the article's fields", raw)
	}
	if len(info) != 4 {
		t.Fatalf("our value %s has fields beyond the article's four", raw)
	}
	if ttl := rdb.TTL(ctx, key).Val(); ttl <= 0 || ttl > 3*time.Second {
		t.Fatalf("TTL of %s = %v, want (0, 3s]", key, ttl)
	}
	// The article lists with SCAN MATCH service:order:* and sees both.
	keys, _, err := rdb.Scan(ctx, 0, "service:order:*", 100).Result()
	slices.Sort(keys)
	if err != nil || !slices.Equal(keys, []string{"service:order:10.0.0.1:8080", key}) {
		t.Fatalf("SCAN service:order:* = %v, %v", keys, err)
	}
	// And we read our own record back whole.
	s, _ = r.Lookup(ctx, "order")
	if in, ok := s.Find(l.Instance().ID); !ok || !in.Equal(l.Instance()) {
		t.Fatalf("our record reads back as %+v, want %+v", in, l.Instance())
	}

	// Their DEL (the article's graceful shutdown) reaches our watcher.
	w, err := r.Watch(ctx, "order")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if s, err := w.Next(ctx); err != nil || len(s.Instances) != 2 {
		t.Fatalf("first Next = %v, %v", s.Instances, err)
	}
	rdb.Del(ctx, "service:order:10.0.0.1:8080")
	if s, err := w.Next(ctx); err != nil || len(s.Instances) != 1 || s.Instances[0].ID != l.Instance().ID {
		t.Fatalf("after their DEL, Next = %v, %v", s.Instances, err)
	}
	// Our heartbeat is the article's EXPIRE: the key's TTL is refreshed.
	waitFor(t, 3*time.Second, "heartbeat refreshes the TTL", func() bool {
		return rdb.TTL(ctx, key).Val() > 2*time.Second && rdb.TTL(ctx, key).Val() <= 3*time.Second && l.State() == registry.LeaseHealthy
	})
	// Our deregistration is their DEL.
	if err := l.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("after Deregister %s still exists", key)
	}
}

// Two live registrations of one address: the second goes to <key>:<id>.
func TestKeysSameAddressTwoKeys(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	defer rdb.Close()
	ctx := t.Context()
	r := open(t, "redis://"+srv.Addr()+"?layout=keys&notify=off")
	in := registry.Instance{Service: "web", Address: "127.0.0.1:8080"}
	a, err := r.Register(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Register(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	keys := rdb.Keys(ctx, "service:web:*").Val()
	slices.Sort(keys)
	want := []string{"service:web:127.0.0.1:8080", "service:web:127.0.0.1:8080:" + b.Instance().ID}
	if !slices.Equal(keys, want) {
		t.Fatalf("keys = %v, want %v", keys, want)
	}
	s, _ := r.Lookup(ctx, "web")
	if len(s.Instances) != 2 {
		t.Fatalf("Lookup = %v, want both", s.Instances)
	}
	// The first leaves; the second keeps its own key and stays listed.
	_ = a.Deregister(ctx)
	s, _ = r.Lookup(ctx, "web")
	if len(s.Instances) != 1 || s.Instances[0].ID != b.Instance().ID {
		t.Fatalf("after the first left, Lookup = %v", s.Instances)
	}
}

// With keyspace notifications on, a change reaches a watcher long before
// the poll interval.
func TestKeysNotificationHints(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--notify-keyspace-events", "Eg$x")
	ctx := t.Context()
	r := open(t, "redis://"+srv.Addr()+"?layout=keys&poll=1h")
	obs := open(t, "redis://"+srv.Addr()+"?layout=keys&poll=1h")
	w, err := obs.Watch(ctx, "hint")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Next(ctx); err != nil {
		t.Fatal(err)
	}
	nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := r.Register(ctx, registry.Instance{Service: "hint", Address: "127.0.0.1:1"}, registry.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if s, err := w.Next(nctx); err != nil || len(s.Instances) != 1 {
		t.Fatalf("registration via a set event: %v, %v", s.Instances, err)
	}
	l.Abandon() // expires; the expired event triggers the relist
	if s, err := w.Next(nctx); err != nil || len(s.Instances) != 0 {
		t.Fatalf("expiry via an expired event: %v, %v", s.Instances, err)
	}
}

// Notes tell "roster conformance" when layout keys runs on polling alone.
func TestKeysNotes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t) // notify-keyspace-events "" by default
	notes := func(url string) []string {
		var drv driver.Driver
		if r := open(t, url); !r.As(&drv) {
			t.Fatal("As(*driver.Driver) = false")
		}
		return drv.(interface {
			Notes(context.Context) []string
		}).Notes(t.Context())
	}
	base := "redis://" + srv.Addr()
	if n := notes(base); n != nil {
		t.Errorf("layout hash: notes %q", n)
	}
	if n := notes(base + "?layout=keys"); len(n) != 1 || !strings.Contains(n[0], "keyspace notifications disabled") || !strings.Contains(n[0], "within 1s") {
		t.Errorf("layout keys, notifications disabled: notes %q", n)
	}
	if n := notes(base + "?layout=keys&notify=off&poll=250ms"); len(n) != 1 || !strings.Contains(n[0], "notify=off") || !strings.Contains(n[0], "within 250ms") {
		t.Errorf("layout keys, notify=off: notes %q", n)
	}
	c := srv.Client()
	defer c.Close()
	if err := c.ConfigSet(t.Context(), "notify-keyspace-events", "Eg$x").Err(); err != nil {
		t.Fatal(err)
	}
	if n := notes(base + "?layout=keys"); n != nil {
		t.Errorf("layout keys, notifications enabled: notes %q", n)
	}
}

// Named endpoints are a fifth string field beside the article's four, in
// a form a script reads with one split: the article's readers see the
// primary in addr, as before.
func TestKeysEndpointsField(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	defer rdb.Close()
	ctx := t.Context()
	r := open(t, "redis://"+srv.Addr()+"?layout=keys&poll=50ms&notify=off")
	l, err := r.Register(ctx, registry.Instance{Service: "order", Address: "10.0.0.2:8080", Endpoints: []registry.Endpoint{
		{Name: "http", Address: "10.0.0.2:8080", Protocol: "http"}, {Name: "grpc", Address: "10.0.0.2:9090", Protocol: "grpc"},
		{Name: "metrics", Address: "10.0.0.2:9100"}}}, registry.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := rdb.Get(ctx, "service:order:10.0.0.2:8080").Result()
	if err != nil {
		t.Fatal(err)
	}
	var info map[string]string
	if err := json.Unmarshal([]byte(raw), &info); err != nil {
		t.Fatalf("our value %s does not decode as a map of strings: %v", raw, err)
	}
	if want := "http=10.0.0.2:8080/http,grpc=10.0.0.2:9090/grpc,metrics=10.0.0.2:9100"; info["endpoints"] != want || info["addr"] != "10.0.0.2:8080" {
		t.Fatalf("our value %s: endpoints %q, want %q beside addr", raw, info["endpoints"], want)
	}
	s, err := r.Lookup(ctx, "order")
	if in, ok := s.Find(l.Instance().ID); err != nil || !ok || !in.Equal(l.Instance()) {
		t.Fatalf("our record reads back as %+v (err %v), want %+v", in, err, l.Instance())
	}
}
