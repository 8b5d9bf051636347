package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/roster-go/roster/registry"
)

// devProc is a running "roster dev".
type devProc struct {
	cmd    *exec.Cmd
	stdout syncBuffer
	stderr syncBuffer
	exited chan struct{} // closed when cmd.Wait returns
	err    error         // cmd.Wait's result, once exited
}

// startDev starts "roster dev" with args and the user cache directory
// cache, and returns once it prints the registry URL.
func startDev(t *testing.T, cache string, args ...string) (*devProc, string) {
	t.Helper()
	p := &devProc{cmd: exec.Command(binary, append([]string{"dev"}, args...)...), exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "ROSTER_REGISTRY=", "XDG_CACHE_HOME="+cache)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
	})
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if url := registryLine(p.stdout.String()); url != "" {
			return p, url
		}
		select {
		case <-p.exited:
			t.Fatalf("roster dev exited (%v) before printing the registry URL\nstdout:\n%s\nstderr:\n%s", p.err, p.stdout.String(), p.stderr.String())
		case <-deadline.C:
			t.Fatalf("roster dev printed no registry URL within 30s\nstdout:\n%s\nstderr:\n%s", p.stdout.String(), p.stderr.String())
		case <-tick.C:
		}
	}
}

// registryLine returns the URL of a complete "export ROSTER_REGISTRY=URL"
// line of out, or "".
func registryLine(out string) string {
	for _, l := range strings.SplitAfter(out, "\n") {
		_, url, ok := strings.Cut(l, "export ROSTER_REGISTRY=")
		if ok && strings.HasSuffix(url, "\n") {
			return strings.TrimSpace(url)
		}
	}
	return ""
}

// stop sends SIGINT and asserts that the process exits 0 within bound.
func (p *devProc) stop(t *testing.T, bound time.Duration) {
	t.Helper()
	began := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
		if p.err != nil {
			t.Fatalf("roster dev exited %v on SIGINT, want 0\nstdout:\n%s\nstderr:\n%s", p.err, p.stdout.String(), p.stderr.String())
		}
	case <-time.After(bound):
		t.Fatalf("roster dev still running %v after SIGINT\nstdout:\n%s", bound, p.stdout.String())
	}
	if !strings.Contains(p.stdout.String(), "roster dev: stopped") {
		t.Errorf("no stop message:\n%s", p.stdout.String())
	}
	t.Logf("roster dev stopped %v after SIGINT", time.Since(began).Round(time.Millisecond))
}

// roster dev serves a registry at the URL it prints, keeps the data in the
// user cache directory across runs, refuses a second server on the same
// data, and stops promptly on SIGINT even with a client watching.
func TestDev(t *testing.T) {
	cache := t.TempDir()
	dev, url := startDev(t, cache, "--listen", "127.0.0.1:0")
	addr, ok := strings.CutPrefix(url, "etcd://127.0.0.1:")
	if _, err := strconv.Atoi(addr); !ok || err != nil {
		t.Fatalf("roster dev printed ROSTER_REGISTRY=%s, want etcd://127.0.0.1:<port>", url)
	}
	addr = "127.0.0.1:" + addr
	dataDir := filepath.Join(cache, "roster", "dev")
	if !strings.Contains(dev.stdout.String(), dataDir) {
		t.Errorf("roster dev does not name its data directory %s:\n%s", dataDir, dev.stdout.String())
	}

	// An instance registered through the URL is seen by "roster ls" through
	// $ROSTER_REGISTRY. Its lease is abandoned (TTL 1m): it outlives a restart.
	reg, err := registry.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	lease, err := reg.Register(t.Context(), registry.Instance{ID: "api-1", Service: "api", Address: "127.0.0.1:8081"},
		registry.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lease.Abandon()
	lsAPI(t, url)

	// A second server on the same data directory fails at once, naming it.
	_, errOut, code := run(t, 30*time.Second, "dev", "--listen", "127.0.0.1:0", "--data-dir", dataDir)
	if code != 1 || !strings.Contains(errOut, dataDir) || !strings.Contains(errOut, "in use") {
		t.Errorf("second roster dev on %s: exit %d, stderr:\n%s", dataDir, code, errOut)
	}

	// Watchers are connected while roster dev stops: Roster's, and a plain
	// etcd client's (as etcdctl watch), which etcd alone would wait 7s for.
	w, err := reg.Watch(t.Context(), "api")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Next(t.Context()); err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + addr}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if resp := <-cli.Watch(t.Context(), "k", clientv3.WithCreatedNotify()); !resp.Created {
		t.Fatalf("etcd watch not created: %v", resp.Err())
	}
	dev.stop(t, 3*time.Second)

	// Started again on the same data (on another port, as it happens).
	dev, url = startDev(t, cache, "--listen", "127.0.0.1:0")
	lsAPI(t, url)
	dev.stop(t, 3*time.Second)
}

// lsAPI asserts that "roster ls api" with ROSTER_REGISTRY=url lists api-1.
func lsAPI(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "ls", "api")
	cmd.Env = append(os.Environ(), "ROSTER_REGISTRY="+url)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "api-1") || !strings.Contains(string(out), "127.0.0.1:8081") {
		t.Fatalf("roster ls api on %s: %v\n%s", url, err, out)
	}
}

// A busy address or a bad one: exit 1 at once, with the address in the
// message, no panic.
func TestDevBadAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().String()
	for addr, want := range map[string]string{busy: "already in use", "example.com:2379": "invalid argument", "127.0.0.1": "invalid argument"} {
		out, errOut, code := run(t, 30*time.Second, "dev", "--temp", "--listen", addr)
		if code != 1 || !strings.Contains(errOut, addr) || !strings.Contains(errOut, want) {
			t.Errorf("roster dev --listen %s: exit %d, want 1 with %q and the address\nstdout:\n%s\nstderr:\n%s", addr, code, want, out, errOut)
		}
		if strings.Contains(errOut, "panic") || strings.Contains(out, "ROSTER_REGISTRY") {
			t.Errorf("roster dev --listen %s:\nstdout:\n%s\nstderr:\n%s", addr, out, errOut)
		}
	}
	// --temp and --data-dir contradict each other.
	if _, errOut, code := run(t, 30*time.Second, "dev", "--temp", "--data-dir", t.TempDir()); code != 1 || !strings.Contains(errOut, "temp") {
		t.Errorf("roster dev --temp --data-dir: exit %d\n%s", code, errOut)
	}
}
