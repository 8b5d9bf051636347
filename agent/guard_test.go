package agent_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/roster-go/roster/agent"
	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
)

// localRequest is httptest.NewRequest as a program on the host sends it.
func localRequest(method, target string, body io.Reader) *http.Request {
	r := httptest.NewRequest(method, target, body)
	r.RemoteAddr, r.Host = "127.0.0.1:50000", "127.0.0.1:7946"
	return r
}

// memoryAgent is an agent on a registry of its own, closed with the test.
func memoryAgent(t *testing.T) *agent.Agent {
	t.Helper()
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	t.Cleanup(func() { reg.Close() })
	a, err := agent.New(agent.Config{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// TestWebPagesAreRefused: requests a web page can make to an agent on
// loopback — a cross-site POST (forgery) or any request under another
// name that resolves to 127.0.0.1 (DNS rebinding) — are 403 and do
// nothing; programs and the agent's own dashboard are served.
func TestWebPagesAreRefused(t *testing.T) {
	a := memoryAgent(t)
	register := `{"service":"payments","address":"10.6.6.6:443"}`
	for _, c := range []struct {
		name, remote, host, origin string
		served                     bool
	}{
		{"a program over TCP", "127.0.0.1:50000", "127.0.0.1:7946", "", true},
		{"a program naming localhost", "[::1]:50000", "localhost:7946", "", true},
		{"a program over [::1]", "[::1]:50000", "[::1]:7946", "", true},
		{"a program over a Unix socket", "@", "anything", "", true},
		{"the dashboard (same origin)", "127.0.0.1:50000", "127.0.0.1:7946", "http://127.0.0.1:7946", true},
		{"a cross-site form", "127.0.0.1:50000", "127.0.0.1:7946", "http://evil.example", false},
		{"a sandboxed page", "127.0.0.1:50000", "127.0.0.1:7946", "null", false},
		{"DNS rebinding", "127.0.0.1:50000", "evil.example:7946", "http://evil.example:7946", false},
		{"DNS rebinding without Origin", "127.0.0.1:50000", "evil.example:7946", "", false},
		{"a cross-site form to a Unix socket proxy", "@", "localhost", "https://evil.example", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/v1/register", strings.NewReader(register))
			r.RemoteAddr, r.Host = c.remote, c.host
			r.Header.Set("Content-Type", "text/plain") // what a form or a simple fetch sends
			if c.origin != "" {
				r.Header.Set("Origin", c.origin)
			}
			w := httptest.NewRecorder()
			a.ServeHTTP(w, r)
			if served := w.Code != http.StatusForbidden; served != c.served {
				t.Fatalf("status %d %s, want served: %v", w.Code, w.Body, c.served)
			}
			if !c.served && !strings.Contains(w.Body.String(), `"code":"forbidden"`) {
				t.Errorf("refusal body %s, want code forbidden", w.Body)
			}
		})
	}
	w := httptest.NewRecorder()
	a.ServeHTTP(w, localRequest("GET", "/v1/register", nil))
	var locals []json.RawMessage
	if err := json.Unmarshal(w.Body.Bytes(), &locals); err != nil {
		t.Fatalf("GET /v1/register: %v in %s", err, w.Body)
	}
	if len(locals) != 5 {
		t.Errorf("%d local registrations, want the 5 of the programs: %s", len(locals), w.Body)
	}
}

// TestCrossSitePageInChromium: a page of another origin, in a real
// browser on the same host, POSTs a registration to the agent as a form
// would (no-cors, text/plain: no preflight). The request reaches the
// agent, which refuses it: nothing is registered.
func TestCrossSitePageInChromium(t *testing.T) {
	a := memoryAgent(t)
	var refused atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		a.ServeHTTP(rec, r)
		if r.URL.Path == "/v1/register" && rec.status == http.StatusForbidden {
			refused.Add(1)
		}
	}))
	defer api.Close()
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<html><body><script>
fetch(%q, {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"},
  body: JSON.stringify({service: "payments", address: "10.6.6.6:443"})})
  .then(() => { window.__sent = 1 }, () => { window.__sent = 2 });
</script></body></html>`, api.URL+"/v1/register")
	}))
	defer page.Close()

	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(page.URL)); err != nil {
		t.Fatal(err)
	}
	appears(t, ctx, "the page's request answered", `window.__sent !== undefined`)
	if n := refused.Load(); n != 1 {
		t.Fatalf("%d refused registrations reached the agent, want 1 (the page's)", n)
	}
	if locals := do(t, "GET", api.URL+"/v1/register", nil, nil); locals != http.StatusOK {
		t.Fatalf("GET /v1/register: status %d", locals)
	}
	var got []json.RawMessage
	if do(t, "GET", api.URL+"/v1/register", nil, &got); len(got) != 0 {
		t.Errorf("a cross-site page registered %d instances through the agent", len(got))
	}
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) { r.status = code; r.ResponseWriter.WriteHeader(code) }
