// Package redistest starts private redis-server processes for tests. Call
// [Start] for one server, then run the conformance suite on it with its
// [Server.Harness]:
//
//	conformance.Run(t, redistest.Start(t).Harness(t, "layout=keys", cfg))
//
// [StartTLS] serves TLS, and [StartACL] requires a user. [StartCluster]
// starts a Redis Cluster and [StartFailover] a Sentinel failover group.
// Each deployment gives its own Harness, so a conformance test is one line
// per topology.
//
// Each server runs on a free loopback port, in a temporary directory, and
// stops at test cleanup. The binary is $ROSTER_REDIS_SERVER if set, else
// redis-server on PATH. On Debian, apt-get install -y redis-server, as
// scripts/test.sh does. It never skips. A missing redis-server fails the
// test with a message saying how to install it.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/internal/loopback"
	"github.com/roster-go/roster/internal/testserver"
)

// envServer names the environment variable that points at redis-server.
const envServer = "ROSTER_REDIS_SERVER"

// findServer returns the path of the redis-server binary.
func findServer() (string, error) {
	if p := os.Getenv(envServer); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("redistest: %s=%s: %w", envServer, p, err)
		}
		return p, nil
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redistest: redis-server not found: set %s or install it (apt-get install -y redis-server; scripts/test.sh does this): %w", envServer, err)
	}
	return p, nil
}

// findCLI returns redis-cli, next to redis-server or on PATH.
func findCLI(server string) (string, error) {
	if p := filepath.Join(filepath.Dir(server), "redis-cli"); fileExists(p) {
		return p, nil
	}
	p, err := exec.LookPath("redis-cli")
	if err != nil {
		return "", fmt.Errorf("redistest: redis-cli not found (it ships with redis-server): %w", err)
	}
	return p, nil
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// Server is one private redis-server process.
type Server struct {
	bin     string
	dir     string
	port    int
	pre     []string // arguments before the options (a config file)
	args    []string
	pass    string // the default user's password (--requirepass), if any
	tls     *TLSFiles
	tlsPort int

	proc testserver.Process
}

// Start starts a redis-server with the extra command-line arguments (for
// example "--notify-keyspace-events", "Ex") and stops it when the test
// ends. With "--requirepass", pw among them, the Server's own clients
// (Client, readiness, SHUTDOWN) authenticate with pw. Persistence is off
// except for the RDB file Restart(keepData=true) writes on shutdown.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	s, err := NewServer(t.TempDir(), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	return s
}

// NewServer starts a redis-server in dir (for benchmarks and programs
// without a testing.TB). The caller stops it with Stop.
func NewServer(dir string, args ...string) (*Server, error) {
	bin, err := findServer()
	if err != nil {
		return nil, err
	}
	return newServer(&Server{bin: bin, dir: dir, args: args})
}

func newServer(s *Server) (*Server, error) {
	for i, a := range s.args {
		if a == "--requirepass" && i+1 < len(s.args) {
			s.pass = s.args[i+1]
		}
	}
	var err error
	// A port is free when we ask; another process may take it before the
	// server binds, so retry a few times on a bind failure.
	for range 5 {
		if s.port, err = loopback.FreePort(); err != nil {
			return nil, err
		}
		if s.tls != nil {
			if s.tlsPort, err = loopback.FreePort(); err != nil {
				return nil, err
			}
		}
		if err = s.start(); err == nil {
			return s, nil
		}
	}
	return nil, err
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port is the server's TCP port.
func (s *Server) Port() int { return s.port }

// Dir is the server's working directory (RDB file, log, cluster config).
func (s *Server) Dir() string { return s.dir }

// Client returns a new client to the server, authenticated if the server
// requires a password; the caller closes it.
func (s *Server) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.pass, MaxRetries: -1})
}

func (s *Server) start() error {
	args := append(append(append([]string{}, s.pre...),
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--dbfilename", "dump.rdb", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--protected-mode", "no", "--logfile", "",
	), s.args...)
	if f := s.tls; f != nil {
		args = append(args, "--tls-port", strconv.Itoa(s.tlsPort), "--tls-cert-file", f.CertFile,
			"--tls-key-file", f.KeyFile, "--tls-ca-cert-file", f.CAFile, "--tls-auth-clients", "yes")
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	logPath := filepath.Join(s.dir, "redis.log")
	if err := s.proc.Start(cmd, logPath); err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	if err := waitReady(s.Addr(), s.pass, cmd.Process.Pid, s.proc.Done()); err != nil {
		s.proc.Kill()
		return fmt.Errorf("redistest: %s on port %d: %w (log: %s)", s.bin, s.port, err,
			strings.TrimSpace(testserver.LogTail(logPath, 800)))
	}
	return nil
}

// waitReady polls until the server answers as process pid, or 10s pass.
// The port was free when it was chosen, but another test's server may
// have bound it first: then this one exits with a bind error while the
// other answers PING, and a Sentinel group was seen to monitor a Cluster
// node that way (every command MOVED). The process ID tells them apart.
func waitReady(addr, pass string, pid int, exited <-chan struct{}) error {
	c := redis.NewClient(&redis.Options{Addr: addr, Password: pass, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		info, err := c.Info(ctx, "server").Result()
		cancel()
		if err == nil {
			if got := infoField(info, "process_id"); got != strconv.Itoa(pid) {
				return fmt.Errorf("%w: the server on the port is process %s, not ours (%d)", errPortTaken, got, pid)
			}
			return nil
		}
		select {
		case <-exited:
			return errors.New("exited before answering")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer within 10s: %w", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// errPortTaken: another server answered on the port chosen.
var errPortTaken = errors.New("port taken")

// infoField returns the value of one "name:value" line of INFO.
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// shutdown stops the process: SHUTDOWN SAVE or NOSAVE, then a kill if it
// has not exited within 5s.
func (s *Server) shutdown(save bool) error {
	exited := s.proc.Done()
	if exited == nil {
		return nil
	}
	c := s.Client()
	mode := "NOSAVE"
	if save {
		mode = "SAVE"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	// SHUTDOWN closes the connection instead of replying: the error is expected.
	_ = c.Do(ctx, "SHUTDOWN", mode).Err()
	cancel()
	c.Close()
	var err error
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		if save {
			err = errors.New("redistest: redis-server did not exit after SHUTDOWN SAVE; killed")
		}
	}
	s.proc.Kill() // after an exit, only closes the log
	return err
}

// Stop stops the server without saving. It is safe to call twice.
func (s *Server) Stop() { _ = s.shutdown(false) }

// Kill stops the server abruptly (SIGKILL), as a crash would.
func (s *Server) Kill() { s.proc.Kill() }

// Restart stops the server and starts it again on the same port. With
// keepData it saves an RDB snapshot on shutdown and loads it on start (keys
// keep their absolute expiry times); without, it comes back empty.
func (s *Server) Restart(_ context.Context, keepData bool) error {
	if err := s.shutdown(keepData); err != nil {
		return err
	}
	if !keepData {
		if err := os.Remove(filepath.Join(s.dir, "dump.rdb")); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return s.Start()
}

// Start starts a stopped server again on the same port and directory.
func (s *Server) Start() error {
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The port may still be held for a moment after the old process exits.
		if err = s.start(); err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// FlushAll deletes every key in every database (the conformance wipe).
func (s *Server) FlushAll(ctx context.Context) error {
	c := s.Client()
	defer c.Close()
	return c.FlushAll(ctx).Err()
}
