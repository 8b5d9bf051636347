package nats_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	rnats "github.com/roster-go/roster/backends/nats"
	"github.com/roster-go/roster/internal/servers/natstest"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

func newDriver(t *testing.T, raw string) *rnats.Driver {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	o, err := rnats.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	d, err := rnats.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func inst(service, id string) driver.Instance {
	return driver.Instance{Service: service, ID: id, Address: "127.0.0.1:20001", Weight: 100}
}

func ids(s driver.Snapshot) []string {
	var out []string
	for _, in := range s.Instances {
		out = append(out, in.ID)
	}
	slices.Sort(out)
	return out
}

// eventually polls cond every 100ms until it holds or within passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(within); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, within)
		}
	}
}

func kvOf(t *testing.T, srv *natstest.Server, bucket string) jetstream.KeyValue {
	t.Helper()
	nc, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// An ID with dots round-trips through its key, under a service with dots
// that another service's keys never match.
func TestKeysWithDots(t *testing.T) {
	srv := natstest.Start(t)
	d := newDriver(t, srv.URL("bucket=dots"))
	ctx := t.Context()
	for _, in := range []driver.Instance{inst("api.v1", "a-10.0.0.1-80"), inst("api", "v1"), inst("api", "b.c")} {
		if _, err := d.Register(ctx, in, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	for svc, want := range map[string][]string{"api.v1": {"a-10.0.0.1-80"}, "api": {"b.c", "v1"}} {
		s, err := d.List(ctx, svc)
		if err != nil || !slices.Equal(ids(s), want) || s.Revision == 0 {
			t.Errorf("List(%s) = %v rev %d, %v; want %v", svc, ids(s), s.Revision, err, want)
		}
	}
	names, err := d.Services(ctx)
	slices.Sort(names)
	if err != nil || !slices.Equal(names, []string{"api", "api.v1"}) {
		t.Errorf("Services = %v, %v", names, err)
	}
}

// A key expires after its TTL without heartbeats; a heartbeat then finds
// it gone (ErrNotFound), and one in time keeps it.
func TestTTLAndHeartbeat(t *testing.T) {
	srv := natstest.Start(t)
	d := newDriver(t, srv.URL())
	ctx := t.Context()
	kept, err := d.Register(ctx, inst("ttl", "kept"), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lost, err := d.Register(ctx, inst("ttl", "lost"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	stopBeat := make(chan struct{})
	beat := make(chan error, 1)
	go func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopBeat:
				beat <- nil
				return
			case <-tick.C:
				if err := kept.Heartbeat(ctx); err != nil {
					beat <- err
					return
				}
			}
		}
	}()
	eventually(t, 5*time.Second, "expiry of the key without heartbeats", func() bool {
		s, err := d.List(ctx, "ttl")
		return err == nil && slices.Equal(ids(s), []string{"kept"})
	})
	close(stopBeat)
	if err := <-beat; err != nil {
		t.Fatalf("heartbeat of a live key: %v", err)
	}
	if err := lost.Heartbeat(ctx); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("heartbeat of an expired key = %v, want ErrNotFound", err)
	}
}

// A key purged by another client, or wiped with its bucket, is
// ErrNotFound to the heartbeat; Register makes the bucket again.
func TestGoneBehindOurBack(t *testing.T) {
	srv := natstest.Start(t)
	d := newDriver(t, srv.URL("bucket=gone"))
	ctx := t.Context()
	reg, err := d.Register(ctx, inst("gone", "a"), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := kvOf(t, srv, "gone").Purge(ctx, rnats.Key("gone", "a")); err != nil {
		t.Fatal(err)
	}
	if err := reg.Heartbeat(ctx); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("heartbeat after an external purge = %v, want ErrNotFound", err)
	}
	if reg, err = d.Register(ctx, inst("gone", "a"), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := srv.Wipe(ctx); err != nil {
		t.Fatal(err)
	}
	if s, err := d.List(ctx, "gone"); err != nil || len(s.Instances) != 0 {
		t.Errorf("List after a wipe = %v, %v; want empty", ids(s), err)
	}
	if err := reg.Heartbeat(ctx); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("heartbeat after a wipe = %v, want ErrNotFound", err)
	}
	if _, err := d.Register(ctx, inst("gone", "a"), 30*time.Second); err != nil {
		t.Fatalf("register after a wipe: %v", err)
	}
	if s, err := d.List(ctx, "gone"); err != nil || !slices.Equal(ids(s), []string{"a"}) {
		t.Errorf("List after registering again = %v, %v", ids(s), err)
	}
}

// What another writer stored is read with DecodeStored: a value that is
// no instance is not served.
func TestForeignValues(t *testing.T) {
	srv := natstest.Start(t)
	d := newDriver(t, srv.URL())
	ctx := t.Context()
	if _, err := d.Register(ctx, inst("mixed", "good"), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	kv := kvOf(t, srv, rnats.DefaultBucket)
	if _, err := kv.Put(ctx, "mixed.bad", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	s, err := d.List(ctx, "mixed")
	if err != nil || !slices.Equal(ids(s), []string{"good"}) {
		t.Errorf("List = %v, %v; want the good instance only", ids(s), err)
	}
}

// A bucket made without per-key TTLs is refused as ErrInvalid.
func TestBucketWithoutTTL(t *testing.T) {
	srv := natstest.Start(t)
	nc, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "plain"}); err != nil {
		t.Fatal(err)
	}
	r, err := registry.Open(t.Context(), srv.URL("bucket=plain"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Register(t.Context(), registry.Instance{Service: "plain", Address: "127.0.0.1:20001"})
	if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "per-key TTL") {
		t.Errorf("Register = %v, want ErrInvalid naming the per-key TTL", err)
	}
}

// A refused login is ErrInvalid at Open, and its error shows no secret.
func TestRefusedLogin(t *testing.T) {
	for name, cfg := range map[string]natstest.Config{
		"token":    {Token: "Hunter2-right"},
		"password": {User: "alice", Password: "Hunter2-right"},
	} {
		t.Run(name, func(t *testing.T) {
			srv := natstest.StartConfig(t, cfg)
			r, err := registry.Open(t.Context(), srv.URL())
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if _, err := r.Register(t.Context(), registry.Instance{Service: "auth", Address: "127.0.0.1:20001"}); err != nil {
				t.Fatalf("the right login: %v", err)
			}
			bad := strings.ReplaceAll(srv.URL(), "Hunter2-right", "Hunter2-wrong")
			start := time.Now()
			_, err = registry.Open(t.Context(), bad)
			if !errors.Is(err, registry.ErrInvalid) || strings.Contains(err.Error(), "Hunter2") {
				t.Errorf("Open with a wrong login = %v, want ErrInvalid without the secret", err)
			}
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("the refusal took %v", took)
			}
		})
	}
}

// A stream ends when the connection drops: it cannot know what it missed.
func TestWatchEndsAtRestart(t *testing.T) {
	srv := natstest.Start(t)
	d := newDriver(t, srv.URL())
	ctx := t.Context()
	if _, err := d.Register(ctx, inst("restart", "a"), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	st, err := d.Watch(ctx, "restart")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if s, err := st.Next(ctx); err != nil || !slices.Equal(ids(s), []string{"a"}) {
		t.Fatalf("first Next = %v, %v", ids(s), err)
	}
	if err := srv.Restart(ctx, false); err != nil {
		t.Fatal(err)
	}
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := st.Next(nctx); err == nil || nctx.Err() != nil {
		t.Errorf("Next after a restart = %v, want the stream's error", err)
	}
}

// A call made right after the server restarted waits for the client to
// reconnect, within the request timeout, as a client that dials per call
// would; before, it failed at once while the client reconnected (seen in
// the conformance check RestartKeepingData).
func TestCallRightAfterRestartWaitsForTheConnection(t *testing.T) {
	srv := natstest.Start(t)
	d := newDriver(t, srv.URL())
	ctx := t.Context()
	for i := range 5 {
		if err := srv.Restart(ctx, true); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Register(ctx, inst("restarted", fmt.Sprint("a", i)), 30*time.Second); err != nil {
			t.Fatalf("Register right after restart %d: %v", i+1, err)
		}
	}
}

// An unreachable server is no error at Open; calls fail within the
// request timeout with ErrUnavailable, naming each layer once.
func TestUnreachable(t *testing.T) {
	r, err := registry.Open(t.Context(), "nats://127.0.0.1:1?request_timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	start := time.Now()
	_, err = r.Register(t.Context(), registry.Instance{Service: "down", Address: "127.0.0.1:20001"})
	if !errors.Is(err, registry.ErrUnavailable) || strings.Count(err.Error(), "registry:") != 1 ||
		!strings.Contains(err.Error(), "nats 127.0.0.1:1: register down/") {
		t.Errorf("Register = %v, want ErrUnavailable naming the server and the call", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Register took %v", took)
	}
}
