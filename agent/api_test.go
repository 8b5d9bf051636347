package agent_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roster-go/roster/agent"
	"github.com/roster-go/roster/registry"
)

// TestBadInput: every malformed request is a 4xx with a typed code and
// the field named; nothing is picked or registered.
func TestBadInput(t *testing.T) {
	f := newMemFixture(t, agent.Config{})
	f.register(registry.Instance{ID: "a", Service: "api", Address: "10.0.0.1:80"})
	cases := []struct {
		method, path, body string
		status             int
		code, field        string
	}{
		{"POST", "/v1/pick", `{"service":`, 400, "invalid", "request body"},
		{"POST", "/v1/pick", `{"service":"api","bogus":1}`, 400, "invalid", "bogus"},
		{"POST", "/v1/pick", `{"service":"API!"}`, 400, "invalid", "API!"},
		{"POST", "/v1/pick", `{"service":"api","strategy":"fastest"}`, 400, "invalid", "strategy"},
		{"POST", "/v1/pick", `{"service":"api","version":"v9"}`, 503, "no_instances", "api"},
		{"POST", "/v1/report", `{"token":"nope","outcome":"success"}`, 404, "not_found", "token"},
		{"POST", "/v1/report", `{"token":"nope","outcome":"great"}`, 400, "invalid", "outcome"},
		{"POST", "/v1/report", `{"token":"nope","outcome":"success","latency_ms":-1}`, 400, "invalid", "latency_ms"},
		{"GET", "/v1/services/api?index=x", "", 400, "invalid", "index"},
		{"GET", "/v1/services/api?index=1&wait=soon", "", 400, "invalid", "wait"},
		{"GET", "/v1/services/Bad%20Name", "", 400, "invalid", "Bad Name"},
		{"POST", "/v1/register", `{"service":"web","address":"nohost"}`, 400, "invalid", "nohost"},
		{"POST", "/v1/register", `{"service":"web","address":"127.0.0.1:1","ttl":"long"}`, 400, "invalid", "ttl"},
		{"POST", "/v1/register", `{"service":"web","address":"127.0.0.1:1","check_url":"ftp://x"}`, 400, "invalid", "check_url"},
		{"POST", "/v1/register", `{"service":"web","address":"127.0.0.1:1","check_interval":"1s"}`, 400, "invalid", "check_interval"},
		{"DELETE", "/v1/register/nope", "", 404, "not_found", "nope"},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, f.url+c.path, strings.NewReader(c.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e agent.Error
		decodeBody(t, resp, &e)
		if resp.StatusCode != c.status || e.Code != c.code || !strings.Contains(e.Error, c.field) {
			t.Errorf("%s %s %s: %d %+v; want %d %s naming %q", c.method, c.path, c.body, resp.StatusCode, e, c.status, c.code, c.field)
		}
	}
	if n := f.agent.State().Tokens; n != 0 {
		t.Errorf("%d tokens issued by bad requests", n)
	}
}

// TestTokensAreBounded: an unreported token expires (its in-flight count
// released, its report refused), and no more than MaxTokens wait.
func TestTokensAreBounded(t *testing.T) {
	f := newMemFixture(t, agent.Config{TokenTTL: 200 * time.Millisecond, MaxTokens: 10})
	f.register(registry.Instance{ID: "a", Service: "api", Address: "10.0.0.1:80"})
	var first string
	for i := range 50 {
		p := f.pick(agent.PickRequest{Service: "api", Strategy: "least_request"})
		if i == 0 {
			first = p.Token
		}
	}
	if n := f.agent.State().Tokens; n != 10 {
		t.Errorf("%d tokens wait, want the bound 10", n)
	}
	err := f.agent.Report(context.Background(), agent.ReportRequest{Token: first, Outcome: "success"})
	if !errors.Is(err, agent.ErrUnknownToken) {
		t.Errorf("report of an evicted token: %v", err)
	}
	p := f.pick(agent.PickRequest{Service: "api"})
	deadline := time.Now().Add(5 * time.Second)
	for f.agent.State().Tokens != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d tokens still wait after their TTL", f.agent.State().Tokens)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := f.agent.Report(context.Background(), agent.ReportRequest{Token: p.Token, Outcome: "success"}); !errors.Is(err, agent.ErrUnknownToken) {
		t.Errorf("report of an expired token: %v", err)
	}
	if in := f.agent.State().Services[0].Instances[0]; in.Stats.Inflight != 0 || in.Stats.Picks != 51 {
		t.Errorf("after expiry: %+v, want 51 picks and none in flight", in.Stats)
	}
	// A token is reported once.
	p = f.pick(agent.PickRequest{Service: "api"})
	f.report(p.Token, "success", 1)
	if st := do(t, "POST", f.url+"/v1/report", agent.ReportRequest{Token: p.Token, Outcome: "success"}, nil); st != http.StatusNotFound {
		t.Errorf("second report of a token: status %d", st)
	}
}

// TestLocalRegistration: the agent holds a local process's lease, withdraws
// it while its HTTP check fails, and deregisters it on request.
func TestLocalRegistration(t *testing.T) {
	onBackends(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, agent.Config{})
		var healthy atomic.Bool
		healthy.Store(true)
		proc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if !healthy.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		}))
		defer proc.Close()
		req := agent.RegisterRequest{Instance: registry.Instance{Service: "web", Address: proc.Listener.Addr().String(), Version: "v2"},
			TTL: "3s", CheckURL: proc.URL + "/health", CheckInterval: "100ms"}
		var in registry.Instance
		if st := do(t, "POST", f.url+"/v1/register", req, &in); st != http.StatusOK || in.ID == "" {
			t.Fatalf("register: status %d, %+v", st, in)
		}
		f.waitInstances("web", 10*time.Second, has(1))
		var locals []agent.Local
		do(t, "GET", f.url+"/v1/register", nil, &locals)
		if len(locals) != 1 || locals[0].Instance.ID != in.ID {
			t.Errorf("local registrations: %+v", locals)
		}
		healthy.Store(false)
		f.waitInstances("web", 10*time.Second, has(0))
		healthy.Store(true)
		f.waitInstances("web", 10*time.Second, has(1))
		if st := do(t, "DELETE", f.url+"/v1/register/"+in.ID, nil, nil); st != http.StatusNoContent {
			t.Fatalf("deregister: status %d", st)
		}
		f.waitInstances("web", 10*time.Second, has(0))
	})
}
