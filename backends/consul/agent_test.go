package consul_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/roster-go/roster/internal/loopback"
)

// The tests run against a real Consul agent (v1.13.9, MPL-2.0), built from
// the Go module proxy by tools/consul. scripts/test.sh builds it once into
// $ROSTER_CONSUL_BIN (default ~/.cache/roster/consul-1.13.9).

func TestMain(m *testing.M) {
	code := m.Run()
	if code != 0 && shared.a != nil {
		// The agent's warnings and errors, for whoever reads the failure.
		shared.a.mu.Lock()
		fmt.Fprintf(os.Stderr, "--- consul agent log (tail) ---\n%s\n", shared.a.tailLocked())
		shared.a.mu.Unlock()
	}
	shared.stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// consulBin finds the agent binary: $ROSTER_CONSUL_BIN, then the cache
// path scripts/test.sh builds into, then "consul" on PATH.
func consulBin() (string, error) {
	if p := os.Getenv("ROSTER_CONSUL_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("ROSTER_CONSUL_BIN=%s: %v; run scripts/test.sh, which builds Consul 1.13.9 there", p, err)
		}
		return p, nil
	}
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, ".cache", "roster", "consul-1.13.9")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("consul"); err == nil {
		return p, nil
	}
	return "", errors.New("no Consul agent binary: run scripts/test.sh (it builds Consul 1.13.9 from the Go module proxy into ~/.cache/roster/consul-1.13.9), or set ROSTER_CONSUL_BIN")
}

// agent is one `consul agent -dev` on free loopback ports. Its data dir
// keeps the agent's own registrations across Restart(keepData=true), as a
// production agent's does; the catalog itself is in memory (-dev).
type agent struct {
	bin, dir string
	http     string // 127.0.0.1:port of the HTTP API
	ports    []int  // http, server, serf-lan, serf-wan

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

func newAgent() (*agent, error) {
	bin, err := consulBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "roster-consul-")
	if err != nil {
		return nil, err
	}
	a := &agent{bin: bin, dir: dir}
	var lastErr error
	for range 3 { // a free port may be taken by someone else before the agent binds it
		a.ports = a.ports[:0]
		for range 4 {
			p, err := loopback.FreePort()
			if err != nil {
				return nil, err
			}
			a.ports = append(a.ports, p)
		}
		a.http = "127.0.0.1:" + strconv.Itoa(a.ports[0])
		if lastErr = a.start(); lastErr == nil {
			return a, nil
		}
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

func (a *agent) start() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	log, err := os.OpenFile(filepath.Join(a.dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(a.bin, "agent", "-dev",
		"-client", "127.0.0.1", "-bind", "127.0.0.1",
		"-http-port", strconv.Itoa(a.ports[0]), "-server-port", strconv.Itoa(a.ports[1]),
		"-serf-lan-port", strconv.Itoa(a.ports[2]), "-serf-wan-port", strconv.Itoa(a.ports[3]),
		"-grpc-port", "-1", "-dns-port", "-1",
		"-data-dir", filepath.Join(a.dir, "data"),
		// Consul answers 429 past 200 concurrent HTTP connections from one
		// IP. Every client of the suite — dozens of registries, each with
		// blocking queries, and a hundred concurrent registrations — comes
		// from 127.0.0.1, which production clients (one process per host,
		// or per pod IP) do not.
		"-hcl", "limits { http_max_conns_per_client = 4096 }",
		"-log-level", "warn")
	cmd.Stdout, cmd.Stderr = log, log
	// If the test binary dies, the agent dies with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	a.cmd, a.done, a.log = cmd, done, log
	if err := a.waitReady(done); err != nil {
		a.killLocked()
		return fmt.Errorf("consul agent on %s: %w\n%s", a.http, err, a.tailLocked())
	}
	return nil
}

// waitReady polls until the agent has a leader and its own node is in the
// catalog with a passing serfHealth (the `consul` service is listed as
// passing): registrations made after that sync at once.
func (a *agent) waitReady(exited chan struct{}) error {
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
		if body, ok := get(c, "http://"+a.http+"/v1/status/leader"); ok && len(body) > 2 && body != `""` {
			if body, ok := get(c, "http://"+a.http+"/v1/health/service/consul?passing"); ok && strings.Contains(body, `"Service"`) {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func get(c *http.Client, url string) (string, bool) {
	resp, err := c.Get(url)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b)), resp.StatusCode == 200
}

func (a *agent) killLocked() {
	if a.cmd == nil {
		return
	}
	_ = a.cmd.Process.Kill()
	<-a.done
	a.cmd = nil
	a.log.Close()
}

func (a *agent) tailLocked() string {
	b, _ := os.ReadFile(filepath.Join(a.dir, "agent.log"))
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}

// Restart kills the agent (as a crash would) and starts it again on the
// same ports. keepData false also deletes its data dir: the agent then
// comes back knowing nothing, as a plain -dev agent does.
func (a *agent) Restart(_ context.Context, keepData bool) error {
	a.mu.Lock()
	a.killLocked()
	if !keepData {
		if err := os.RemoveAll(filepath.Join(a.dir, "data")); err != nil {
			a.mu.Unlock()
			return err
		}
	}
	a.mu.Unlock()
	return a.start()
}

func (a *agent) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.killLocked()
	if p := os.Getenv("ROSTER_CONSUL_LOG"); p != "" {
		// Keep the agent's log (warnings and errors) for a post-mortem.
		if b, err := os.ReadFile(filepath.Join(a.dir, "agent.log")); err == nil {
			_ = os.WriteFile(p, b, 0o644)
		}
	}
	os.RemoveAll(a.dir)
}

// sharedAgent is the one agent of the test binary, started on first use
// and killed by TestMain.
var shared sharedT

type sharedT struct {
	once sync.Once
	a    *agent
	err  error
}

func sharedAgent(tb testing.TB) *agent {
	tb.Helper()
	shared.once.Do(func() { shared.a, shared.err = newAgent() })
	if shared.err != nil {
		tb.Fatalf("cannot start the Consul agent: %v", shared.err)
	}
	return shared.a
}

func (s *sharedT) stop() {
	if s.a != nil {
		s.a.stop()
	}
}
