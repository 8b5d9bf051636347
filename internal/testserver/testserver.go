// Package testserver holds what the test-server packages share. Those are
// consultest, kubetest, redistest and zktest.
//
// A [Process] is one run of a server. Start it with an *exec.Cmd. Its
// output goes to a log file, and it dies with the test's process
// (childproc). Done tells that it exited. Kill ends it as a crash would,
// and Stop sends SIGTERM, then kills after a grace period. Both are safe
// to call twice, and on a Process never started. So cleanup code needs no
// state of its own.
//
// [LogTail] gives the tail of such a log, for error messages. [Binary]
// says where a server's binary is, and [Dir] is its data directory.
// [Proxies] is the MakeLinkedDriver of a conformance harness on a
// one-address server, with a loopback TCP proxy per driver, all closed
// together.
package testserver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/roster-go/roster/internal/childproc"
)

// Process is a child process with its output appended to a log file. Its
// methods are safe for concurrent use; the zero Process is not running.
type Process struct {
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// Start opens logPath for appending, points cmd's output at it and starts
// cmd. It fails if the Process already runs.
func (p *Process) Start(cmd *exec.Cmd, logPath string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s: already running", cmd.Path)
	}
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	childproc.OrphanProof(cmd)
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.cmd, p.done, p.log = cmd, done, log
	return nil
}

// Done is closed when the running process exits; nil when none runs.
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Running reports whether a process was started and not yet killed.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// Kill sends SIGKILL to the process, waits for it to exit and closes its
// log. It does nothing if no process runs.
func (p *Process) Kill() { p.end(0) }

// Stop sends SIGTERM, gives the process grace to exit, then kills it; it
// closes the log. It does nothing if no process runs.
func (p *Process) Stop(grace time.Duration) { p.end(grace) }

// end asks the process to exit (SIGTERM) when grace is positive, kills
// it if it has not by then, and waits for it.
func (p *Process) end(grace time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	exited := false
	if grace > 0 {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			exited = true
		case <-time.After(grace):
		}
	}
	if !exited {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd, p.done = nil, nil
	p.log.Close()
}

// Dir is a test server's data directory: one its caller chose, or a
// temporary one the server made and Remove deletes.
type Dir struct {
	Path string
	own  bool
}

// NewDir returns path as a Dir, or a new temporary directory named after
// pattern (as os.MkdirTemp) if path is empty.
func NewDir(path, pattern string) (Dir, error) {
	if path != "" {
		return Dir{Path: path}, nil
	}
	path, err := os.MkdirTemp("", pattern)
	return Dir{Path: path, own: true}, err
}

// Remove deletes the directory if NewDir made it; a caller's directory is
// left alone.
func (d Dir) Remove() error {
	if !d.own {
		return nil
	}
	return os.RemoveAll(d.Path)
}

// Binary says where a test server's binary is looked for: the file an
// environment variable names, then the build scripts/test.sh caches in
// ~/.cache/roster, then, if PATH is set, that name on $PATH.
type Binary struct {
	Pkg     string // the test-server package, for errors: "consultest"
	Name    string // the server, for errors: "Consul agent"
	Version string // the release scripts/test.sh builds
	Env     string // the environment variable that names the binary
	Cached  string // its file name in ~/.cache/roster: "consul-1.13.9"
	PATH    string // the name to look up on $PATH; "" for none
}

// Find returns the path of the binary, or an error saying how to get it.
func (b Binary) Find() (string, error) {
	if p := os.Getenv(b.Env); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s: %s=%s: %v; run scripts/test.sh, which builds %s %s there", b.Pkg, b.Env, p, err, b.Name, b.Version)
		}
		return p, nil
	}
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, ".cache", "roster", b.Cached)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if b.PATH != "" {
		if p, err := exec.LookPath(b.PATH); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: no %s binary: run scripts/test.sh (it builds %s %s from the Go module proxy into ~/.cache/roster/%s), or set %s",
		b.Pkg, b.Name, b.Name, b.Version, b.Cached, b.Env)
}

// URL returns base followed by ?query if query is not empty (a leading ?
// in query is dropped): a test server's registry URL with options.
func URL(base, query string) string {
	if query == "" {
		return base
	}
	return base + "?" + strings.TrimPrefix(query, "?")
}

// LogTail returns the last n bytes of the file at path (all of it if n
// is negative), empty if it cannot be read.
func LogTail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if n >= 0 && len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
