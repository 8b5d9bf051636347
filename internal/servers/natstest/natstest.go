// Package natstest runs a real NATS server with JetStream in-process
// (github.com/nats-io/nats-server/v2/server), on a free loopback port,
// its store in a temporary directory. The tests of backends/nats run on
// it.
//
// Start one for a test and open registries on its URL:
//
//	srv := natstest.Start(t)
//	r, err := registry.Open(ctx, srv.URL("bucket=orders"))
//
// A Server offers the faults a registry must survive: Restart, with or
// without the data, and Wipe, which deletes every bucket while it runs.
// Harness returns the conformance.Harness on it, with a TCP proxy per
// partitioned client.
package natstest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roster-go/roster/internal/loopback"
	"github.com/roster-go/roster/internal/testserver"
)

// Config describes a Server. The zero Config is an open server.
type Config struct {
	// User and Password, when set, are the only login the server accepts.
	User, Password string
	// Token, when set, is the only token the server accepts.
	Token string
}

// Server is a running NATS server. Its methods are safe for concurrent
// use, but faults are applied one at a time.
type Server struct {
	cfg     Config
	dir     testserver.Dir
	addr    string // 127.0.0.1:port, kept across restarts
	proxies testserver.Proxies

	mu  sync.Mutex
	srv *server.Server
}

// Start starts a server with the zero Config, shut down when t ends.
func Start(t testing.TB) *Server { return StartConfig(t, Config{}) }

// StartConfig starts a server as cfg describes, shut down when t ends.
func StartConfig(t testing.TB, cfg Config) *Server {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// New starts a server; Close shuts it down.
func New(cfg Config) (*Server, error) {
	dir, err := testserver.NewDir("", "roster-natstest-")
	if err != nil {
		return nil, fmt.Errorf("natstest: %w", err)
	}
	s := &Server{cfg: cfg, dir: dir}
	// A free port can be taken between FreeAddr and Listen: try again then.
	for range 3 {
		if s.addr, err = loopback.FreeAddr(); err != nil {
			break
		}
		if err = s.start(); err == nil {
			return s, nil
		}
	}
	dir.Remove()
	return nil, err
}

func (s *Server) start() error {
	_, port, _ := net.SplitHostPort(s.addr)
	p, _ := strconv.Atoi(port)
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: p, JetStream: true, StoreDir: s.dir.Path,
		NoLog: true, NoSigs: true,
		Username: s.cfg.User, Password: s.cfg.Password, Authorization: s.cfg.Token,
	})
	if err != nil {
		return fmt.Errorf("natstest: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return fmt.Errorf("natstest: server on %s not ready within 10s", s.addr)
	}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	return nil
}

func (s *Server) stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.addr }

// URL is the nats:// URL of the server with its login and options
// ("bucket=orders").
func (s *Server) URL(options ...string) string { return s.urlAt(s.addr, options...) }

func (s *Server) urlAt(addr string, options ...string) string {
	u := url.URL{Scheme: "nats", Host: addr}
	if s.cfg.User != "" {
		u.User = url.UserPassword(s.cfg.User, s.cfg.Password)
	}
	if s.cfg.Token != "" {
		options = append(options, "token="+url.QueryEscape(s.cfg.Token))
	}
	u.RawQuery = strings.Join(options, "&")
	return u.String()
}

// Client connects a client of its own, as an operator's tool would.
func (s *Server) Client() (*natsio.Conn, error) {
	opts := []natsio.Option{natsio.Timeout(5 * time.Second)}
	if s.cfg.Token != "" {
		opts = append(opts, natsio.Token(s.cfg.Token))
	}
	if s.cfg.User != "" {
		opts = append(opts, natsio.UserInfo(s.cfg.User, s.cfg.Password))
	}
	return natsio.Connect("nats://"+s.addr, opts...)
}

// Restart stops the server (clients see their connections drop) and
// starts it again on the same port; with keepData false it comes back
// empty.
func (s *Server) Restart(_ context.Context, keepData bool) error {
	s.stop()
	if !keepData {
		if err := os.RemoveAll(s.dir.Path); err != nil {
			return fmt.Errorf("natstest: %w", err)
		}
	}
	return s.start()
}

// Wipe deletes every stream (every bucket) while the server runs.
func (s *Server) Wipe(ctx context.Context) error {
	nc, err := s.Client()
	if err != nil {
		return fmt.Errorf("natstest: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("natstest: %w", err)
	}
	names := js.StreamNames(ctx)
	var all []string
	for n := range names.Name() {
		all = append(all, n)
	}
	if err := names.Err(); err != nil {
		return fmt.Errorf("natstest: list streams: %w", err)
	}
	for _, n := range all {
		if err := js.DeleteStream(ctx, n); err != nil {
			return fmt.Errorf("natstest: delete stream %s: %w", n, err)
		}
	}
	return nil
}

// Close shuts the server down and removes its store.
func (s *Server) Close() {
	s.proxies.Close()
	s.stop()
	s.dir.Remove()
}
