package middleware_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// TestPickAndReport: a pick whose call runs elsewhere feeds its reported
// outcome to the quarantine as a call through Do would; hard filters
// hold; Abort counts against no one.
func TestPickAndReport(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c"} {
		e.writer.Register(ctx, registry.Instance{ID: id, Service: "api", Address: "10.0.0.1:80", Version: map[bool]string{true: "v2"}[id == "c"]})
	}
	q := middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: 2, MaxEjectedPercent: 50})
	c := newClient(t, e.reader, middleware.WithQuarantine(q), middleware.WithSelector(selector.WithStrategy(selector.RoundRobin)))
	for s, _ := c.Snapshot("api"); len(s.Instances) < 3; s, _ = c.Snapshot("api") {
		if _, err := c.Pick(ctx, "api", selector.PickOptions{}); err != nil && !errors.Is(err, selector.ErrNoInstances) {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for range 10 { // aborts are not failures
		p, err := c.Pick(ctx, "api", selector.PickOptions{Exclude: func(in *registry.Instance) bool { return in.ID != "a" }})
		if err != nil || p.Instance.ID != "a" {
			t.Fatalf("filtered pick: %v %v", p.Instance.ID, err)
		}
		middleware.Report(ctx, p, middleware.Abort, time.Millisecond)
	}
	for range 2 {
		p, _ := c.Pick(ctx, "api", selector.PickOptions{Exclude: func(in *registry.Instance) bool { return in.ID != "b" }})
		middleware.Report(ctx, p, middleware.Retryable, time.Millisecond)
	}
	if ej := q.Ejected("api"); len(ej) != 1 || ej[0] != "b" {
		t.Fatalf("ejected %v, want [b]", ej)
	}
	for range 20 {
		p, err := c.Pick(ctx, "api", selector.PickOptions{})
		if err != nil || p.Instance.ID == "b" {
			t.Fatalf("pick after ejection: %v %v", p.Instance.ID, err)
		}
		middleware.Report(ctx, p, middleware.Success, time.Millisecond)
	}
	_, err := c.Pick(ctx, "api", selector.PickOptions{Exclude: func(*registry.Instance) bool { return true }})
	if !errors.Is(err, selector.ErrAllExcluded) {
		t.Errorf("pick with everything excluded: %v", err)
	}
}

// TestDebugHandler: the JSON lists each followed service with its
// instances and quarantine; the page carries no instance data itself (its
// script fetches the JSON and renders it with textContent) and forbids
// inline scripts.
func TestDebugHandler(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.writer.Register(ctx, registry.Instance{ID: "a", Service: "api", Address: "10.0.0.1:80", Metadata: map[string]string{"x": "<script>"}})
	c := newClient(t, e.reader)
	if err := c.Do(ctx, "api", func(context.Context, registry.Instance) error { return nil }); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.DebugHandler())
	defer srv.Close()
	var st middleware.ClientState
	resp, err := http.Get(srv.URL + "/?format=json")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if len(st.Services) != 1 || st.Services[0].Service != "api" || len(st.Services[0].Instances) != 1 ||
		st.Services[0].Instances[0].Metadata["x"] != "<script>" || st.Services[0].Stale {
		t.Fatalf("state: %+v", st)
	}
	resp, err = http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), `data-state="?format=json"`) || strings.Contains(string(page), "10.0.0.1") ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Errorf("page: %s %v", page, resp.Header)
	}
}
