// Package consultest starts private Consul agents for tests. Call [Start]
// for an agent and [NewHarness] for the Consul backend's conformance
// harness on it:
//
//	conformance.Run(t, consultest.NewHarness(t, consultest.Start(t)))
//
// Each agent is one "consul agent -dev" on free loopback ports, with its
// data and log in a temporary directory. [StartACL] starts one that
// denies by default.
//
// The binary is Consul 1.13.9, MPL-2.0. It is $ROSTER_CONSUL_BIN if set,
// else ~/.cache/roster/consul-1.13.9, else consul on PATH. scripts/test.sh
// builds the cached one from the Go module proxy (tools/consul). It never
// skips. A missing binary is an error that says how to get one.
package consultest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/loopback"
	"github.com/roster-go/roster/internal/testserver"
)

// envBin names the environment variable that points at the consul binary.
const envBin = "ROSTER_CONSUL_BIN"

// version is the Consul release scripts/test.sh builds.
const version = "1.13.9"

// findBinary returns the path of the consul binary: $ROSTER_CONSUL_BIN,
// then ~/.cache/roster/consul-1.13.9, then consul on PATH.
func findBinary() (string, error) {
	return testserver.Binary{Pkg: "consultest", Name: "Consul", Version: version,
		Env: envBin, Cached: "consul-" + version, PATH: "consul"}.Find()
}

// Agent is one `consul agent -dev` on free loopback ports. Its data dir
// keeps the agent's own registrations across Restart(keepData=true), as a
// production agent's does; the catalog itself is in memory (-dev). Its
// methods are safe for concurrent use.
type Agent struct {
	bin   string
	dir   testserver.Dir
	addr  string // 127.0.0.1:port of the HTTP API
	ports []int  // http, server, serf-lan, serf-wan, dns
	node  string // a name of its own: see waitReady
	args  []string
	token string // management token with ACLs (StartACL), else ""

	tokens []tokenSpec // made by CreateToken, made again after each start

	mu   sync.Mutex // serialises start, Stop and the tokens
	proc testserver.Process
}

// Start starts an agent with the extra command-line arguments and stops
// it, removing its directory, when the test ends. It fails the test if the
// agent cannot start.
func Start(tb testing.TB, args ...string) *Agent {
	tb.Helper()
	a, err := NewAgent("", args...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { a.Close() })
	return a
}

// NewAgent starts an agent in dir (a new temporary directory if dir is
// empty, removed by Close) with the extra command-line arguments, and
// waits until it has a leader and lists itself as passing. The caller
// closes it.
//
// Besides -dev on loopback ports (no gRPC; DNS on DNSAddr) the agent runs with
// limits { http_max_conns_per_client = 4096 }: Consul answers 429 past 200
// concurrent HTTP connections from one IP, and every client of a test
// suite comes from 127.0.0.1, which production clients (one process per
// host, or per pod IP) do not.
func NewAgent(dir string, args ...string) (*Agent, error) { return newAgent(dir, "", args) }

func newAgent(dir, token string, args []string) (*Agent, error) {
	bin, err := findBinary()
	if err != nil {
		return nil, err
	}
	a := &Agent{bin: bin, args: args, token: token, node: fmt.Sprintf("roster-test-%016x", rand.Uint64())}
	if a.dir, err = testserver.NewDir(dir, "roster-consul-"); err != nil {
		return nil, fmt.Errorf("consultest: %w", err)
	}
	var lastErr error
	for range 3 { // a free port may be taken by someone else before the agent binds it
		a.ports = a.ports[:0]
		for range 5 {
			p, err := loopback.FreePort()
			if err != nil {
				a.dir.Remove()
				return nil, err
			}
			a.ports = append(a.ports, p)
		}
		a.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(a.ports[0]))
		if lastErr = a.start(); lastErr == nil {
			return a, nil
		}
	}
	a.dir.Remove()
	return nil, lastErr
}

// Addr is the host:port of the agent's HTTP API.
func (a *Agent) Addr() string { return a.addr }

// DNSAddr is the host:port of the agent's DNS interface (UDP and TCP),
// which answers <service>.service.consul SRV queries.
func (a *Agent) DNSAddr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(a.ports[4])) }

// URL returns the registry URL of the agent, consul://127.0.0.1:<port>,
// followed by ?query if query is not empty (for example "wait=5s").
func (a *Agent) URL(query string) string {
	return testserver.URL("consul://"+a.addr, query)
}

// LogPath is the file the agent writes its log to (level warn).
func (a *Agent) LogPath() string { return filepath.Join(a.dir.Path, "agent.log") }

// LogTail returns the last n bytes of the agent's log.
func (a *Agent) LogTail(n int) string { return testserver.LogTail(a.LogPath(), n) }

func (a *Agent) start() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.proc.Running() {
		return errors.New("consultest: agent already running")
	}
	args := append([]string{"agent", "-dev",
		"-client", "127.0.0.1", "-bind", "127.0.0.1",
		"-http-port", strconv.Itoa(a.ports[0]), "-server-port", strconv.Itoa(a.ports[1]),
		"-serf-lan-port", strconv.Itoa(a.ports[2]), "-serf-wan-port", strconv.Itoa(a.ports[3]),
		"-grpc-port", "-1", "-dns-port", strconv.Itoa(a.ports[4]), "-node", a.node,
		"-data-dir", filepath.Join(a.dir.Path, "data"),
		"-hcl", "limits { http_max_conns_per_client = 4096 }",
		"-log-level", "warn"}, a.args...)
	if err := a.proc.Start(exec.Command(a.bin, args...), a.LogPath()); err != nil {
		return fmt.Errorf("consultest: %w", err)
	}
	if err := a.waitReady(a.proc.Done()); err != nil {
		a.proc.Kill()
		return fmt.Errorf("consultest: consul agent on %s: %w\n%s", a.addr, err, a.LogTail(6000))
	}
	return a.remakeTokens()
}

// waitReady polls until the agent has a leader and its own node is in the
// catalog with a passing serfHealth (the `consul` service is listed as
// passing), and until the agent's first anti-entropy full sync has run
// (the node's tagged addresses, which only that sync writes, are in the
// catalog). Registrations made before that sync can make it fail: Consul
// then retries it 15–30 s later and syncs nothing meanwhile — a TTL check
// that goes critical stays passing in the catalog (agent/ae/ae.go: a full
// sync attempted while a registration pauses the syncer moves to the retry
// state). The ports were free when chosen, but another test's agent may
// have bound the HTTP port first and would pass those checks while this
// one exits: the agent must answer with its own node name.
func (a *Agent) waitReady(exited <-chan struct{}) error {
	deadline := time.Now().Add(30 * time.Second)
	c := &http.Client{Timeout: time.Second}
	defer c.CloseIdleConnections()
	for {
		select {
		case <-exited:
			return errors.New("exited during start")
		default:
		}
		if time.Now().After(deadline) {
			return errors.New("no leader within 30s")
		}
		if self, ok := get(c, "http://"+a.addr+"/v1/agent/self", a.token); ok {
			var v struct{ Config struct{ NodeName string } }
			if err := json.Unmarshal([]byte(self), &v); err == nil && v.Config.NodeName != a.node {
				return fmt.Errorf("the agent on %s is another one (node %q, not %s)", a.addr, v.Config.NodeName, a.node)
			}
		}
		if body, ok := get(c, "http://"+a.addr+"/v1/status/leader", a.token); ok && len(body) > 2 && body != `""` {
			if body, ok := get(c, "http://"+a.addr+"/v1/health/service/consul?passing", a.token); ok && strings.Contains(body, `"Service"`) && a.nodeSynced(c) {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// nodeSynced reports whether the agent's anti-entropy has written its
// node's tagged addresses to the catalog (the leader registers the node
// without them).
func (a *Agent) nodeSynced(c *http.Client) bool {
	body, ok := get(c, "http://"+a.addr+"/v1/catalog/node/"+a.node, a.token)
	if !ok {
		return false
	}
	var v struct {
		Node struct{ TaggedAddresses map[string]string }
	}
	return json.Unmarshal([]byte(body), &v) == nil && len(v.Node.TaggedAddresses) > 0
}

func get(c *http.Client, url, token string) (string, bool) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return "", false
	}
	if token != "" {
		req.Header.Set("X-Consul-Token", token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b)), resp.StatusCode == 200
}

// Restart kills the agent (as a crash would) and starts it again on the
// same ports. keepData false also deletes its data dir: the agent then
// comes back knowing nothing, as a plain -dev agent does.
func (a *Agent) Restart(ctx context.Context, keepData bool) error {
	a.Stop()
	return a.Start(ctx, keepData)
}

// Start starts a stopped agent again on the same ports and waits until it
// is ready, as NewAgent does. keepData false deletes its data dir first.
// Stop, then Start later, is an outage of the caller's choosing.
func (a *Agent) Start(_ context.Context, keepData bool) error {
	a.mu.Lock()
	if a.proc.Running() {
		a.mu.Unlock()
		return errors.New("consultest: agent already running")
	}
	if !keepData {
		if err := os.RemoveAll(filepath.Join(a.dir.Path, "data")); err != nil {
			a.mu.Unlock()
			return err
		}
	}
	a.mu.Unlock()
	return a.start()
}

// Stop kills the agent (SIGKILL, as a crash would), keeping its directory;
// Start or Restart starts it again. It is safe to call twice.
func (a *Agent) Stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.proc.Kill()
}

// Close stops the agent and removes its directory if NewAgent created it.
// It is safe to call twice.
func (a *Agent) Close() error {
	a.Stop()
	return a.dir.Remove()
}
