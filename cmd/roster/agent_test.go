//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

// agentProc is a running `roster agent`.
type agentProc struct {
	cmd    *exec.Cmd
	url    string
	exited chan error
	stderr syncBuffer // a copy of what it wrote to stderr
}

// startAgent runs `roster agent` on a free loopback port and returns once
// it listens.
func startAgent(t *testing.T, args ...string) *agentProc {
	t.Helper()
	return startAgentEnv(t, []string{"ROSTER_REGISTRY="}, args...)
}

// startAgentEnv is startAgent with env added to the test's environment.
func startAgentEnv(t *testing.T, env []string, args ...string) *agentProc {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"agent", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	p := &agentProc{cmd: cmd, exited: make(chan error, 1)}
	cmd.Stderr = io.MultiWriter(os.Stderr, &p.stderr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stop(t) })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("roster agent printed no address: %v", err)
	}
	rest, ok := strings.CutPrefix(line, "roster agent: listening on ")
	if !ok {
		t.Fatalf("roster agent: unexpected first line %q", line)
	}
	p.url, _, _ = strings.Cut(rest, ",")
	go func() { p.exited <- cmd.Wait() }()
	return p
}

// stop sends SIGTERM and waits for a clean exit.
func (p *agentProc) stop(t *testing.T) {
	select {
	case <-p.exited: // exited by itself (ProcessState is Wait's to write)
		return
	default:
	}
	if p.cmd.Process.Signal(syscall.SIGTERM) != nil {
		return
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Errorf("roster agent exited with %v after SIGTERM", err)
		}
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		t.Error("roster agent did not exit within 10s of SIGTERM")
		<-p.exited
	}
}

// instance is a real HTTP instance registered in the test's registry.
type instance struct {
	id    string
	srv   *httptest.Server
	lease *registry.Lease
}

func startInstance(t *testing.T, reg *registry.Registry, id string) *instance {
	return startInstanceOf(t, reg, registry.Instance{ID: id})
}

// runClient runs an example client and returns its lines.
func runClient(t *testing.T, agentURL, cacheDir string, argv []string, calls int) []string {
	t.Helper()
	lines, err := runClientArgs(t, agentURL, cacheDir, argv, calls)
	if err != nil {
		t.Fatalf("%v: %v\n%s", argv, err, strings.Join(lines, "\n"))
	}
	return lines
}

// runClientArgs runs an example client with pick options (version=v2 …)
// and returns its lines and its exit error (it exits 1 when a call failed).
func runClientArgs(t *testing.T, agentURL, cacheDir string, argv []string, calls int, opts ...string) ([]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append(append(argv[1:len(argv):len(argv)], "api", fmt.Sprint(calls)), opts...)
	cmd := exec.CommandContext(ctx, argv[0], args...)
	cmd.Env = append(os.Environ(), "ROSTER_AGENT="+agentURL, "ROSTER_CACHE_DIR="+cacheDir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if stderr.Len() > 0 {
		t.Logf("%v stderr: %s", argv, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != calls {
		t.Fatalf("%v %v: %d lines for %d calls (%v):\n%s%s", argv, opts, len(lines), calls, err, out, stderr.String())
	}
	return lines, err
}

// served counts the calls of a client run by outcome word and instance.
func served(lines []string) map[string]int {
	n := map[string]int{}
	for _, l := range lines {
		f := strings.Fields(l) // "ok a hello from a"
		if len(f) >= 5 && f[1] == f[4] {
			n[f[0]]++
			n[f[1]]++
		}
	}
	return n
}

// TestAgentExampleClients runs the PHP and Python examples under their
// real interpreters against a real roster agent on a real Redis, with
// real HTTP instances: calls spread over the instances, a dead instance
// costs no call, and with the agent stopped the clients go on from their
// saved lists.
func TestAgentExampleClients(t *testing.T) {
	clients := map[string][]string{
		"php":    {"php", "../../examples/php/client.php"},
		"python": {"python3", "../../examples/python/roster_agent.py"},
	}
	for name, argv := range clients {
		t.Run(name, func(t *testing.T) {
			if _, err := exec.LookPath(argv[0]); err != nil {
				t.Fatalf("%s is not installed (scripts/test.sh installs it): %v", argv[0], err)
			}
			testExampleClient(t, argv)
		})
	}
}

func testExampleClient(t *testing.T, argv []string) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr() + "/0"
	reg, err := registry.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	startInstance(t, reg, "a")
	b := startInstance(t, reg, "b")
	startInstance(t, reg, "c")
	agent := startAgent(t, "--registry", url, "--strategy", "round_robin")

	n := served(runClient(t, agent.url, t.TempDir(), argv, 30))
	if n["ok"] != 30 || n["a"] == 0 || n["b"] == 0 || n["c"] == 0 {
		t.Fatalf("30 calls over 3 instances: %v", n)
	}

	b.srv.Close() // b dies but stays registered: retried elsewhere, reported
	n = served(runClient(t, agent.url, t.TempDir(), argv, 30))
	if n["ok"] != 30 || n["b"] != 0 {
		t.Fatalf("30 calls with b dead: %v", n)
	}
	if f := agentFailures(t, agent.url, "b"); f == 0 {
		t.Error("the client's failures on b never reached the agent")
	}

	// b leaves; a client saves the new list; then the agent stops.
	if err := b.lease.Deregister(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitAgentList(t, agent.url, 2)
	cache := t.TempDir()
	runClient(t, agent.url, cache, argv, 1)
	if files, _ := filepath.Glob(filepath.Join(cache, "roster-api.json")); len(files) != 1 {
		t.Fatal("the client saved no list")
	}
	agent.stop(t)
	n = served(runClient(t, agent.url, cache, argv, 20))
	if n["fallback"] != 20 || n["a"]+n["c"] != 20 {
		t.Fatalf("20 calls with the agent down: %v", n)
	}
}

// agentFailures returns the failures the agent counts for an instance.
func agentFailures(t *testing.T, url, id string) uint64 {
	t.Helper()
	var st struct {
		Services []struct {
			Instances []struct {
				ID    string `json:"id"`
				Stats struct {
					Failures uint64 `json:"failures"`
				} `json:"stats"`
			} `json:"instances"`
		} `json:"services"`
	}
	getJSON(t, url+"/v1/state", &st)
	for _, s := range st.Services {
		for _, in := range s.Instances {
			if in.ID == id {
				return in.Stats.Failures
			}
		}
	}
	return 0
}

// waitAgentList long-polls the agent until api has n instances.
func waitAgentList(t *testing.T, url string, n int) {
	t.Helper()
	var cur struct {
		Index     uint64            `json:"index"`
		Instances []json.RawMessage `json:"instances"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for getJSON(t, url+"/v1/services/api", &cur); len(cur.Instances) != n; {
		if time.Now().After(deadline) {
			t.Fatalf("the agent lists %d instances of api, want %d", len(cur.Instances), n)
		}
		getJSON(t, fmt.Sprintf("%s/v1/services/api?index=%d&wait=10s", url, cur.Index), &cur)
	}
}

func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// TestAgentBadFlags: invalid flags fail at once with the flag named.
func TestAgentBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "0.0.0.0:7946"}, "not a loopback address"},
		{[]string{"--listen", "10.1.2.3:80"}, "not a loopback address"},
		{[]string{"--listen", "nonsense"}, "neither ip:port nor unix:/path"},
		{[]string{"--listen", "unix:"}, "needs a path"},
		{[]string{"--strategy", "fastest"}, "--strategy"},
		{[]string{"--exec", "true"}, "--exec needs at least one --template"},
		{[]string{"--template", "only-in"}, "not in.tmpl:out.conf"},
		{[]string{"--token-ttl", "0s"}, `"--token-ttl" flag: must be from 100ms to 1h`},
		{[]string{"--region", "r1"}, `--region "r1" needs --zone`},
		{[]string{"--zone", "a\tb"}, "Config.Zone"},
		{nil, "no registry"},
	} {
		args := append([]string{"agent", "--listen", "127.0.0.1:0"}, c.args...)
		if c.args != nil {
			args = append(args, "--registry", "mem://flags")
		}
		_, stderr, code := run(t, 10*time.Second, args...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("roster %v: exit %d, stderr %q; want an error with %q", args, code, stderr, c.want)
		}
	}
}

// TestAgentExampleClientsHonourFilters: the PHP and Python clients fall
// back to their saved list only when the agent cannot be reached, and
// then filter it as the agent does; an error the agent answers (503
// no_instances, 503 stale) is an error of the call, never a pick from the
// saved list that ignores the filters.
func TestAgentExampleClientsHonourFilters(t *testing.T) {
	clients := map[string][]string{
		"php":    {"php", "../../examples/php/client.php"},
		"python": {"python3", "../../examples/python/roster_agent.py"},
	}
	for name, argv := range clients {
		t.Run(name, func(t *testing.T) {
			if _, err := exec.LookPath(argv[0]); err != nil {
				t.Fatalf("%s is not installed (scripts/test.sh installs it): %v", argv[0], err)
			}
			testClientFilters(t, argv)
		})
	}
}

func testClientFilters(t *testing.T, argv []string) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr() + "/0"
	reg, err := registry.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	startInstanceOf(t, reg, registry.Instance{ID: "a", Version: "v1", Zone: "z1", Tags: []string{"x"}})
	startInstanceOf(t, reg, registry.Instance{ID: "b", Version: "v1", Zone: "z2"})
	c := startInstanceOf(t, reg, registry.Instance{ID: "c", Version: "v2", Zone: "z2", Tags: []string{"x", "y"}})
	agent := startAgent(t, "--registry", url, "--max-staleness", "1s")
	cache := t.TempDir()
	runClient(t, agent.url, cache, argv, 1) // saves a, b and c

	// c, the only v2, leaves: the agent's 503 no_instances is the answer,
	// not a v1 from the saved list.
	if err := c.lease.Deregister(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitAgentList(t, agent.url, 2)
	wantFailed(t, agent.url, cache, argv, "no_instances", "version=v2")

	// The registry is down for longer than --max-staleness: 503 stale.
	srv.Kill()
	waitPickCode(t, agent.url, "stale")
	wantFailed(t, agent.url, cache, argv, "stale")

	// The agent is down: the saved list, filtered.
	agent.stop(t)
	for _, c := range []struct {
		opts []string
		want string
	}{
		{[]string{"version=v2"}, "c"},
		{[]string{"version=v1", "zone=z2"}, "b"},
		{[]string{"tags=x,y"}, "c"},
		{[]string{"zone=z1", "tags=x"}, "a"},
	} {
		lines, err := runClientArgs(t, agent.url, cache, argv, 10, c.opts...)
		if n := served(lines); err != nil || n["fallback"] != 10 || n[c.want] != 10 {
			t.Errorf("agent down, %v: %v, want 10 fallback calls on %s; exit %v:\n%s", c.opts, n, c.want, err, strings.Join(lines, "\n"))
		}
	}
}

// wantFailed runs 5 calls of a client and checks that each one failed
// with the agent's code.
func wantFailed(t *testing.T, agentURL, cache string, argv []string, code string, opts ...string) {
	t.Helper()
	lines, err := runClientArgs(t, agentURL, cache, argv, 5, opts...)
	for _, l := range lines {
		if !strings.HasPrefix(l, "failed ") || !strings.Contains(l, code) {
			t.Errorf("%v: %q, want a call failed with %s (exit %v)", opts, l, code, err)
		}
	}
}

// waitPickCode picks through the agent until it answers the error code.
func waitPickCode(t *testing.T, agentURL, code string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Post(agentURL+"/v1/pick", "application/json", strings.NewReader(`{"service":"api"}`))
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ Code string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if e.Code == code {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent does not answer %s within 15s (status %d, code %q)", code, resp.StatusCode, e.Code)
		}
		time.Sleep(100 * time.Millisecond) // polling the agent's state, not a race
	}
}

// startInstanceOf starts a real HTTP instance of api registered as in.
func startInstanceOf(t *testing.T, reg *registry.Registry, in registry.Instance) *instance {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "hello from %s\n", in.ID)
	}))
	t.Cleanup(srv.Close)
	in.Service, in.Address = "api", srv.Listener.Addr().String()
	l, err := reg.Register(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	return &instance{id: in.ID, srv: srv, lease: l}
}

// TestAgentExampleClientsWaitOnAColdPick: with no saved list of the
// service, a client waits longer than its usual 250 ms for the agent's
// pick (whose first pick of a service waits for the registry), since it
// has nothing to fall back on. The agent here is a stand-in that answers
// after 700 ms: what is tested is the client's timeout, not the agent.
func TestAgentExampleClientsWaitOnAColdPick(t *testing.T) {
	inst := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "hello from a")
	}))
	defer inst.Close()
	in := map[string]any{"id": "a", "service": "api", "address": inst.Listener.Addr().String(), "weight": 100}
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/pick":
			time.Sleep(700 * time.Millisecond) // the registry's first answer
			_ = json.NewEncoder(w).Encode(map[string]any{"token": "t1", "instance": in})
		case "/v1/services/api":
			_ = json.NewEncoder(w).Encode(map[string]any{"service": "api", "instances": []any{in}})
		default:
			_, _ = io.WriteString(w, "{}")
		}
	}))
	defer slow.Close()
	for name, argv := range map[string][]string{
		"php":    {"php", "../../examples/php/client.php"},
		"python": {"python3", "../../examples/python/roster_agent.py"},
	} {
		t.Run(name, func(t *testing.T) {
			lines, err := runClientArgs(t, slow.URL, t.TempDir(), argv, 1)
			if n := served(lines); err != nil || n["ok"] != 1 {
				t.Errorf("cold pick answered after 700ms: %v (exit %v), want 1 ok call", lines, err)
			}
		})
	}
}
