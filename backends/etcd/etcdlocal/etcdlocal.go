// Package etcdlocal runs a single-member etcd server inside the calling
// process. Call [Start], then open a registry on its [Server.URL]:
//
//	srv, err := etcdlocal.Start(ctx, etcdlocal.Config{Dir: dir})
//	...
//	defer srv.Close()
//	reg, err := registry.Open(ctx, srv.URL()) // etcd://127.0.0.1:2379
//
// It is for development and single-node local registries. "roster dev",
// "roster demo" and the examples run on it. It is not a way to run etcd
// in production, since one member has no redundancy. A production
// registry wants an etcd cluster of its own, reached with
// etcd://host1,host2,host3.
//
// Start listens on Config.Addr, 127.0.0.1:2379 by default. Port 0 picks a
// free port. The data lives in Config.Dir, so keys and leases survive a
// restart on the same directory. Without a Dir, the data lives in a
// temporary directory that Close removes.
//
// A busy address fails with [ErrAddrInUse]. A directory held by another
// server, in this process or another, fails with [ErrDirInUse]. A
// malformed address fails with registry.ErrInvalid. Start never waits for
// the other server to go away. The server logs nothing unless
// Config.Logger is set.
//
// The server has no authentication and no TLS. Bind it to loopback, the
// default, unless every host that can reach the address may read and
// write the registry.
package etcdlocal

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"go.uber.org/zap"

	"github.com/roster-go/roster/internal/servers/etcdembed"
	"github.com/roster-go/roster/registry"
)

// DefaultAddr is etcd's usual client address, on loopback.
const DefaultAddr = "127.0.0.1:2379"

var (
	// ErrAddrInUse reports that the client address is taken, most likely
	// by another etcd.
	ErrAddrInUse = errors.New("address already in use")
	// ErrDirInUse reports that another server holds the data directory.
	ErrDirInUse = errors.New("data directory in use by another server")
)

// startTimeout bounds the wait for a started member to serve: one member
// elects itself in about a second, so a minute means it never will.
const startTimeout = time.Minute

// lockName is the file in the data directory that marks it as held: etcd
// itself would block forever on the database's file lock.
const lockName = "etcdlocal.lock"

// Config describes a Server. The zero value is a server on 127.0.0.1:2379
// with throwaway data.
type Config struct {
	// Dir holds the data, kept across restarts; it is created if missing.
	// Default: a new temporary directory, removed by Close.
	Dir string
	// Addr is the client address, "ip:port" or "localhost:port" (which
	// means 127.0.0.1). Port 0 picks a free port; an empty host listens on
	// every interface. Default DefaultAddr.
	Addr string
	// Logger receives etcd's logs. Default: none.
	Logger *zap.Logger
}

// Server is a running etcd member. Close it when done.
type Server struct {
	m      *etcdembed.Member
	url    string
	dir    string
	ownDir bool
	lock   *fileutil.LockedFile

	once     sync.Once
	closeErr error
}

// Start starts the server and returns once it serves clients, or fails.
// ctx bounds the start only; a server not ready within a minute is an
// error too.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	a, err := parseAddr(cfg.Addr)
	if err != nil {
		return nil, err
	}
	s := &Server{}
	if err := s.openDir(cfg.Dir); err != nil {
		return nil, err
	}
	m, client, err := startMember(ctx, s.dir, a, cfg.Logger)
	if err != nil {
		s.releaseDir()
		return nil, err
	}
	s.m = m
	s.url = etcdembed.RegistryURL([]string{client}, false, "", "", nil)
	return s, nil
}

// URL is the registry URL that reaches the server, "etcd://ip:port",
// without options: add "?prefix=/name" to keep apart the registries of
// several projects.
func (s *Server) URL() string { return s.url }

// Dir is the data directory: Config.Dir, or the temporary one.
func (s *Server) Dir() string { return s.dir }

// Close stops the server, cutting client connections (clients see a
// server that went away), and frees the address and the data directory.
// It removes the directory if Start created it. Later calls return the
// first call's result.
func (s *Server) Close() error {
	s.once.Do(func() {
		s.m.Close()
		s.closeErr = s.releaseDir()
	})
	return s.closeErr
}

// openDir creates (or reuses) the data directory and takes its lock.
func (s *Server) openDir(dir string) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "roster-etcd-")
		if err != nil {
			return fmt.Errorf("etcdlocal: %w", err)
		}
		s.dir, s.ownDir = d, true
	} else {
		// etcd wants its data private: 0700, as it creates them itself.
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("etcdlocal: data directory: %w", err)
		}
		s.dir = dir
	}
	l, err := fileutil.TryLockFile(filepath.Join(s.dir, lockName), os.O_WRONLY|os.O_CREATE, fileutil.PrivateFileMode)
	if errors.Is(err, fileutil.ErrLocked) {
		err = ErrDirInUse
	}
	if err != nil {
		s.removeOwnDir()
		return fmt.Errorf("etcdlocal: %s: %w", s.dir, err)
	}
	s.lock = l
	return nil
}

func (s *Server) releaseDir() error {
	err := s.lock.Close() // releases the lock
	if rm := s.removeOwnDir(); rm != nil {
		err = rm
	}
	return err
}

func (s *Server) removeOwnDir() error {
	if !s.ownDir {
		return nil
	}
	return os.RemoveAll(s.dir)
}

// addr is a parsed Config.Addr.
type addr struct {
	bind string // host to listen on
	dial string // host clients dial: loopback for a wildcard bind
	port int    // 0: any free port
}

func parseAddr(s string) (addr, error) {
	if s == "" {
		s = DefaultAddr
	}
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return addr{}, fmt.Errorf("etcdlocal: %w: address %q: want ip:port", registry.ErrInvalid, s)
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return addr{}, fmt.Errorf("etcdlocal: %w: address %q: port %q is not a number from 0 to 65535", registry.ErrInvalid, s, p)
	}
	a := addr{bind: host, dial: host, port: int(port)}
	ip := net.ParseIP(host)
	switch {
	case host == "localhost":
		// etcd would listen on one of localhost's addresses and clients
		// might dial another: name the one both agree on.
		a.bind, a.dial = "127.0.0.1", "127.0.0.1"
	case host == "":
		a.bind, a.dial = "0.0.0.0", "127.0.0.1"
	case ip == nil:
		return addr{}, fmt.Errorf("etcdlocal: %w: address %q: the host must be an IP address or localhost", registry.ErrInvalid, s)
	case ip.IsUnspecified() && ip.To4() == nil:
		a.dial = "::1"
	case ip.IsUnspecified():
		a.dial = "127.0.0.1"
	}
	return a, nil
}

// startMember starts the member on a's client address and a free peer
// port, and waits until it is ready. It returns the client address to
// dial. A free port can be taken between choosing and listening: that
// case, and only that, is tried again.
func startMember(ctx context.Context, dir string, a addr, lg *zap.Logger) (*etcdembed.Member, string, error) {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var m *etcdembed.Member
		var spec etcdembed.Spec
		if spec, err = newSpec(dir, a, lg); err != nil {
			break
		}
		if m, err = etcdembed.Start(spec); err == nil {
			if err = m.WaitReady(ctx, startTimeout); err == nil {
				return m, spec.ClientURL.Host, nil
			}
			m.Close()
			break
		}
		port, busy := busyPort(err)
		if !busy {
			break
		}
		if a.port != 0 && port == a.port {
			return nil, "", fmt.Errorf("etcdlocal: %s: %w", net.JoinHostPort(a.bind, strconv.Itoa(a.port)), ErrAddrInUse)
		}
	}
	return nil, "", fmt.Errorf("etcdlocal: start: %w", err)
}

// newSpec describes the member. The peer port is never dialled (there
// are no other members) but etcd listens on it all the same: any free
// port does, even a different one on each start with the same data.
func newSpec(dir string, a addr, lg *zap.Logger) (etcdembed.Spec, error) {
	peer, err := freePort("127.0.0.1")
	if err != nil {
		return etcdembed.Spec{}, err
	}
	client := a.port
	if client == 0 {
		if client, err = freePort(a.bind); err != nil {
			return etcdembed.Spec{}, err
		}
	}
	// etcd advertises the client URL to its clients: the dialable host,
	// not a wildcard.
	listen := url.URL{Scheme: "http", Host: net.JoinHostPort(a.bind, strconv.Itoa(client))}
	return etcdembed.Spec{
		Name:            "roster",
		Dir:             dir,
		ClientURL:       url.URL{Scheme: "http", Host: net.JoinHostPort(a.dial, strconv.Itoa(client))},
		ListenClientURL: &listen,
		PeerURL:         url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(peer))},
		Token:           "roster-etcdlocal",
		Logger:          lg,
	}, nil
}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// busyPort reports whether err is a listen on a port in use, and which.
func busyPort(err error) (int, bool) {
	var op *net.OpError
	if !errors.Is(err, syscall.EADDRINUSE) || !errors.As(err, &op) {
		return 0, false
	}
	if ta, ok := op.Addr.(*net.TCPAddr); ok {
		return ta.Port, true
	}
	return 0, true
}
