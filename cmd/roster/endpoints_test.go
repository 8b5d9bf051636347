//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roster-go/roster/registry"
)

// TestRegisterEndpointsOnce: one roster register process announces an
// http and a grpc endpoint in one registration, on a real etcd. roster
// ls lists it once with both; roster pick and the agent's pick by name
// answer that endpoint's address every time, over real HTTP, and never
// an instance that does not serve the name; the PHP and Python clients
// reach the http port by name; on SIGTERM the process drains once.
//
// Both ports serve HTTP, saying which they are: the agent and the CLI
// never speak an endpoint's protocol, and what is tested is which port a
// caller is sent to.
func TestRegisterEndpointsOnce(t *testing.T) {
	reg, url := openReg(t, "/cli-endpoints")
	w, err := reg.Watch(context.Background(), "api")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	httpPort, grpcPort := portSaying(t, "hello from http"), portSaying(t, "hello from grpc")
	// An instance whose one port is a named grpc one serves no http. It
	// answers, so that a call sent there shows, not just fails over.
	grpcOnly := "127.0.0.1" + portSaying(t, "hello from grpc-only")
	if _, err := reg.Register(context.Background(), registry.Instance{ID: "grpc-only", Service: "api", Address: grpcOnly,
		Endpoints: []registry.Endpoint{{Name: "grpc", Address: grpcOnly}}}); err != nil {
		t.Fatal(err)
	}

	const drain = time.Second
	s := startSidecar(t, []string{childEnv + "=wait"}, "--registry", url, "--service", "api",
		"--endpoint", "grpc=127.0.0.1"+grpcPort+"/grpc", "--endpoint", "http="+httpPort+"/http", "--ttl", "3s", "--drain", drain.String())
	s.line(t, "running", 20*time.Second)
	snap := waitListed(t, w, 2, 20*time.Second)
	sidecar, ok := snap.Find(sidecarID(t, snap))
	wantEps := []registry.Endpoint{{Name: "grpc", Address: "127.0.0.1" + grpcPort, Protocol: "grpc"},
		{Name: "http", Address: "127.0.0.1" + httpPort, Protocol: "http"}}
	if !ok || sidecar.Address != wantEps[0].Address || len(sidecar.Endpoints) != 2 || sidecar.Endpoints[0] != wantEps[0] || sidecar.Endpoints[1] != wantEps[1] {
		t.Fatalf("registered %+v, want the primary grpc and endpoints %+v", sidecar, wantEps)
	}

	checkLsEndpoints(t, url, sidecar, grpcOnly)
	checkPickEndpoints(t, url, sidecar, grpcOnly)

	agent := startAgent(t, "--registry", url, "--strategy", "round_robin")
	for _, c := range []struct{ endpoint, want string }{{"grpc", wantEps[0].Address}, {"http", wantEps[1].Address}} {
		seen := map[string]int{}
		for range 40 {
			p := agentPick(t, agent.url, c.endpoint)
			want := c.want
			if p.Instance.ID == "grpc-only" {
				want = grpcOnly
			}
			if p.Endpoint.Address != want || p.Endpoint.Name != c.endpoint {
				t.Fatalf("agent pick endpoint=%s: %s at %+v, want %s", c.endpoint, p.Instance.ID, p.Endpoint, want)
			}
			seen[p.Instance.ID]++
		}
		if c.endpoint == "grpc" && len(seen) != 2 || c.endpoint == "http" && seen["grpc-only"] != 0 {
			t.Errorf("agent picks of endpoint=%s: %v", c.endpoint, seen)
		}
	}
	clients := map[string][]string{
		"php":    {"php", "../../examples/php/client.php"},
		"python": {"python3", "../../examples/python/roster_agent.py"},
	}
	caches := map[string]string{}
	for name, argv := range clients {
		caches[name] = t.TempDir()
		lines, err := runClientArgs(t, agent.url, caches[name], argv, 20, "endpoint=http")
		t.Logf("%s client, endpoint=http: %d calls, the first %q", name, len(lines), lines[0])
		checkCalls(t, name, lines, err, "ok "+sidecar.ID+" hello from http")
	}
	// With the agent down, the clients pick from the list they saved, by
	// the same rule: grpc-only, whose one port is grpc, is never called.
	agent.stop(t)
	for name, argv := range clients {
		lines, err := runClientArgs(t, agent.url, caches[name], argv, 20, "endpoint=http")
		checkCalls(t, name+" (agent down)", lines, err, "fallback "+sidecar.ID+" hello from http")
	}

	start := time.Now()
	s.cmd.Process.Signal(syscall.SIGTERM)
	if code := s.exitCode(t, 20*time.Second); code != 7 {
		t.Fatalf("roster exited %d, want CMD's 7\n%s", code, s.stderr.String())
	}
	took := time.Since(start)
	log := s.stderr.String()
	t.Logf("exited %v after SIGTERM with a %v drain:\n%s", took.Round(time.Millisecond), drain, log)
	if n, m := strings.Count(log, "draining for"), strings.Count(log, "deregistered "); n != 1 || m != 1 {
		t.Errorf("%d drains and %d deregistrations, want one of each", n, m)
	}
	// Two registrations drained one after the other took 2 windows.
	if took < drain || took >= 2*drain {
		t.Errorf("exited %v after SIGTERM, want one drain window of %v", took, drain)
	}
	if snap := waitListed(t, w, 1, 10*time.Second); snap.Instances[0].ID != "grpc-only" {
		t.Errorf("left listed: %+v", snap.Instances)
	}
}

// checkCalls fails unless every line of a client run is want.
func checkCalls(t *testing.T, client string, lines []string, err error, want string) {
	t.Helper()
	for _, l := range lines {
		if l != want {
			t.Errorf("%s client, endpoint=http: %q (exit %v), want every call on the http port", client, l, err)
			return
		}
	}
}

// portSaying starts an HTTP server answering text, and returns ":port".
func portSaying(t *testing.T, text string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, text) }))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()[len("127.0.0.1"):]
}

// sidecarID returns the ID of the instance that is not grpc-only.
func sidecarID(t *testing.T, snap registry.Snapshot) string {
	for _, in := range snap.Instances {
		if in.ID != "grpc-only" {
			return in.ID
		}
	}
	t.Fatalf("no sidecar instance in %+v", snap.Instances)
	return ""
}

// checkLsEndpoints: roster ls lists the instance once, with both
// endpoints, in text and in JSON.
func checkLsEndpoints(t *testing.T, url string, in registry.Instance, grpcOnly string) {
	t.Helper()
	out, errOut, code := run(t, 20*time.Second, "ls", "api", "--registry", url)
	rows := strings.Split(strings.TrimSpace(out), "\n")
	want := fmt.Sprintf("%s=%s/%s,%s=%s/%s", in.Endpoints[0].Name, in.Endpoints[0].Address, in.Endpoints[0].Protocol,
		in.Endpoints[1].Name, in.Endpoints[1].Address, in.Endpoints[1].Protocol)
	if code != 0 || len(rows) != 3 || !strings.HasPrefix(rows[0], "ID  ") || strings.Count(out, in.ID) != 1 {
		t.Fatalf("ls api: exit %d, %q\n%s", code, out, errOut)
	}
	for _, r := range rows[1:] {
		f := strings.Fields(r)
		if f[0] == in.ID && f[2] != want || f[0] == "grpc-only" && f[2] != "grpc="+grpcOnly {
			t.Errorf("ls api row %q, want the endpoints %s", r, want)
		}
	}
	out, _, code = run(t, 20*time.Second, "ls", "api", "--json", "--registry", url)
	var snap registry.Snapshot
	if err := json.Unmarshal([]byte(out), &snap); code != 0 || err != nil || len(snap.Instances) != 2 {
		t.Fatalf("ls api --json: exit %d, %v\n%s", code, err, out)
	}
	if got, _ := snap.Find(in.ID); !got.Equal(in) {
		t.Errorf("ls api --json: %+v, want %+v", got, in)
	}
}

// checkPickEndpoints: roster pick --endpoint picks only instances that
// serve the name, and shows that endpoint's address.
func checkPickEndpoints(t *testing.T, url string, in registry.Instance, grpcOnly string) {
	t.Helper()
	out, errOut, code := run(t, 20*time.Second, "pick", "api", "--endpoint", "http", "--count", "50", "--json", "--registry", url)
	var rows []struct {
		ID       string            `json:"id"`
		Endpoint registry.Endpoint `json:"endpoint"`
		Picks    int               `json:"picks"`
	}
	if err := json.Unmarshal([]byte(out), &rows); code != 0 || err != nil || len(rows) != 1 {
		t.Fatalf("pick --endpoint http: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	if r := rows[0]; r.ID != in.ID || r.Endpoint != in.Endpoints[1] || r.Picks != 50 {
		t.Errorf("pick --endpoint http: %+v, want 50 picks of %s at %+v", r, in.ID, in.Endpoints[1])
	}
	out, _, code = run(t, 20*time.Second, "pick", "api", "--endpoint", "grpc", "--strategy", "round_robin", "--count", "10", "--registry", url)
	if code != 0 || !strings.Contains(out, in.Endpoints[0].Address) || !strings.Contains(out, grpcOnly+" ") || strings.Contains(out, in.Endpoints[1].Address) {
		t.Errorf("pick --endpoint grpc: exit %d\n%s", code, out)
	}
	if _, errOut, code := run(t, 20*time.Second, "pick", "api", "--endpoint", "GRPC", "--registry", url); code != 1 || !strings.Contains(errOut, "--endpoint") {
		t.Errorf("pick --endpoint GRPC: exit %d, %q; want an error naming --endpoint", code, errOut)
	}
}

// agentPick picks by endpoint name through the agent's HTTP API.
func agentPick(t *testing.T, agentURL, endpoint string) (p struct {
	Token    string            `json:"token"`
	Instance registry.Instance `json:"instance"`
	Endpoint registry.Endpoint `json:"endpoint"`
}) {
	t.Helper()
	body := fmt.Sprintf(`{"service":"api","endpoint":%q}`, endpoint)
	resp, err := http.Post(agentURL+"/v1/pick", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("pick %s: %d %v", body, resp.StatusCode, err)
	}
	report := fmt.Sprintf(`{"token":%q,"outcome":"success","latency_ms":1}`, p.Token)
	r, err := http.Post(agentURL+"/v1/report", "application/json", strings.NewReader(report))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	return p
}
