package chaos

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	instanceid "github.com/roster-go/roster/internal/backend"

	"github.com/roster-go/roster/internal/childproc"
	"github.com/roster-go/roster/registry"
)

// The environment of an instance process: the test binary, re-executed,
// runs an instance instead of the tests when envInstance is set.
const (
	envInstance = "ROSTER_CHAOS_INSTANCE"
	envURL      = "ROSTER_CHAOS_URL"
)

// runInstance is the body of an instance process: an HTTP server on a free
// loopback port that answers every request with its instance ID, and on
// the same port a gRPC server (the health service, the ID in the answer's
// header),
// registered through registry.Open for as long as it runs. On SIGTERM it
// stops in the graceful order: deregister, drain, stop the server. It
// prints "ready <id> <addr>" on stdout once registered and logs to stderr.
func runInstance() int {
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Print(err)
		return 1
	}
	addr := ln.Addr().String()
	id := instanceid.NewID(service, addr)
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(id)) }),
		ReadHeaderTimeout: 10 * time.Second,
	}
	gs := newGRPCServer(id)
	httpLn, grpcLn := splitHTTP2(ln)
	go func() { _ = srv.Serve(httpLn) }()
	go func() { _ = gs.Serve(grpcLn) }()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg, err := registry.Open(ctx, os.Getenv(envURL))
	if err != nil {
		log.Print(err)
		return 1
	}
	defer reg.Close()
	lease, err := reg.Register(ctx, registry.Instance{ID: id, Service: service, Address: addr},
		registry.WithTTL(ttl),
		// The lease's state changes, timestamped, are what explains a slow
		// recovery after a registry restart.
		registry.WithStateHook(func(s registry.LeaseState, err error) { log.Printf("lease %v (%v)", s, err) }))
	if err != nil {
		log.Print(err)
		return 1
	}
	fmt.Printf("ready %s %s\n", id, addr)

	<-term
	log.Print("SIGTERM: deregister, drain, stop")
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := lease.Deregister(ctx); err != nil {
		log.Print(err)
		return 1
	}
	// Callers that picked this instance before the deregistration reached
	// them still get an answer; then the server stops, finishing requests
	// in flight.
	time.Sleep(drainWindow)
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	if err := srv.Shutdown(ctx); err != nil {
		log.Print(err)
		return 1
	}
	<-stopped
	log.Print("stopped")
	return 0
}

// instance is the test's handle on an instance process.
type instance struct {
	id, addr string
	cmd      *exec.Cmd
	logPath  string
	exited   chan struct{} // closed when the process has exited
	err      error         // cmd.Wait's result, once exited is closed
}

// startInstance starts an instance process registering through url and
// waits until it is registered. The process dies with the test binary.
func startInstance(url, dir string) (*instance, error) {
	logf, err := os.CreateTemp(dir, "instance-*.log")
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	ready := &firstLine{line: make(chan string, 1)}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envInstance+"=1", envURL+"="+url)
	cmd.Stdout, cmd.Stderr = ready, logf
	childproc.OrphanProof(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	in := &instance{cmd: cmd, logPath: logf.Name(), exited: make(chan struct{})}
	go func() { in.err = cmd.Wait(); close(in.exited) }()

	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case line := <-ready.line:
		if _, err := fmt.Sscanf(line, "ready %s %s", &in.id, &in.addr); err != nil {
			in.kill()
			return nil, fmt.Errorf("instance said %q: %v", line, err)
		}
		return in, nil
	case <-in.exited:
		return nil, fmt.Errorf("instance exited before registering (%v): %s", in.err, in.logTail(1000))
	case <-timer.C:
		in.kill()
		return nil, fmt.Errorf("instance not registered within 30s: %s", in.logTail(1000))
	}
}

// kill sends SIGKILL and waits for the process to exit.
func (in *instance) kill() {
	_ = in.cmd.Process.Signal(syscall.SIGKILL)
	<-in.exited
}

// terminate sends SIGTERM and waits for a clean exit.
func (in *instance) terminate(timeout time.Duration) error {
	if err := in.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-in.exited:
		if in.err != nil {
			return fmt.Errorf("instance %s exited: %v: %s", in.id, in.err, in.logTail(1000))
		}
		return nil
	case <-t.C:
		in.kill()
		return fmt.Errorf("instance %s still running %v after SIGTERM: %s", in.id, timeout, in.logTail(1000))
	}
}

// logTail returns the end of the instance's log.
func (in *instance) logTail(n int) string {
	b, _ := os.ReadFile(in.logPath)
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return strings.TrimSpace(string(b))
}

// firstLine is an io.Writer that hands the first line written to it to
// line, and discards everything.
type firstLine struct {
	mu   sync.Mutex
	buf  []byte
	done bool
	line chan string
}

func (f *firstLine) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return len(p), nil
	}
	f.buf = append(f.buf, p...)
	if i := bytes.IndexByte(f.buf, '\n'); i >= 0 {
		f.line <- string(f.buf[:i])
		f.done, f.buf = true, nil
	}
	return len(p), nil
}
