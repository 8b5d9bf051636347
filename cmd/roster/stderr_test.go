package main

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/servers/kubetest"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/internal/servers/zktest"
	"github.com/roster-go/roster/registry"
)

// cliSecret is the password or token of every URL below.
const cliSecret = "Hunter2Sekr3t"

// runFor runs the binary for d at most, then interrupts it (Ctrl-C) and
// returns its stdout and stderr.
func runFor(t *testing.T, d time.Duration, args ...string) (string, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "ROSTER_REGISTRY=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatalf("roster %v did not stop on SIGINT", args)
		}
	}
	return stdout.String(), stderr.String()
}

// deadServers is a URL of every scheme naming a server that does not
// answer (127.0.0.1:1), with the secret wherever the scheme takes one.
func deadServers(t *testing.T) map[string]string {
	kube := filepath.Join(t.TempDir(), "kubeconfig")
	conf := "apiVersion: v1\nkind: Config\nclusters:\n- name: dead\n  cluster: {server: \"https://127.0.0.1:1\", insecure-skip-tls-verify: true}\n" +
		"users:\n- name: u\n  user: {token: " + cliSecret + "}\ncontexts:\n- name: dead\n  context: {cluster: dead, user: u, namespace: shop}\ncurrent-context: dead\n"
	if err := os.WriteFile(kube, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	pw := ":" + cliSecret + "@127.0.0.1:1"
	redis := "redis://" + pw + "?dial_timeout=300ms"
	zk := "zk://u" + pw + "?request_timeout=300ms"
	return map[string]string{
		"redis":          redis,
		"rediss":         "rediss://" + pw + "?dial_timeout=300ms",
		"redis+sentinel": "redis+sentinel://" + pw + "?master=m&sentinel_password=" + cliSecret + "&dial_timeout=300ms",
		"redis+cluster":  "redis+cluster://" + pw + "?dial_timeout=300ms",
		"consul":         "consul://127.0.0.1:1?token=" + cliSecret + "&timeout=300ms",
		"consuls":        "consuls://127.0.0.1:1?token=" + cliSecret + "&timeout=300ms",
		"etcd":           "etcd://127.0.0.1:1?dial_timeout=300ms&request_timeout=300ms",
		"etcds":          "etcds://127.0.0.1:1?dial_timeout=300ms&request_timeout=300ms",
		"zk":             zk,
		"k8s":            "k8s://?kubeconfig=" + url.QueryEscape(kube) + "&request_timeout=300ms",
		"dns+srv":        "dns+srv://127.0.0.1:1/{service}.example?timeout=300ms",
		"dual":           "dual://?old=" + url.QueryEscape(redis) + "&new=" + url.QueryEscape(zk),
	}
}

// lines splits output into its lines (none for no output).
func lines(s string) []string {
	if s = strings.TrimRight(s, "\n"); s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// onlyRoster fails unless every line of stderr is roster's own ("roster:
// …"): no library log line, and no secret anywhere.
func onlyRoster(t *testing.T, what, stdout, stderr string) {
	t.Helper()
	for _, l := range lines(stderr) {
		if !strings.HasPrefix(l, "roster: ") {
			t.Errorf("%s: a line on stderr not from roster: %q", what, l)
		}
	}
	if strings.Contains(stdout+stderr, cliSecret) {
		t.Errorf("%s: the secret is printed:\nstdout:\n%s\nstderr:\n%s", what, stdout, stderr)
	}
}

// For every scheme pointed at a dead server, ls prints one error line on
// stderr, watch prints its stale state on stdout and nothing on stderr,
// register prints only its own retry lines; no library log line, no
// secret.
func TestDeadServerOneCleanError(t *testing.T) {
	for scheme, u := range deadServers(t) {
		t.Run(scheme, func(t *testing.T) {
			t.Parallel()
			out, errOut, code := run(t, 30*time.Second, "ls", "--registry", u)
			onlyRoster(t, "ls", out, errOut)
			if code != 1 || len(lines(errOut)) != 1 || out != "" {
				t.Errorf("ls: exit %d, stdout %q, stderr %q: want 1, nothing, one line", code, out, errOut)
			}
			out, errOut = runFor(t, 3*time.Second, "watch", "s", "--registry", u)
			onlyRoster(t, "watch", out, errOut)
			if len(lines(errOut)) != 0 || !strings.Contains(out, "stale (") {
				t.Errorf("watch: stdout %q, stderr %q: want the stale state on stdout, nothing on stderr", out, errOut)
			}
			out, errOut = runFor(t, 30*time.Second, "register", "--registry", u, "--service", "s", "--addr", "127.0.0.1:9", "--", "sleep", "2")
			onlyRoster(t, "register", out, errOut)
			if len(lines(errOut)) == 0 {
				t.Errorf("register: nothing on stderr: want the failed attempts")
			}
			if scheme == "dns+srv" && len(lines(errOut)) != 1 {
				t.Errorf("register on a read-only backend: stderr %q: want one line", errOut)
			}
			if strings.Contains(errOut, "cannot register yet") && !strings.Contains(errOut, "(the command runs meanwhile)") {
				t.Errorf("register with a command: stderr %q: want the retries to say the command runs", errOut)
			}
			_, errOut = runFor(t, 2*time.Second, "register", "--registry", u, "--service", "s", "--addr", "127.0.0.1:9")
			if strings.Contains(errOut, "the command runs") {
				t.Errorf("register without a command: stderr %q speaks of a command", errOut)
			}
		})
	}
}

// Redis with a wrong password: ls prints one line, WRONGPASS, no secret
// and no go-redis log line.
func TestWrongPasswordOneCleanError(t *testing.T) {
	const password = "pw-R3dis-" + cliSecret
	srv := redistest.Start(t, "--requirepass", password)
	u := fmt.Sprintf("redis://:%s@%s/0", "wrong-"+cliSecret, srv.Addr())
	out, errOut, code := run(t, 30*time.Second, "ls", "--registry", u)
	onlyRoster(t, "ls", out, errOut)
	if code != 1 || len(lines(errOut)) != 1 || !strings.Contains(errOut, "WRONGPASS") {
		t.Errorf("ls: exit %d, stderr %q: want 1 and one line saying WRONGPASS", code, errOut)
	}
}

// A mistyped URL of every scheme (the "//" forgotten, no host after the
// credentials) is one line on stderr, naming the problem, without the
// secret.
func TestMistypedURLOneCleanError(t *testing.T) {
	for _, scheme := range []string{"redis", "rediss", "redis+sentinel", "redis+cluster", "consul", "consuls",
		"etcd", "etcds", "zk", "k8s", "dns+srv", "dual", "mem"} {
		for _, u := range []string{
			scheme + ":127.0.0.1:1?token=" + cliSecret,
			scheme + "://user:" + cliSecret + "@",
		} {
			out, errOut, code := run(t, 30*time.Second, "ls", "--registry", u)
			onlyRoster(t, u, out, errOut)
			if code != 1 || len(lines(errOut)) != 1 || !strings.Contains(errOut, "registry: invalid argument") {
				t.Errorf("ls --registry %s: exit %d, stderr %q: want 1 and one line saying invalid argument", registry.Redact(u), code, errOut)
			}
		}
	}
}

// Live servers refusing the credentials: ZooKeeper with a wrong digest
// password on a root its owner protects, the Kubernetes apiserver with a
// wrong token. The command prints one line, no secret, no library log
// line.
func TestWrongCredentialsOneCleanError(t *testing.T) {
	t.Run("zk", func(t *testing.T) {
		t.Parallel()
		srv := zktest.Start(t)
		owner, err := registry.Open(t.Context(), "zk://app:right-"+cliSecret+"@"+srv.Addr()+"/cli-acl")
		if err != nil {
			t.Fatal(err)
		}
		defer owner.Close()
		if _, err := owner.Register(t.Context(), registry.Instance{Service: "s", Address: "127.0.0.1:9"}); err != nil {
			t.Fatal(err)
		}
		// Reads are open to all (the driver's ACL): a write is refused.
		u := "zk://app:wrong-" + cliSecret + "@" + srv.Addr() + "/cli-acl?request_timeout=2s"
		out, errOut, code := run(t, 30*time.Second, "register", "--registry", u, "--service", "s", "--addr", "127.0.0.1:10", "--", "sleep", "5")
		onlyRoster(t, "register", out, errOut)
		if code != 1 || len(lines(errOut)) != 1 || !strings.Contains(errOut, "registry: invalid argument") {
			t.Errorf("register: exit %d, stderr %q: want 1 and one line saying invalid argument", code, errOut)
		}
	})
	t.Run("k8s", func(t *testing.T) {
		t.Parallel()
		srv, err := kubetest.Start(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		good, err := srv.Kubeconfig(srv.Addr(), "default")
		if err != nil {
			t.Fatal(err)
		}
		conf, err := os.ReadFile(good)
		if err != nil {
			t.Fatal(err)
		}
		bad := filepath.Join(t.TempDir(), "kubeconfig")
		if err := os.WriteFile(bad, bytes.ReplaceAll(conf, []byte(kubetest.Token), []byte("wrong-"+cliSecret)), 0o600); err != nil {
			t.Fatal(err)
		}
		u := "k8s://?kubeconfig=" + url.QueryEscape(bad) + "&request_timeout=2s"
		out, errOut, code := run(t, 30*time.Second, "ls", "--registry", u)
		onlyRoster(t, "ls", out, errOut)
		if code != 1 || len(lines(errOut)) != 1 || !strings.Contains(errOut, "Unauthorized") {
			t.Errorf("ls: exit %d, stderr %q: want 1 and one line saying Unauthorized", code, errOut)
		}
	})
}
