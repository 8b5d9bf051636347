package chaos

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/roster-go/roster/backends/consul" // consul://
	_ "github.com/roster-go/roster/backends/etcd"   // etcd://
	_ "github.com/roster-go/roster/backends/redis"  // redis://
	"github.com/roster-go/roster/internal/loopback"
	"github.com/roster-go/roster/internal/servers/consultest"
	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/internal/servers/redistest"
)

// server is one backend's registry server, with the faults the suite
// applies to it. Registry URLs carry no options beyond the layout: the
// suite tests the defaults.
type server interface {
	// url is the registry URL the instances (and the recovery check) use.
	url() string
	// link returns the client's own registry URL, through a path that
	// cut can sever, and a function that closes that path.
	link() (url string, cut func(connected bool), closeLink func(), err error)
	// crash stops the server abruptly: SIGKILL, or for embedded etcd a
	// stop with every client connection cut first.
	crash() error
	// startEmpty starts the crashed server again with no data.
	startEmpty(ctx context.Context) error
	// restart restarts the server keeping its data.
	restart(ctx context.Context) error
}

// etcdServer is one embedded etcd member, reached through its proxy.
type etcdServer struct{ c *etcdtest.Cluster }

func startEtcd(t *testing.T) server {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := etcdtest.Start(ctx, etcdtest.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return &etcdServer{c}
}

const etcdPrefix = "/roster-chaos"

func (s *etcdServer) url() string { return s.c.URL(etcdPrefix) }

func (s *etcdServer) link() (string, func(bool), func(), error) {
	l, err := s.c.NewLink()
	if err != nil {
		return "", nil, nil, err
	}
	cut := func(ok bool) { _ = l.SetConnected(context.Background(), ok) }
	return l.URL(etcdPrefix), cut, func() { l.Close() }, nil
}

func (s *etcdServer) crash() error                         { return s.c.Kill() }
func (s *etcdServer) startEmpty(ctx context.Context) error { return s.c.Start(ctx, false) }
func (s *etcdServer) restart(ctx context.Context) error    { return s.c.Restart(ctx, true) }

// redisServer is a private redis-server, used with one layout.
type redisServer struct {
	s     *redistest.Server
	query string // "" (hash, the default) or "?layout=keys"
}

func startRedis(query string) func(t *testing.T) server {
	return func(t *testing.T) server { return &redisServer{redistest.Start(t), query} }
}

func (s *redisServer) url() string { return "redis://" + s.s.Addr() + "/0" + s.query }

func (s *redisServer) link() (string, func(bool), func(), error) {
	p, err := loopback.NewProxy(s.s.Addr())
	if err != nil {
		return "", nil, nil, err
	}
	cut := func(ok bool) { _ = p.SetConnected(context.Background(), ok) }
	return "redis://" + p.Addr() + "/0" + s.query, cut, func() { p.Close() }, nil
}

func (s *redisServer) crash() error { s.s.Kill(); return nil }

func (s *redisServer) startEmpty(context.Context) error {
	// A restart keeping data left an RDB file, which Start would load.
	if err := os.Remove(filepath.Join(s.s.Dir(), "dump.rdb")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return s.s.Start()
}

// restart is SHUTDOWN SAVE and a start loading the RDB file: Redis keeps
// data across a restart only when it saved it.
func (s *redisServer) restart(ctx context.Context) error { return s.s.Restart(ctx, true) }

// consulServer is a private `consul agent -dev`.
type consulServer struct{ a *consultest.Agent }

func startConsul(t *testing.T) server { return &consulServer{consultest.Start(t)} }

func (s *consulServer) url() string { return s.a.URL("") }

func (s *consulServer) link() (string, func(bool), func(), error) {
	p, err := loopback.NewProxy(s.a.Addr())
	if err != nil {
		return "", nil, nil, err
	}
	cut := func(ok bool) { _ = p.SetConnected(context.Background(), ok) }
	return "consul://" + p.Addr(), cut, func() { p.Close() }, nil
}

func (s *consulServer) crash() error                         { s.a.Stop(); return nil }
func (s *consulServer) startEmpty(ctx context.Context) error { return s.a.Start(ctx, false) }
func (s *consulServer) restart(ctx context.Context) error    { return s.a.Restart(ctx, true) }
