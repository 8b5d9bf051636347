package rosterhttp_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	_ "github.com/roster-go/roster/backends/memory"
	rosterhttp "github.com/roster-go/roster/contrib/rosterhttp"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type instance struct {
	name   string
	srv    *httptest.Server
	lease  *registry.Lease
	calls  atomic.Int64
	status atomic.Int64 // 0: 200

	mu     sync.Mutex
	bodies []string
	hosts  []string
	paths  []string
}

func (in *instance) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	in.calls.Add(1)
	b, _ := io.ReadAll(r.Body)
	in.mu.Lock()
	in.bodies = append(in.bodies, string(b))
	in.hosts = append(in.hosts, r.Host)
	in.paths = append(in.paths, r.URL.RequestURI())
	in.mu.Unlock()
	if s := in.status.Load(); s != 0 {
		w.WriteHeader(int(s))
		io.WriteString(w, in.name+" failing")
		return
	}
	io.WriteString(w, in.name)
}

func openMem(t *testing.T) *registry.Registry {
	t.Helper()
	reg, err := registry.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return reg
}

func register(t *testing.T, reg *registry.Registry, service, addr string) *registry.Lease {
	t.Helper()
	l, err := reg.Register(context.Background(), registry.Instance{Service: service, Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func start(t *testing.T, reg *registry.Registry, service, name string) *instance {
	t.Helper()
	in := &instance{name: name}
	in.srv = httptest.NewServer(in)
	t.Cleanup(in.srv.Close)
	in.lease = register(t, reg, service, in.srv.Listener.Addr().String())
	return in
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func newHTTPClient(t *testing.T, reg *registry.Registry, opts ...middleware.Option) (*http.Client, *middleware.Client) {
	t.Helper()
	mc, err := middleware.NewClient(reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		mc.Close()
	})
	return &http.Client{Transport: &rosterhttp.Transport{Client: mc, Base: tr}, Timeout: 10 * time.Second}, mc
}

func get(t *testing.T, hc *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestRoutesByServiceName(t *testing.T) {
	reg := openMem(t)
	a, b, c := start(t, reg, "users", "a"), start(t, reg, "users", "b"), start(t, reg, "users", "c")
	hc, _ := newHTTPClient(t, reg, middleware.WithSelector(selector.WithStrategy(selector.RoundRobin)))
	seen := map[string]int{}
	for range 30 {
		code, body := get(t, hc, "http://users/v1/users/42?x=1")
		if code != 200 {
			t.Fatalf("status %d", code)
		}
		seen[body]++
	}
	if seen["a"] != 10 || seen["b"] != 10 || seen["c"] != 10 {
		t.Fatalf("round robin, 30 GETs over 3 instances: %v", seen)
	}
	for _, in := range []*instance{a, b, c} {
		in.mu.Lock()
		if in.paths[0] != "/v1/users/42?x=1" || in.hosts[0] != "users" {
			t.Errorf("%s got path %q host %q; want the request's path and query, Host: users", in.name, in.paths[0], in.hosts[0])
		}
		in.mu.Unlock()
	}
}

func TestRejectsNonServiceURL(t *testing.T) {
	reg := openMem(t)
	hc, _ := newHTTPClient(t, reg)
	for _, u := range []string{"http://users:8080/", "http://Bad_Name/"} {
		_, err := hc.Get(u)
		if !errors.Is(err, rosterhttp.ErrNotService) {
			t.Errorf("GET %s: %v, want ErrNotService", u, err)
		}
	}
}

// TestNilURLIsAnError: a request built by hand without a URL is
// ErrNotService, not a nil-pointer panic in RoundTrip.
func TestNilURLIsAnError(t *testing.T) {
	reg := openMem(t)
	hc, _ := newHTTPClient(t, reg)
	resp, err := hc.Transport.RoundTrip(&http.Request{Method: http.MethodGet, Header: http.Header{}})
	if resp != nil || !errors.Is(err, rosterhttp.ErrNotService) {
		t.Fatalf("RoundTrip of a request without a URL = %v, %v; want ErrNotService", resp, err)
	}
}

func TestGetRetriedOnAnotherInstance(t *testing.T) {
	reg := openMem(t)
	register(t, reg, "users", deadAddr(t)) // a crashed instance, still registered
	good := start(t, reg, "users", "good")
	q := middleware.NewQuarantine(middleware.QuarantineConfig{})
	hc, _ := newHTTPClient(t, reg, middleware.WithSelector(selector.WithStrategy(selector.RoundRobin)), middleware.WithQuarantine(q))
	for range 20 {
		if code, body := get(t, hc, "http://users/"); code != 200 || body != "good" {
			t.Fatalf("%d %q", code, body)
		}
	}
	if good.calls.Load() != 20 {
		t.Fatalf("good served %d of 20", good.calls.Load())
	}
	// The refused attempts were fed back: the dead instance is quarantined.
	if len(q.Ejected("users")) != 1 {
		t.Fatalf("ejected: %v, want the dead instance", q.Ejected("users"))
	}
}

func TestBodiesReplayedOnlyWithGetBody(t *testing.T) {
	reg := openMem(t)
	bad := start(t, reg, "users", "bad")
	good := start(t, reg, "users", "good")
	bad.status.Store(503)
	// Quarantine off: every request meets bad first (round robin from a
	// known state is not guaranteed, so loop until bad was hit).
	hc, _ := newHTTPClient(t, reg,
		middleware.WithSelector(selector.WithStrategy(selector.RoundRobin)),
		middleware.WithQuarantine(middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: 1 << 30})))

	// PUT with a replayable body: retried on good with the full body.
	for bad.calls.Load() < 3 {
		req, _ := http.NewRequest(http.MethodPut, "http://users/item", strings.NewReader("payload"))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "good" {
			t.Fatalf("PUT: %d %q", resp.StatusCode, b)
		}
	}
	good.mu.Lock()
	for _, body := range good.bodies {
		if body != "payload" {
			t.Fatalf("good got body %q on a retry", body)
		}
	}
	good.mu.Unlock()

	// PUT with a one-shot body (no GetBody): sent once; bad's 503 comes
	// back to the caller as it is.
	got503 := false
	for range 10 {
		req, _ := http.NewRequest(http.MethodPut, "http://users/item", io.NopCloser(strings.NewReader("once")))
		n := bad.calls.Load() + good.calls.Load()
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if sent := bad.calls.Load() + good.calls.Load() - n; sent != 1 {
			t.Fatalf("one-shot body sent %d times", sent)
		}
		if resp.StatusCode == 503 {
			got503 = string(b) == "bad failing"
		}
	}
	if !got503 {
		t.Fatal("a one-shot PUT never met bad's 503 in 10 round-robin requests")
	}

	// POST is not idempotent: not retried after a 503 either.
	for range 4 {
		n := bad.calls.Load() + good.calls.Load()
		resp, err := hc.Post("http://users/item", "text/plain", strings.NewReader("p"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if sent := bad.calls.Load() + good.calls.Load() - n; sent != 1 {
			t.Fatalf("POST sent %d times", sent)
		}
	}
}

func TestPostRetriedWhenNeverSent(t *testing.T) {
	reg := openMem(t)
	register(t, reg, "users", deadAddr(t))
	good := start(t, reg, "users", "good")
	hc, _ := newHTTPClient(t, reg,
		middleware.WithSelector(selector.WithStrategy(selector.RoundRobin)),
		middleware.WithQuarantine(middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: 1 << 30})))
	for range 10 {
		resp, err := hc.Post("http://users/item", "text/plain", strings.NewReader("p"))
		if err != nil {
			t.Fatalf("POST whose first attempt was refused: %v", err)
		}
		resp.Body.Close()
	}
	if good.calls.Load() != 10 {
		t.Fatalf("good served %d of 10", good.calls.Load())
	}
}

func TestLastRetryableResponseReturned(t *testing.T) {
	reg := openMem(t)
	a, b := start(t, reg, "users", "a"), start(t, reg, "users", "b")
	a.status.Store(503)
	b.status.Store(503)
	hc, _ := newHTTPClient(t, reg, middleware.WithMiddleware(middleware.Retry(middleware.RetryConfig{MaxAttempts: 2})))
	code, body := get(t, hc, "http://users/")
	if code != 503 || !strings.HasSuffix(body, "failing") {
		t.Fatalf("%d %q, want the last 503 with its body", code, body)
	}
	if n := a.calls.Load() + b.calls.Load(); n != 2 {
		t.Fatalf("%d attempts, want 2", n)
	}
}

func TestNoInstances(t *testing.T) {
	reg := openMem(t)
	hc, _ := newHTTPClient(t, reg)
	_, err := hc.Get("http://nobody/")
	if !errors.Is(err, selector.ErrNoInstances) {
		t.Fatalf("%v, want ErrNoInstances", err)
	}
}
