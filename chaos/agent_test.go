package chaos

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/roster-go/roster/internal/childproc"
	"github.com/roster-go/roster/internal/logbuf"
)

// The roster binary, built once per test process for the agent path.
var (
	rosterOnce sync.Once
	rosterDir  string
	rosterBin  string
	rosterErr  error
)

func buildRoster() (string, error) {
	rosterOnce.Do(func() {
		if rosterDir, rosterErr = os.MkdirTemp("", "roster-chaos"); rosterErr != nil {
			return
		}
		rosterBin = filepath.Join(rosterDir, "roster")
		out, err := exec.Command("go", "build", "-o", rosterBin, "github.com/roster-go/roster/cmd/roster").CombinedOutput()
		if err != nil {
			rosterErr = fmt.Errorf("go build cmd/roster: %v\n%s", err, out)
		}
	})
	return rosterBin, rosterErr
}

// removeRoster removes the built binary, at the end of the tests.
func removeRoster() {
	if rosterDir != "" {
		_ = os.RemoveAll(rosterDir)
	}
}

// withRosterCleanup runs the tests, then removes the roster binary.
type withRosterCleanup struct{ m interface{ Run() int } }

func (w withRosterCleanup) Run() int {
	defer removeRoster()
	return w.m.Run()
}

// agentProc is a `roster agent` process with its default options.
type agentProc struct {
	cmd     *exec.Cmd
	url     string
	logPath string
	exited  chan struct{}
}

// startAgent runs `roster agent --registry url` on a free loopback port
// and returns once it listens. It dies with the test binary.
func startAgent(url, dir string) (*agentProc, error) {
	bin, err := buildRoster()
	if err != nil {
		return nil, err
	}
	logf, err := os.CreateTemp(dir, "agent-*.log")
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "agent", "--registry", url, "--listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "ROSTER_REGISTRY=")
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	childproc.OrphanProof(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	a := &agentProc{cmd: cmd, logPath: logf.Name(), exited: make(chan struct{})}
	line, err := bufio.NewReader(out).ReadString('\n')
	go func() { _, _ = io.Copy(io.Discard, out); _ = cmd.Wait(); close(a.exited) }()
	rest, ok := strings.CutPrefix(line, "roster agent: listening on ")
	if err != nil || !ok {
		a.stop()
		return nil, fmt.Errorf("roster agent said %q (%v): %s", line, err, tail(a.logPath, 1000))
	}
	a.url, _, _ = strings.Cut(rest, ",")
	if err := a.follow(); err != nil {
		a.stop()
		return nil, err
	}
	return a, nil
}

// follow asks the agent for the service until it lists instances: the
// first request for a service starts its watch, which a PHP worker's
// 250ms agent timeout may not wait for (a cold agent, not a fault).
func (a *agentProc) follow() error {
	// No keep-alive: no idle connection outlives the test (goleak).
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Get(a.url + "/v1/services/" + service)
		if err == nil {
			var body struct{ Instances []json.RawMessage }
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if err == nil && len(body.Instances) > 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("roster agent lists no instance of %s after 30s (%v): %s", service, err, tail(a.logPath, 1000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for the exit, SIGKILL after 10s.
func (a *agentProc) stop() {
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(10 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.exited
	}
}

// phpWorker is a PHP process calling through the agent: one call per
// line written to it (testdata/worker.php).
type phpWorker struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	exited chan struct{}
	stderr *logbuf.Buffer
}

func startPHP(agentURL, dir string) (*phpWorker, error) {
	cmd := exec.Command("php", "testdata/worker.php", service)
	cmd.Env = append(os.Environ(), "ROSTER_AGENT="+agentURL, "ROSTER_CACHE_DIR="+dir)
	w := &phpWorker{cmd: cmd, exited: make(chan struct{}), stderr: &logbuf.Buffer{}}
	cmd.Stderr = w.stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	childproc.OrphanProof(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w.in, w.out = in, bufio.NewReader(out)
	go func() { _ = cmd.Wait(); close(w.exited) }()
	return w, nil
}

// call makes one call and returns the instance that answered.
func (w *phpWorker) call() (string, error) {
	if _, err := io.WriteString(w.in, "\n"); err != nil {
		return "", fmt.Errorf("php worker: %v: %s", err, w.stderr)
	}
	line, err := w.out.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("php worker: %v: %s", err, w.stderr)
	}
	line = strings.TrimSpace(line)
	if id, ok := strings.CutPrefix(line, "ok "); ok {
		return id, nil
	}
	return "", errors.New("php: " + strings.TrimPrefix(line, "failed "))
}

// close ends the worker: it finishes its call and exits at end of input.
func (w *phpWorker) close() {
	_ = w.in.Close()
	select {
	case <-w.exited:
	case <-time.After(10 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.exited
	}
}

// tail returns the end of the file at path.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
