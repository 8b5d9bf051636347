// Package testserver holds what the test-server packages (consultest,
// redistest, zktest) share: a child Process whose output goes to a log
// file, killed with the test's process if that dies (childproc), and the
// tail of such a log for error messages.
//
// A Process is one run of a server: Start it with an *exec.Cmd, watch
// Done to learn that it exited, Kill it (as a crash would) to end it.
// Kill is safe to call twice and on a Process never started, so cleanup
// code needs no state of its own.
//
// Proxies is the OpenLinked of a conformance harness on a one-address
// server: a loopback TCP proxy per registry, all closed together.
package testserver

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"

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
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
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
func (p *Process) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	p.cmd, p.done = nil, nil
	p.log.Close()
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
