package rosterhttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// startVersion starts an instance of version v.
func startVersion(t *testing.T, reg *registry.Registry, name, v string) *instance {
	t.Helper()
	in := &instance{name: name}
	in.srv = httptest.NewServer(in)
	t.Cleanup(in.srv.Close)
	l, err := reg.Register(context.Background(), registry.Instance{Service: "users", Address: in.srv.Listener.Addr().String(), Version: v})
	if err != nil {
		t.Fatal(err)
	}
	in.lease = l
	return in
}

// TestHeaderRouting: X-Roster-Version pins the request to a version,
// X-Roster-Hash-Key keeps a key on one instance, and a version that is not
// deployed fails rather than going elsewhere.
func TestHeaderRouting(t *testing.T) {
	reg := openMem(t)
	startVersion(t, reg, "v1a", "1.0")
	startVersion(t, reg, "v1b", "1.0")
	startVersion(t, reg, "v2", "2.0")
	hc, _ := newHTTPClient(t, reg, middleware.WithSelector(selector.WithStrategy(selector.ConsistentHash)))
	do := func(h map[string]string) (int, string) {
		req, _ := http.NewRequest("GET", "http://users/x", nil)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b := make([]byte, 16)
		n, _ := resp.Body.Read(b)
		return resp.StatusCode, string(b[:n])
	}
	for range 20 {
		if code, body := do(map[string]string{"X-Roster-Version": "2.0"}); code != 200 || body != "v2" {
			t.Fatalf("X-Roster-Version 2.0: %d %q, want v2", code, body)
		}
		if _, body := do(map[string]string{"X-Roster-Version": "1.0"}); body != "v1a" && body != "v1b" {
			t.Fatalf("X-Roster-Version 1.0: %q", body)
		}
	}
	bodies := map[string]bool{}
	for range 20 {
		_, body := do(map[string]string{"X-Roster-Hash-Key": "user-7"})
		bodies[body] = true
	}
	if len(bodies) != 1 {
		t.Errorf("X-Roster-Hash-Key user-7 went to %v, want one instance", bodies)
	}
	if code, body := do(map[string]string{"X-Roster-Version": "3.0"}); code != 0 {
		t.Errorf("X-Roster-Version 3.0 (not deployed): %d %q, want an error", code, body)
	}
}
