//go:build unix

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roster-go/roster/registry"
)

// trapScript is a CMD that prints "running", appends the name of every
// signal it gets to the file $1, and exits 7 on SIGTERM.
const trapScript = `out=$1
trap 'echo HUP >>"$out"' HUP
trap 'echo USR1 >>"$out"' USR1
trap 'echo USR2 >>"$out"' USR2
trap 'echo TERM >>"$out"; exit 7' TERM
echo running $$
while :; do sleep 1 & wait $!; done
`

// trapChild writes trapScript and returns its command line and the file
// it reports to.
func trapChild(t *testing.T) (cmd []string, got string) {
	dir := t.TempDir()
	script := filepath.Join(dir, "trap.sh")
	if err := os.WriteFile(script, []byte(trapScript), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{"sh", script, filepath.Join(dir, "got")}, filepath.Join(dir, "got")
}

// waitFile waits until path holds want.
func waitFile(t *testing.T, path, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(path)
		if string(b) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %q after %v, want %q", path, b, timeout, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// SIGHUP, SIGUSR1 and SIGUSR2 sent to the sidecar (kill PID, as docker
// kill --signal does) reach CMD, and the sidecar stays up and registered;
// SIGTERM still deregisters and stops CMD.
func TestSidecarForwardsReloadSignals(t *testing.T) {
	reg, url := openReg(t, "/cli-reload")
	w, err := reg.Watch(context.Background(), "reload")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	argv, got := trapChild(t)
	s := startSidecarCmd(t, nil, argv,
		"--registry", url, "--service", "reload", "--addr", "127.0.0.1:8094", "--ttl", "3s", "--drain", "0s")
	s.line(t, "running", 20*time.Second)
	waitListed(t, w, 1, 20*time.Second)

	want := ""
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2} {
		if err := s.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		name := forwardSignals[sig]
		s.logged(t, "forwarded "+name+" to the command", 10*time.Second)
		want += strings.TrimPrefix(name, "SIG") + "\n"
		waitFile(t, got, want, 10*time.Second)
	}
	if snap, err := reg.Lookup(context.Background(), "reload"); err != nil || len(snap.Instances) != 1 {
		t.Fatalf("after the reload signals: %v %v, want the instance still registered\n%s", snap.Instances, err, s.stderr.String())
	}

	s.cmd.Process.Signal(syscall.SIGTERM)
	if code := s.exitCode(t, 20*time.Second); code != 7 {
		t.Fatalf("roster exited %d, want CMD's 7\n%s", code, s.stderr.String())
	}
	waitFile(t, got, want+"TERM\n", 5*time.Second)
	waitListed(t, w, 0, 10*time.Second)
}

// SIGHUP makes roster agent read its templates again and render them,
// and it keeps serving; a template broken by the edit is logged and the
// one in use kept.
func TestAgentSIGHUPReloadsTemplates(t *testing.T) {
	reg, url := openReg(t, "/cli-agent-hup")
	if _, err := reg.Register(context.Background(), registry.Instance{ID: "a", Service: "tpl", Address: "127.0.0.1:8095"}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.tmpl"), filepath.Join(dir, "out.conf")
	write := func(text string) {
		if err := os.WriteFile(in, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`{{range service "tpl"}}v1 {{.Address}}{{end}}`)
	p := startAgent(t, "--registry", url, "--template", in+":"+out)
	waitFile(t, out, "v1 127.0.0.1:8095", 20*time.Second)

	write(`{{range service "tpl"}}v2 {{.ID}}{{end}}`)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFile(t, out, "v2 a", 10*time.Second)
	if !strings.Contains(p.stderr.String(), "roster agent: SIGHUP: reloading 1 template(s)") {
		t.Errorf("no word of the reload:\n%s", p.stderr.String())
	}

	write(`{{range service "tpl"`) // does not parse
	p.cmd.Process.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.stderr.String(), "the templates in use are kept") {
		if time.Now().After(deadline) {
			t.Fatalf("a broken template on reload: not logged:\n%s", p.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	var list struct{ Instances []registry.Instance }
	getJSON(t, p.url+"/v1/services/tpl", &list) // still serving
	if len(list.Instances) != 1 {
		t.Fatalf("after the reloads the agent lists %v", list.Instances)
	}
	if b, _ := os.ReadFile(out); string(b) != "v2 a" {
		t.Fatalf("out.conf is %q after a broken reload, want the last good render", b)
	}
}

// Without CMD, a reload signal is logged and the sidecar stays
// registered.
func TestSidecarWithoutCommandSurvivesSIGHUP(t *testing.T) {
	reg, url := openReg(t, "/cli-hup-alone")
	s := startSidecarCmd(t, nil, nil,
		"--registry", url, "--service", "alone", "--addr", "127.0.0.1:8096", "--ttl", "3s")
	s.logged(t, "registered alone-", 20*time.Second)
	s.cmd.Process.Signal(syscall.SIGHUP)
	s.logged(t, "SIGHUP: no command to forward it to", 10*time.Second)
	if snap, err := reg.Lookup(context.Background(), "alone"); err != nil || len(snap.Instances) != 1 {
		t.Fatalf("after SIGHUP: %v %v, want the instance still registered\n%s", snap.Instances, err, s.stderr.String())
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	if code := s.exitCode(t, 20*time.Second); code != 0 {
		t.Fatalf("roster exited %d after SIGTERM\n%s", code, s.stderr.String())
	}
}
