//go:build unix

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/childproc"
	"github.com/roster-go/roster/internal/loopback"
	"github.com/roster-go/roster/registry"
)

// The sidecar tests run this test binary again as CMD, in the role named
// by $ROSTER_TEST_CHILD, before TestMain builds anything.
const childEnv = "ROSTER_TEST_CHILD"

func init() {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(child(role))
	}
}

// child runs a sidecar's CMD:
//   - "wait" prints "running <pid>" and exits 7 on SIGTERM or SIGINT;
//   - "probe" follows $PROBE_SERVICE on $PROBE_REGISTRY, prints "listed"
//     once it sees an instance, and on SIGINT or SIGTERM writes to
//     $PROBE_OUT the signal and how many instances it saw listed at that
//     moment, then exits 7.
func child(role string) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	switch role {
	case "wait":
		fmt.Printf("running %d\n", os.Getpid())
		<-sigs
		return 7
	case "probe":
		return probe(sigs)
	}
	fmt.Fprintln(os.Stderr, "unknown child role", role)
	return 2
}

func probe(sigs <-chan os.Signal) int {
	ctx := context.Background()
	reg, err := registry.Open(ctx, os.Getenv("PROBE_REGISTRY"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		return 2
	}
	w, err := reg.Watch(ctx, os.Getenv("PROBE_SERVICE"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		return 2
	}
	var (
		mu     sync.Mutex
		listed int
	)
	go func() {
		said := false
		for {
			s, err := w.Next(ctx)
			if err != nil {
				return
			}
			mu.Lock()
			listed = len(s.Instances)
			mu.Unlock()
			if listed > 0 && !said {
				fmt.Println("listed")
				said = true
			}
		}
	}()
	sig := <-sigs
	mu.Lock()
	n := listed
	mu.Unlock()
	if err := os.WriteFile(os.Getenv("PROBE_OUT"), fmt.Appendf(nil, "%v listed=%d", sig, n), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
	}
	return 7
}

// sidecarProc is a roster register process under test, leading a process
// group of its own as a shell job does.
type sidecarProc struct {
	cmd    *exec.Cmd
	lines  chan string // CMD's output, line by line
	stderr syncBuffer
	exited chan struct{}
	err    error // set when exited is closed
}

func startSidecar(t *testing.T, env []string, args ...string) *sidecarProc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return startSidecarCmd(t, env, []string{self}, args...)
}

// startSidecarCmd starts roster register args… -- cmd….
func startSidecarCmd(t *testing.T, env, cmd []string, args ...string) *sidecarProc {
	t.Helper()
	args = append(append(append([]string{"register"}, args...), "--"), cmd...)
	s := &sidecarProc{cmd: exec.Command(binary, args...), lines: make(chan string, 64), exited: make(chan struct{})}
	s.cmd.Env = append(append(os.Environ(), "ROSTER_REGISTRY="), env...)
	// CMD's output comes through a pipe of our own, which Wait does not
	// wait for: CMD may outlive roster. So may its copy of stderr, hence
	// WaitDelay.
	out, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stdout, s.cmd.Stderr = w, &s.stderr
	s.cmd.WaitDelay = 5 * time.Second
	childproc.OrphanProof(s.cmd)
	if s.cmd.SysProcAttr == nil {
		s.cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	s.cmd.SysProcAttr.Setpgid = true
	err = s.cmd.Start()
	w.Close()
	if err != nil {
		out.Close()
		t.Fatal(err)
	}
	go func() {
		defer out.Close()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
	}()
	go func() {
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		s.cmd.Process.Kill()
		<-s.exited
	})
	return s
}

// line waits for CMD to print a line starting with prefix.
func (s *sidecarProc) line(t *testing.T, prefix string, timeout time.Duration) string {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case l := <-s.lines:
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-s.exited:
			t.Fatalf("roster exited (%v) before CMD printed %q\n%s", s.err, prefix, s.stderr.String())
		case <-deadline.C:
			t.Fatalf("CMD did not print %q within %v\n%s", prefix, timeout, s.stderr.String())
		}
	}
}

// logged waits for roster to log text.
func (s *sidecarProc) logged(t *testing.T, text string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(s.stderr.String(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("roster did not log %q within %v:\n%s", text, timeout, s.stderr.String())
		}
		select {
		case <-s.exited:
			t.Fatalf("roster exited (%v) before logging %q:\n%s", s.err, text, s.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// exitCode waits for the sidecar to exit and returns its code.
func (s *sidecarProc) exitCode(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-s.exited:
	case <-time.After(timeout):
		t.Fatalf("roster did not exit within %v\n%s", timeout, s.stderr.String())
	}
	var ee *exec.ExitError
	if errors.As(s.err, &ee) {
		return ee.ExitCode()
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	return 0
}

// waitListed waits until the watcher shows n instances of the service.
func waitListed(t *testing.T, w *registry.Watcher, n int, timeout time.Duration) registry.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		s, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for %d instances: %v", n, err)
		}
		if !s.Stale && len(s.Instances) == n {
			return s
		}
	}
}

// Ctrl-C in a terminal signals the whole foreground process group. CMD
// must get SIGINT only once its instance is gone from the registry: a
// watcher inside CMD still lists it otherwise.
func TestSidecarCtrlCReachesTheChildAfterDeregistration(t *testing.T) {
	reg, url := openReg(t, "/cli-ctrl-c")
	w, err := reg.Watch(context.Background(), "legacy")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	out := filepath.Join(t.TempDir(), "probe")
	s := startSidecar(t, []string{childEnv + "=probe", "PROBE_REGISTRY=" + url, "PROBE_SERVICE=legacy", "PROBE_OUT=" + out},
		"--registry", url, "--service", "legacy", "--addr", "127.0.0.1:8090", "--ttl", "3s", "--drain", "1s")
	s.line(t, "listed", 20*time.Second) // CMD's own watcher sees the instance
	// What a terminal does on Ctrl-C.
	if err := syscall.Kill(-s.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatalf("SIGINT to roster's process group: %v\n%s", err, s.stderr.String())
	}
	if code := s.exitCode(t, 20*time.Second); code != 7 {
		t.Fatalf("roster exited %d, want CMD's 7\n%s", code, s.stderr.String())
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("CMD never got a signal: %v\n%s", err, s.stderr.String())
	}
	if string(got) != "interrupt listed=0" {
		t.Fatalf("CMD got %q: the signal reached it while its instance was still listed\n%s", got, s.stderr.String())
	}
	if snap, err := reg.Lookup(context.Background(), "legacy"); err != nil || len(snap.Instances) != 0 {
		t.Fatalf("after the sidecar exited: %v %v", snap.Instances, err)
	}
}

// With the registry unreachable at start, CMD starts and runs, and the
// sidecar registers it once the registry can be reached.
func TestSidecarRegistersOnceTheRegistryIsReachable(t *testing.T) {
	reg, _ := openReg(t, "/cli-unreachable")
	w, err := reg.Watch(context.Background(), "late")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	proxy, err := loopback.NewProxy(strings.TrimPrefix(cluster.Endpoints()[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	proxy.SetConnected(context.Background(), false)
	url := "etcd://" + proxy.Addr() + "?prefix=/cli-unreachable&dial_timeout=1s&request_timeout=1s"

	s := startSidecar(t, []string{childEnv + "=wait"},
		"--registry", url, "--service", "late", "--addr", "127.0.0.1:8091", "--ttl", "3s", "--drain", "0s")
	s.line(t, "running", 20*time.Second)
	s.logged(t, "cannot register yet", 20*time.Second) // and still runs
	if snap, err := reg.Lookup(context.Background(), "late"); err != nil || len(snap.Instances) != 0 {
		t.Fatalf("registered through a cut link? %v %v", snap.Instances, err)
	}

	proxy.SetConnected(context.Background(), true)
	snap := waitListed(t, w, 1, 30*time.Second)
	if a := snap.Instances[0].Address; a != "127.0.0.1:8091" {
		t.Fatalf("registered %s", a)
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	if code := s.exitCode(t, 20*time.Second); code != 7 {
		t.Fatalf("roster exited %d, want CMD's 7\n%s", code, s.stderr.String())
	}
	waitListed(t, w, 0, 10*time.Second)
	if !strings.Contains(s.stderr.String(), "deregistered late-") {
		t.Errorf("no word of the deregistration:\n%s", s.stderr.String())
	}
	t.Logf("roster's log:\n%s", s.stderr.String())
}

// Input that can never be registered fails at once, before CMD starts.
func TestSidecarBadInputFailsBeforeTheChildStarts(t *testing.T) {
	_, url := openReg(t, "/cli-bad")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"address", []string{"--registry", url, "--addr", "no-port"}, "address"},
		{"metadata", []string{"--registry", url, "--addr", "127.0.0.1:1", "--meta", "bad key=1"}, "metadata"},
		{"ttl", []string{"--registry", url, "--addr", "127.0.0.1:1", "--ttl", "10ms"}, "ttl"},
		{"url", []string{"--registry", "nope://somewhere", "--addr", "127.0.0.1:1"}, "no backend"},
		{"no address", []string{"--registry", url}, "--addr or --endpoint is required"},
		{"endpoint syntax", []string{"--registry", url, "--endpoint", "grpc"}, `--endpoint "grpc" is not NAME=HOST:PORT`},
		{"endpoint host", []string{"--registry", url, "--endpoint", "grpc=:9090"}, "has no host"},
		{"endpoint address", []string{"--registry", url, "--endpoint", "grpc=127.0.0.1:0"}, `--endpoint "grpc=127.0.0.1:0"`},
		{"endpoint name", []string{"--registry", url, "--addr", "127.0.0.1:1", "--endpoint", "GRPC=:2"}, "endpoints[0].name"},
		{"endpoint twice", []string{"--registry", url, "--endpoint", "a=127.0.0.1:1", "--endpoint", "a=:2"}, "endpoints[1].name"},
		{"endpoint protocol", []string{"--registry", url, "--endpoint", "a=127.0.0.1:1/H2"}, "endpoints[0].protocol"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "started")
			args := append(append([]string{"register", "--service", "svc"}, tc.args...), "--", "sh", "-c", "touch "+marker)
			_, errOut, code := run(t, 20*time.Second, args...)
			if code != 1 || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q: want 1 and a reason naming %q", code, errOut, tc.want)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Error("CMD was started")
			}
		})
	}
}

// alive reports whether pid runs (a zombie waiting for its new parent to
// reap it does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state …: the state follows the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// A second signal cuts the drain short.
func TestSidecarSecondSignalCutsTheDrain(t *testing.T) {
	_, url := openReg(t, "/cli-impatient")
	s := startSidecar(t, []string{childEnv + "=wait"},
		"--registry", url, "--service", "impatient", "--addr", "127.0.0.1:8093", "--ttl", "3s", "--drain", "10m")
	s.line(t, "running", 20*time.Second)
	s.logged(t, "registered impatient-", 20*time.Second)
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGINT)
	s.logged(t, "draining for 10m0s before forwarding SIGINT", 20*time.Second) // not "interrupt"
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGINT)
	if code := s.exitCode(t, 20*time.Second); code != 7 {
		t.Fatalf("roster exited %d, want CMD's 7\n%s", code, s.stderr.String())
	}
}

// --weight 0 starts the instance drained (registered, weight 0), and the
// address is stored in its canonical form, the one other clients compare.
func TestSidecarWeightZeroStartsDrained(t *testing.T) {
	reg, url := openReg(t, "/cli-drained")
	w, err := reg.Watch(context.Background(), "drained")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s := startSidecar(t, []string{childEnv + "=wait"},
		"--registry", url, "--service", "drained", "--addr", "LOCALHOST:8092", "--weight", "0", "--ttl", "3s", "--drain", "0s")
	s.line(t, "running", 20*time.Second)
	snap := waitListed(t, w, 1, 20*time.Second)
	if in := snap.Instances[0]; in.Weight != 0 || in.Address != "localhost:8092" {
		t.Fatalf("registered weight %d at %s, want weight 0 at localhost:8092", in.Weight, in.Address)
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	if code := s.exitCode(t, 20*time.Second); code != 7 {
		t.Fatalf("roster exited %d, want CMD's 7\n%s", code, s.stderr.String())
	}
}
