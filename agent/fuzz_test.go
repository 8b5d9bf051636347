package agent_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/agent"
	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
)

// FuzzAPI: any body and query on any endpoint gets a well-formed answer —
// never a panic, never a 500, an error body that is JSON with a code.
func FuzzAPI(f *testing.F) {
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	reg.Register(f.Context(), registry.Instance{ID: "a", Service: "api", Address: "10.0.0.1:80", Version: "v1"})
	a, err := agent.New(agent.Config{Registry: reg, MaxServices: 8})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { a.Close(); reg.Close() })
	for _, seed := range []struct{ path, body string }{
		{"/v1/pick", `{"service":"api","version":"v1","tags":["x"],"key":"k","strategy":"maglev"}`},
		{"/v1/report", `{"token":"x-1","outcome":"failure","latency_ms":1e308}`},
		{"/v1/register", `{"service":"web","address":"127.0.0.1:8080","ttl":"1s","check_url":"http://127.0.0.1:1/"}`},
		{"/v1/services/api?index=18446744073709551615&wait=1ns", ""},
		{"/v1/pick", `{"service":"api"}{"service":"api"}`},
	} {
		f.Add(seed.path, seed.body)
	}
	f.Fuzz(func(t *testing.T, path, body string) {
		if !strings.HasPrefix(path, "/v1/") || strings.Contains(path, "register") && !strings.HasPrefix(path, "/v1/register") {
			return // the dashboard and metrics take no input; registrations only through their endpoint
		}
		for _, method := range []string{"GET", "POST"} {
			// A long poll may wait minutes: it answers the unchanged state
			// when its context ends, which this bounds.
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, method, "http://agent"+path, strings.NewReader(body))
			if err != nil || req.URL.Path == "/v1/events" {
				return // not a request a client can send; the event stream never ends
			}
			w := httptest.NewRecorder()
			a.ServeHTTP(w, req)
			if w.Code >= 500 && w.Code != http.StatusServiceUnavailable {
				t.Fatalf("%s %s %q: %d %s", method, path, body, w.Code, w.Body)
			}
			if w.Code >= 400 && w.Header().Get("Content-Type") == "application/json" {
				var e agent.Error
				if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Code == "" {
					t.Fatalf("%s %s %q: error body %q", method, path, body, w.Body)
				}
			}
		}
	})
}
