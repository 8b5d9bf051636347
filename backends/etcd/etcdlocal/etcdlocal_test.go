package etcdlocal_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	_ "github.com/roster-go/roster/backends/etcd"
	"github.com/roster-go/roster/backends/etcd/etcdlocal"
	"github.com/roster-go/roster/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start starts a server on a free port and closes it when the test ends.
func start(t *testing.T, cfg etcdlocal.Config) *etcdlocal.Server {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	srv, err := etcdlocal.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

func openRegistry(t *testing.T, u string) *registry.Registry {
	t.Helper()
	reg, err := registry.Open(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// hostOf returns the host:port of an etcd:// URL.
func hostOf(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil || p.Scheme != "etcd" || p.Host == "" || p.RawQuery != "" {
		t.Fatalf("URL %q: want etcd://ip:port (%v)", u, err)
	}
	return p.Host
}

// The URL works with registry.Open; Close stops every goroutine, frees the
// port and removes the temporary data directory.
func TestURLWorksAndCloseFreesEverything(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := t.Context()
	srv, err := etcdlocal.Start(ctx, etcdlocal.Config{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	host := hostOf(t, srv.URL())
	reg := openRegistry(t, srv.URL()+"?prefix=/t")
	if _, err := reg.Register(ctx, registry.Instance{ID: "a-1", Service: "a", Address: "10.0.0.1:80"}); err != nil {
		t.Fatal(err)
	}
	snap, err := reg.Lookup(ctx, "a")
	if err != nil || len(snap.Instances) != 1 || snap.Instances[0].Address != "10.0.0.1:80" {
		t.Fatalf("Lookup = %+v, %v", snap.Instances, err)
	}
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ln, err := net.Listen("tcp", host)
	if err != nil {
		t.Fatalf("the port is still taken after Close: %v", err)
	}
	ln.Close()
	if _, err := os.Stat(srv.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the temporary data directory %s is still there: %v", srv.Dir(), err)
	}
}

// An instance registered before a restart on the same data directory is
// there after it, although the server came back on another port.
func TestDataPersistsAcrossRestart(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "data") // created by Start
	srv := start(t, etcdlocal.Config{Dir: dir})
	if srv.Dir() != dir {
		t.Fatalf("Dir() = %q, want %q", srv.Dir(), dir)
	}
	reg := openRegistry(t, srv.URL())
	lease, err := reg.Register(ctx, registry.Instance{ID: "b-1", Service: "b", Address: "10.0.0.2:80", Version: "2"},
		registry.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lease.Abandon() // a crash: the registration stays until its TTL
	reg.Close()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "member")); err != nil {
		t.Fatalf("Close removed a given data directory: %v", err)
	}

	srv2 := start(t, etcdlocal.Config{Dir: dir})
	reg2 := openRegistry(t, srv2.URL())
	defer reg2.Close()
	snap, err := reg2.Lookup(ctx, "b")
	if err != nil || len(snap.Instances) != 1 || snap.Instances[0].ID != "b-1" || snap.Instances[0].Version != "2" {
		t.Fatalf("after a restart on the same data: %+v, %v", snap.Instances, err)
	}
}

func TestBusyAddressIsAnError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	srv, err := etcdlocal.Start(ctx, etcdlocal.Config{Addr: ln.Addr().String(), Dir: dir})
	if err == nil {
		srv.Close()
		t.Fatal("Start on a busy address succeeded")
	}
	if !errors.Is(err, etcdlocal.ErrAddrInUse) || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Fatalf("Start on a busy address: %v; want ErrAddrInUse naming %s", err, ln.Addr())
	}
	// The failed start released the data directory.
	start(t, etcdlocal.Config{Dir: dir})
}

// A second server on a held data directory fails at once: etcd itself
// would wait forever for the database's file lock.
func TestDataDirInUseIsAnError(t *testing.T) {
	dir := t.TempDir()
	start(t, etcdlocal.Config{Dir: dir})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	srv, err := etcdlocal.Start(ctx, etcdlocal.Config{Addr: "127.0.0.1:0", Dir: dir})
	if err == nil {
		srv.Close()
		t.Fatal("a second server on the same data directory started")
	}
	if !errors.Is(err, etcdlocal.ErrDirInUse) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second server on %s: %v; want ErrDirInUse naming the directory", dir, err)
	}
}

func TestInvalidAddress(t *testing.T) {
	for _, addr := range []string{"2379", "127.0.0.1:http", "127.0.0.1:70000", "example.com:2379", "127.0.0.1:-1"} {
		srv, err := etcdlocal.Start(t.Context(), etcdlocal.Config{Addr: addr})
		if err == nil {
			srv.Close()
			t.Errorf("Start(%q) succeeded", addr)
			continue
		}
		if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), addr) {
			t.Errorf("Start(%q) = %v; want registry.ErrInvalid naming the address", addr, err)
		}
	}
}

// A wildcard address listens everywhere and gives a loopback URL.
func TestWildcardAddress(t *testing.T) {
	srv := start(t, etcdlocal.Config{Addr: ":0"})
	host, _, _ := net.SplitHostPort(hostOf(t, srv.URL()))
	if host != "127.0.0.1" {
		t.Fatalf("URL %s: want a 127.0.0.1 host", srv.URL())
	}
	reg := openRegistry(t, srv.URL())
	defer reg.Close()
	if _, err := reg.Lookup(t.Context(), "nothing"); err != nil {
		t.Fatal(err)
	}
}

// Close does not wait for clients' watch streams, which never end by
// themselves (etcd alone waits 7s for them).
func TestCloseCutsOpenWatches(t *testing.T) {
	ctx := t.Context()
	core, logs := observer.New(zapcore.InfoLevel)
	srv, err := etcdlocal.Start(ctx, etcdlocal.Config{Addr: "127.0.0.1:0", Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + hostOf(t, srv.URL())}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wc := cli.Watch(wctx, "k", clientv3.WithCreatedNotify())
	if resp := <-wc; !resp.Created {
		t.Fatalf("watch not created: %v", resp.Err())
	}
	began := time.Now()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(began); el > 3*time.Second {
		t.Fatalf("Close took %v with a watch open", el)
	}
	if logs.Len() == 0 {
		t.Error("Config.Logger received no log of the server")
	}
}
