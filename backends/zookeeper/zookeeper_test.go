package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/backends/zookeeper"
	"github.com/roster-go/roster/internal/loopback"
	"github.com/roster-go/roster/internal/servers/zktest"
	"github.com/roster-go/roster/registry"
)

// open opens a registry on url, closed when the test ends.
func open(t *testing.T, url string) *registry.Registry {
	t.Helper()
	r, err := registry.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// eventually polls cond every 20ms for up to d.
func eventually(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %s", what, d, detail)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func count(r *registry.Registry, svc string) (bool, string, int) {
	s, err := r.Lookup(context.Background(), svc)
	if err != nil {
		return false, err.Error(), -1
	}
	return true, fmt.Sprint(len(s.Instances), " instances"), len(s.Instances)
}

// TestProcessCrashExpiresWithSession: a process that vanishes (its
// connection cut, so that neither its pings nor its watchdog reach the
// server) loses its instances when the server expires its session, a TTL
// later — the crash the ephemeral znodes are for.
func TestProcessCrashExpiresWithSession(t *testing.T) {
	p, err := loopback.NewProxy(shared.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() }) // after the registries close, through it
	owner, obs := open(t, "zk://"+p.Addr()+"/crash"), open(t, shared.URL("/crash", ""))
	const ttl = 3 * time.Second
	l, err := owner.Register(t.Context(), registry.Instance{Service: "crash", Address: "10.0.0.1:80"}, registry.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "registered", func() (bool, string) { ok, s, n := count(obs, "crash"); return ok && n == 1, s })
	_ = p.SetConnected(t.Context(), false)
	cut := time.Now()
	eventually(t, ttl+2*zktest.TickTime+time.Second, "expired with the session", func() (bool, string) {
		ok, s, n := count(obs, "crash")
		return ok && n == 0, s
	})
	if el := time.Since(cut); el < ttl-time.Second {
		t.Fatalf("gone %v after the cut, before the session timeout %v", el, ttl)
	}
	// Back on the network, the lease registers again in a new session.
	_ = p.SetConnected(t.Context(), true)
	eventually(t, 3*ttl, "registered again after the session loss", func() (bool, string) {
		ok, s, n := count(obs, "crash")
		return ok && n == 1 && l.State() == registry.LeaseHealthy, s + " " + l.State().String()
	})
}

// TestEmptyServiceZnodeRemovedAndWatchGoesOn: the server deletes the
// service's container znode after its last instance left; a watcher
// follows the service through its deletion and its return.
func TestEmptyServiceZnodeRemovedAndWatchGoesOn(t *testing.T) {
	r := open(t, shared.URL("/containers", ""))
	w, err := r.Watch(t.Context(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	next := func(want int) {
		t.Helper()
		for {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			s, err := w.Next(ctx)
			cancel()
			if err != nil {
				t.Fatalf("want %d instances: %v", want, err)
			}
			if len(s.Instances) == want {
				return
			}
		}
	}
	next(0)
	l, err := r.Register(t.Context(), registry.Instance{Service: "svc", Address: "10.0.0.1:80"})
	if err != nil {
		t.Fatal(err)
	}
	next(1)
	if err := l.Deregister(t.Context()); err != nil {
		t.Fatal(err)
	}
	next(0)
	c, err := zktest.Connect(t.Context(), shared.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	eventually(t, 10*time.Second, "empty container deleted by the server", func() (bool, string) {
		ok, _, err := c.Exists("/containers/svc")
		return err == nil && !ok, fmt.Sprint(ok, err)
	})
	if _, err := r.Register(t.Context(), registry.Instance{Service: "svc", Address: "10.0.0.2:80"}); err != nil {
		t.Fatal(err)
	}
	next(1)
	if svcs, err := r.Services(t.Context()); err != nil || len(svcs) != 1 || svcs[0] != "svc" {
		t.Fatalf("Services = %v, %v", svcs, err)
	}
}

// TestDigestAuth: with credentials, znodes are world-readable and writable
// by their owner only. Another identity discovers them, and its writes in
// the owner's service are refused as invalid (never retried forever),
// with no password in the error.
func TestDigestAuth(t *testing.T) {
	owner := open(t, "zk://alice:s3cret-a@"+shared.Addr()+"/auth")
	other := open(t, "zk://bob:s3cret-b@"+shared.Addr()+"/auth")
	if _, err := owner.Register(t.Context(), registry.Instance{Service: "pay", Address: "10.0.0.1:80"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "readable by another identity", func() (bool, string) {
		ok, s, n := count(other, "pay")
		return ok && n == 1, s
	})
	_, err := other.Register(t.Context(), registry.Instance{Service: "pay", Address: "10.0.0.2:80"})
	if !errors.Is(err, registry.ErrInvalid) {
		t.Fatalf("write by another identity: %v, want ErrInvalid", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error shows a password: %v", err)
	}
}

// TestSessionPerTTL: registrations of one TTL share a session, and each
// TTL has its own; TTLs are rounded up to whole seconds.
func TestSessionPerTTL(t *testing.T) {
	d, err := zookeeper.New(zookeeper.Options{Servers: []string{shared.Addr()}, Root: "/ttls"})
	if err != nil {
		t.Fatal(err)
	}
	r := registry.New(d)
	defer r.Close()
	c, err := zktest.Connect(t.Context(), shared.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	owners := map[int64]int{}
	for i, ttl := range []time.Duration{3 * time.Second, 2500 * time.Millisecond, 5 * time.Second} {
		l, err := r.Register(t.Context(), registry.Instance{Service: "s", Address: fmt.Sprintf("10.0.0.%d:80", i+1)}, registry.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		_, st, err := c.Get("/ttls/s/" + l.Instance().ID)
		if err != nil {
			t.Fatal(err)
		}
		owners[st.EphemeralOwner]++
	}
	if len(owners) != 2 {
		t.Fatalf("3s, 2.5s and 5s TTLs used sessions %v, want 2 (2.5s rounds up to 3s)", owners)
	}
	if lim := d.Limits(); lim.MinTTL != 2*time.Second || lim.TTLGranularity != time.Second {
		t.Fatalf("Limits = %+v", lim)
	}
}
