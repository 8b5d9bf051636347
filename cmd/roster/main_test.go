package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/loopback"
	"github.com/roster-go/roster/internal/servers/consultest"
	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

var (
	binary  string // the roster binary, built once
	cluster *etcdtest.Cluster
)

func TestMain(m *testing.M) {
	if url := os.Getenv(fleetChildEnv); url != "" {
		os.Exit(fleetChild(url)) // a client process of TestPolicyFleet
	}
	code, err := setup(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func setup(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "roster-cli")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "roster")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		return 0, fmt.Errorf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err = etcdtest.Start(ctx, etcdtest.Config{})
	if err != nil {
		return 0, err
	}
	defer cluster.Close()
	return m.Run(), nil
}

// run runs the binary and returns stdout, stderr and the exit code.
func run(t *testing.T, timeout time.Duration, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), "ROSTER_REGISTRY=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("roster %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("roster %v did not finish within %v\nstdout:\n%s\nstderr:\n%s", args, timeout, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String(), code
}

// openReg opens a registry on the shared cluster under a test's own prefix.
func openReg(t *testing.T, prefix string) (*registry.Registry, string) {
	t.Helper()
	url := cluster.URL(prefix)
	reg, err := registry.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return reg, url
}

func TestDemo(t *testing.T) {
	start := time.Now()
	out, errOut, code := run(t, 60*time.Second, "demo", "--duration", "6s", "--strategy", "round_robin")
	if code != 0 {
		t.Fatalf("demo exited %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"0 failed", "killed bravo", "bravo quarantined", "bravo left the registry", "charlie left the registry", "charlie stopped", "summary",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Error("demo wrote terminal escapes to a pipe")
	}
	t.Logf("demo took %v", time.Since(start))
}

func TestLsPickWatch(t *testing.T) {
	reg, url := openReg(t, "/cli-ls")
	ctx := context.Background()
	for i, w := range []uint32{100, 300} {
		_, err := reg.Register(ctx, registry.Instance{
			ID: fmt.Sprintf("web-%d", i), Service: "web", Address: fmt.Sprintf("127.0.0.1:%d", 9000+i),
			Weight: w, Version: "2.1.0", Metadata: map[string]string{"zone": "a"},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, code := run(t, 20*time.Second, "ls", "--registry", url)
	if code != 0 || !strings.Contains(out, "web") || !strings.Contains(out, "2") {
		t.Fatalf("ls: exit %d\n%s%s", code, out, errOut)
	}
	out, _, code = run(t, 20*time.Second, "ls", "web", "--registry", url)
	if code != 0 || !strings.Contains(out, "web-0") || !strings.Contains(out, "127.0.0.1:9001") || !strings.Contains(out, "zone=a") {
		t.Fatalf("ls web: exit %d\n%s", code, out)
	}
	out, _, code = run(t, 20*time.Second, "ls", "web", "--json", "--registry", url)
	var snap registry.Snapshot
	if code != 0 || json.Unmarshal([]byte(out), &snap) != nil || len(snap.Instances) != 2 {
		t.Fatalf("ls web --json: exit %d\n%s", code, out)
	}
	out, _, code = run(t, 20*time.Second, "pick", "web", "--strategy", "weighted_round_robin", "--count", "400", "--json", "--registry", url)
	var picks []struct {
		ID    string `json:"id"`
		Picks int    `json:"picks"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &picks) != nil || len(picks) != 2 {
		t.Fatalf("pick: exit %d\n%s", code, out)
	}
	for _, p := range picks {
		want := map[string]int{"web-0": 100, "web-1": 300}[p.ID]
		if p.Picks != want {
			t.Errorf("weighted_round_robin picked %s %d times of 400, want %d", p.ID, p.Picks, want)
		}
	}
	if _, errOut, code := run(t, 20*time.Second, "pick", "web", "--strategy", "nope", "--registry", url); code == 0 || !strings.Contains(errOut, "unknown strategy") {
		t.Errorf("pick with an unknown strategy: exit %d, %s", code, errOut)
	}

	// watch: the current set, then one line per change.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(wctx, binary, "watch", "web", "--registry", url)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	next := func() string {
		if !lines.Scan() {
			t.Fatalf("watch ended: %v", lines.Err())
		}
		return lines.Text()
	}
	if l := next(); !strings.Contains(l, "2 instances") || !strings.Contains(l, "+web-0") || !strings.Contains(l, "+web-1") {
		t.Fatalf("first watch line %q", l)
	}
	l3, err := reg.Register(ctx, registry.Instance{ID: "web-2", Service: "web", Address: "127.0.0.1:9002"})
	if err != nil {
		t.Fatal(err)
	}
	if l := next(); !strings.Contains(l, "3 instances") || !strings.Contains(l, "+web-2 127.0.0.1:9002") {
		t.Fatalf("watch line after a registration %q", l)
	}
	l3.Drain(ctx)
	if l := next(); !strings.Contains(l, "~web-2 (weight=0)") {
		t.Fatalf("watch line after a drain %q", l)
	}
	l3.Deregister(ctx)
	if l := next(); !strings.Contains(l, "2 instances") || !strings.Contains(l, "-web-2") {
		t.Fatalf("watch line after a deregistration %q", l)
	}
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("watch did not end cleanly on SIGINT: %v", err)
	}
}

func TestSidecarDeregistersBeforeTheChildStops(t *testing.T) {
	reg, url := openReg(t, "/cli-sidecar")
	ctx := context.Background()
	w, err := reg.Watch(ctx, "legacy")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if s, err := w.Next(ctx); err != nil || len(s.Instances) != 0 {
		t.Fatalf("initial: %v %v", s.Instances, err)
	}
	stamp := filepath.Join(t.TempDir(), "term")
	// The child notes when it gets SIGTERM, then exits 7.
	script := fmt.Sprintf(`trap 'date +%%s%%N > %s; exit 7' TERM; while true; do sleep 0.05; done`, stamp)
	cmd := exec.Command(binary, "register", "--registry", url, "--service", "legacy", "--addr", "127.0.0.1:8088",
		"--version", "7.4", "--meta", "lang=php", "--ttl", "3s", "--drain", "300ms", "--", "sh", "-c", script)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	nctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	s, err := w.Next(nctx)
	if err != nil || len(s.Instances) != 1 || s.Instances[0].Version != "7.4" || s.Instances[0].Metadata["lang"] != "php" {
		t.Fatalf("sidecar registration: %+v %v\n%s", s.Instances, err, stderr.String())
	}
	cmd.Process.Signal(syscall.SIGTERM)
	s, err = w.Next(nctx)
	gone := time.Now()
	if err != nil || len(s.Instances) != 0 {
		t.Fatalf("after SIGTERM: %+v %v", s.Instances, err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("sidecar exit = %v, want the child's code 7\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(stamp)
	if err != nil {
		t.Fatalf("the child never got SIGTERM: %v", err)
	}
	ns, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if termAt := time.Unix(0, ns); !termAt.After(gone) {
		t.Fatalf("the child was signalled at %v, before watchers saw the deregistration at %v", termAt, gone)
	}
}

func TestSidecarWaitsForHealthCheck(t *testing.T) {
	reg, url := openReg(t, "/cli-check")
	cmd := exec.Command(binary, "register", "--registry", url, "--service", "checked", "--addr", "127.0.0.1:8089",
		"--check-http", "http://127.0.0.1:1/healthz", "--check-interval", "100ms", "--drain", "0s")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stderr.String(), "waiting for the health check") {
		if time.Now().After(deadline) {
			t.Fatalf("sidecar did not report the failing check:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s, err := reg.Lookup(context.Background(), "checked"); err != nil || len(s.Instances) != 0 {
		t.Fatalf("registered although its health check fails: %v %v", s.Instances, err)
	}
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("sidecar without a child exited %v on SIGINT, want 0\n%s", err, stderr.String())
	}
}

func TestConformanceCommand(t *testing.T) {
	_, url := openReg(t, "/cli-conformance")
	out, errOut, code := run(t, 2*time.Minute, "conformance", url, "--run", "^(RoundTripEveryField|PrefixIsolation|WatchLastInstanceRemoval|InvalidInputRejected|PartitionShorterThanTTL)$")
	if code != 0 {
		t.Fatalf("conformance on etcd: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"RoundTripEveryField", "pass", "PartitionShorterThanTTL", "not run", "harness has no Partitioner hook", "4 passed, 0 failed, 1 not run"} {
		if !strings.Contains(out, want) {
			t.Errorf("conformance output lacks %q:\n%s", want, out)
		}
	}
	// A misconfigured deployment fails with a clear reason, and never shows the password.
	out, errOut, code = run(t, time.Minute, "conformance", "etcd://admin:s3cret@127.0.0.1:1?dial_timeout=1s&request_timeout=1s")
	if code == 0 {
		t.Fatalf("conformance against nothing succeeded:\n%s", out)
	}
	if !strings.Contains(errOut, "unavailable") {
		t.Errorf("unclear failure reason: %s", errOut)
	}
	if strings.Contains(out+errOut, "s3cret") {
		t.Errorf("the password leaked: %s%s", out, errOut)
	}
}

// conformanceSubset is what the per-backend tests run: five cheap checks
// that touch every driver method (register, lookup, watch, deregister,
// validation) and one fault check, which a URL alone cannot run.
var (
	conformancePass  = []string{"RoundTripEveryField", "PrefixIsolation", "Deregister", "InvalidInputRejected", "WatchLastInstanceRemoval"}
	conformanceFault = "ExternalDeleteReregisters"
	conformanceRun   = "^(" + strings.Join(append(append([]string{}, conformancePass...), conformanceFault), "|") + ")$"
)

// checkConformance runs the subset against url and asserts that it
// passes, with the fault check reported as not run, and that none of
// secrets appears in the output.
func checkConformance(t *testing.T, url string, secrets ...string) string {
	t.Helper()
	start := time.Now()
	out, errOut, code := run(t, 2*time.Minute, "conformance", url, "--run", conformanceRun)
	if code != 0 {
		t.Fatalf("conformance: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, name := range conformancePass {
		if !regexp.MustCompile(`(?m)^` + name + `\s+pass\s`).MatchString(out) {
			t.Errorf("conformance output lacks a pass line for %s:\n%s", name, out)
		}
	}
	if !regexp.MustCompile(`(?m)^` + conformanceFault + `\s+not run\s.*harness has no ExternalDeleter hook$`).MatchString(out) {
		t.Errorf("conformance output lacks the not-run line of %s and its reason:\n%s", conformanceFault, out)
	}
	if !strings.Contains(out, "5 passed, 0 failed, 1 not run") {
		t.Errorf("conformance summary wrong:\n%s", out)
	}
	// The table is aligned although its rows are printed as checks finish.
	col := -1
	for _, l := range strings.Split(out, "\n") {
		if i := strings.Index(l, "RESULT"); strings.HasPrefix(l, "CHECK ") {
			col = i
		} else if name, _, ok := strings.Cut(l, " "); ok && slices.Contains(append(conformancePass, conformanceFault), name) {
			if i := strings.Index(l, " pass "); name != conformanceFault && i+1 != col {
				t.Errorf("RESULT column not aligned (at %d, header at %d):\n%s", i+1, col, out)
			}
		}
	}
	noSecrets(t, out+errOut, secrets...)
	t.Logf("conformance took %v:\n%s", time.Since(start).Round(time.Millisecond), out)
	return out
}

// checkMisconfigured runs the conformance command against a URL that
// cannot work and asserts a non-zero exit, a reason on stderr matching
// every one of reasons, and no secret in the output.
func checkMisconfigured(t *testing.T, url string, reasons []string, secrets ...string) {
	t.Helper()
	out, errOut, code := run(t, time.Minute, "conformance", url, "--run", conformanceRun)
	if code == 0 {
		t.Fatalf("conformance on a misconfigured registry succeeded:\n%s\n%s", out, errOut)
	}
	for _, r := range reasons {
		if !strings.Contains(errOut, r) {
			t.Errorf("conformance failure reason lacks %q:\nstdout:\n%s\nstderr:\n%s", r, out, errOut)
		}
	}
	if strings.Contains(out, "CHECK") {
		t.Errorf("conformance ran checks on an unusable registry:\n%s", out)
	}
	noSecrets(t, out+errOut, secrets...)
	t.Logf("conformance failed as expected: %s", strings.TrimSpace(errOut))
}

func noSecrets(t *testing.T, output string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(output, s) {
			t.Errorf("the secret %q leaked into the output:\n%s", s, output)
		}
	}
}

func TestConformanceCommandRedis(t *testing.T) {
	const password, wrong = "pw-R3dis-s3cret", "pw-wr0ng-guess"
	srv := redistest.Start(t, "--requirepass", password)
	for _, layout := range []string{"hash", "keys"} {
		t.Run(layout, func(t *testing.T) {
			url := fmt.Sprintf("redis://:%s@%s/0?layout=%s&prefix=cli-%s", password, srv.Addr(), layout, layout)
			out := checkConformance(t, url, password)
			if !strings.Contains(out, "redis://:xxxxx@"+srv.Addr()) {
				t.Errorf("conformance header does not name the redacted URL:\n%s", out)
			}
			// The server has no keyspace notifications: layout keys says so.
			note := "note: keyspace notifications disabled"
			if got := strings.Contains(out, note); got != (layout == "keys") {
				t.Errorf("layout %s: note %q shown = %v:\n%s", layout, note, got, out)
			}
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		checkMisconfigured(t, fmt.Sprintf("redis://:%s@%s/0", wrong, srv.Addr()),
			[]string{"is not usable", "WRONGPASS"}, password, wrong)
	})
	t.Run("no password", func(t *testing.T) {
		checkMisconfigured(t, fmt.Sprintf("redis://%s/0?layout=keys", srv.Addr()),
			[]string{"is not usable", "NOAUTH"}, password)
	})
}

func TestConformanceCommandConsul(t *testing.T) {
	// ACLs on, default allow: a valid token works, an unknown one is refused.
	const token, wrong = "6a1c2f4e-0d3b-4c9a-9e57-2b8f1d6c7a30", "0f9e8d7c-6b5a-4948-8372-6150f4e3d2c1"
	agent := consultest.Start(t, "-hcl",
		`acl { enabled = true, default_policy = "allow", tokens { initial_management = "`+token+`" } }`)
	t.Run("ok", func(t *testing.T) {
		out := checkConformance(t, agent.URL("token="+token+"&wait=5s"), token)
		if strings.Contains(out, "note:") {
			t.Errorf("notes on a plain Consul agent:\n%s", out)
		}
		if !strings.Contains(out, "token=xxxxx") {
			t.Errorf("conformance header does not show the token redacted:\n%s", out)
		}
	})
	t.Run("unknown token", func(t *testing.T) {
		checkMisconfigured(t, agent.URL("token="+wrong), []string{"is not usable", "ACL token"}, token, wrong)
	})
	t.Run("closed port", func(t *testing.T) {
		port, err := loopback.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		checkMisconfigured(t, fmt.Sprintf("consul://127.0.0.1:%d?token=%s&timeout=2s", port, token),
			[]string{"is not usable", "connection refused"}, token)
	})
}

// syncBuffer is a bytes.Buffer safe to read while a process writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
