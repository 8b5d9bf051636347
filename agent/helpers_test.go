package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/roster-go/roster/agent"
	_ "github.com/roster-go/roster/backends/etcd"
	"github.com/roster-go/roster/backends/memory"
	_ "github.com/roster-go/roster/backends/redis"
	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backend is a real registry server for a test: the URL the agent and
// the test's writer open, and how to make it unreachable.
type backend struct {
	url  string
	kill func()
}

func startRedis(t *testing.T) backend {
	srv := redistest.Start(t)
	return backend{url: "redis://" + srv.Addr() + "/0?dial_timeout=300ms&read_timeout=500ms", kill: srv.Kill}
}

func startEtcd(t *testing.T) backend {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := etcdtest.Start(ctx, etcdtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return backend{url: cl.URL("/agent", "request_timeout=1s", "progress_interval=500ms"), kill: func() { _ = cl.Kill() }}
}

// onBackends runs test on a real Redis and a real etcd.
func onBackends(t *testing.T, test func(t *testing.T, b backend)) {
	for name, start := range map[string]func(*testing.T) backend{"redis": startRedis, "etcd": startEtcd} {
		t.Run(name, func(t *testing.T) { test(t, start(t)) })
	}
}

// fixture is an agent on a real backend, served on loopback, and a
// registry of the test's own to register instances with.
type fixture struct {
	t      *testing.T
	agent  *agent.Agent
	url    string
	writer *registry.Registry
}

func newFixture(t *testing.T, b backend, cfg agent.Config) *fixture {
	t.Helper()
	ctx := context.Background()
	reg, err := registry.Open(ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	writer, err := registry.Open(ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { writer.Close() }) // runs after serve's clean-up
	return serve(t, reg, writer, cfg)
}

func (f *fixture) register(in registry.Instance) *registry.Lease {
	f.t.Helper()
	l, err := f.writer.Register(context.Background(), in, registry.WithTTL(5*time.Second))
	if err != nil {
		f.t.Fatal(err)
	}
	return l
}

// do sends a JSON request and decodes a JSON answer into out (if not
// nil); it returns the status.
func do(t testing.TB, method, url string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, url, err, b)
		}
	}
	if e, ok := out.(*agent.Error); ok && resp.StatusCode/100 != 2 {
		if err := json.Unmarshal(b, e); err != nil {
			t.Fatalf("%s %s: error body %q: %v", method, url, b, err)
		}
	}
	return resp.StatusCode
}

func (f *fixture) pick(req agent.PickRequest) agent.PickResponse {
	f.t.Helper()
	var resp agent.PickResponse
	if st := do(f.t, "POST", f.url+"/v1/pick", req, &resp); st != http.StatusOK {
		f.t.Fatalf("pick %+v: status %d", req, st)
	}
	return resp
}

func (f *fixture) report(token, outcome string, latencyMS float64) {
	f.t.Helper()
	req := agent.ReportRequest{Token: token, Outcome: outcome, LatencyMS: latencyMS}
	if st := do(f.t, "POST", f.url+"/v1/report", req, nil); st != http.StatusNoContent {
		f.t.Fatalf("report %+v: status %d", req, st)
	}
}

func (f *fixture) instances(service string, query string) agent.Instances {
	f.t.Helper()
	var out agent.Instances
	if st := do(f.t, "GET", f.url+"/v1/services/"+service+query, nil, &out); st != http.StatusOK {
		f.t.Fatalf("instances of %s%s: status %d", service, query, st)
	}
	return out
}

// waitInstances polls the instances endpoint (long polls, no sleeps)
// until ok accepts the answer or timeout passes.
func (f *fixture) waitInstances(service string, timeout time.Duration, ok func(agent.Instances) bool) agent.Instances {
	f.t.Helper()
	deadline := time.Now().Add(timeout)
	cur := f.instances(service, "")
	for !ok(cur) {
		left := time.Until(deadline)
		if left <= 0 {
			f.t.Fatalf("%s: still %+v after %v", service, cur, timeout)
		}
		cur = f.instances(service, fmt.Sprintf("?index=%d&wait=%dms", cur.Index, left.Milliseconds()+1))
	}
	return cur
}

func get(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b)
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// post is do for goroutines other than the test's: it returns errors
// instead of failing the test.
func post(url string, body, out any) (int, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode == http.StatusOK {
		err = json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode, err
}

// newMemFixture is an agent on the in-memory backend, for the tests of
// input handling that need no real server.
func newMemFixture(t *testing.T, cfg agent.Config) *fixture {
	t.Helper()
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	return serve(t, reg, reg, cfg)
}

// serve starts an agent on reg, served on loopback, and closes them all
// when the test ends.
func serve(t *testing.T, reg, writer *registry.Registry, cfg agent.Config) *fixture {
	t.Helper()
	cfg.Registry = reg
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	t.Cleanup(func() {
		a.Close() // ends long polls and event streams first
		srv.Close()
		reg.Close()
	})
	return &fixture{t: t, agent: a, url: srv.URL, writer: writer}
}

func decodeBody(t testing.TB, resp *http.Response, out any) {
	t.Helper()
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("%s: %v", resp.Request.URL, err)
	}
}
