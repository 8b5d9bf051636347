package etcd_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/roster-go/roster/backends/etcd"
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// authConfig has two users: "roster" with the documented role (readwrite
// on the prefix and nothing else) and "reader", whose role may only read.
var authConfig = etcdtest.Auth{RootPassword: "root-pw", Users: []etcdtest.User{
	{Name: "roster", Password: "roster-pw", Prefix: etcdtest.HarnessPrefix + "/"},
	{Name: "reader", Password: "reader-pw", Prefix: etcdtest.HarnessPrefix + "/", ReadOnly: true},
	{Name: "elsewhere", Password: "elsewhere-pw", Prefix: "/other/"},
}}

// A user whose role holds only the prefix's key range passes the suite.
func TestConformanceLeastPrivilege(t *testing.T) {
	conformance.Run(t, etcdtest.NewHarnessAs(t, etcdtest.Config{Auth: &authConfig}, "roster", "roster-pw"))
}

// A role without write, or without the prefix's range, fails the first
// call with ErrInvalid saying permission denied: no retry grants it.
func TestRoleWithoutThePrefix(t *testing.T) {
	cl := startCluster(t, etcdtest.Config{Auth: &authConfig})
	ctx := t.Context()
	for _, u := range []struct{ user, pass string }{{"reader", "reader-pw"}, {"elsewhere", "elsewhere-pw"}} {
		r, err := registry.Open(ctx, cl.URL(etcdtest.HarnessPrefix, "username="+u.user, "password="+u.pass))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		_, err = r.Register(ctx, registry.Instance{Service: "svc", Address: "127.0.0.1:80"})
		if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("Register as %s = %v, want ErrInvalid saying permission denied", u.user, err)
		}
	}
	r, err := registry.Open(ctx, cl.URL(etcdtest.HarnessPrefix, "username=elsewhere", "password=elsewhere-pw"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for name, call := range map[string]func() error{
		"Lookup":   func() error { _, err := r.Lookup(ctx, "svc"); return err },
		"Services": func() error { _, err := r.Services(ctx); return err },
		"Watch": func() error {
			w, err := r.Watch(ctx, "svc")
			if err != nil {
				return err
			}
			defer w.Close()
			nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err = w.Next(nctx)
			return err
		},
	} {
		if err := call(); !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("%s outside the role's range = %v, want ErrInvalid saying permission denied", name, err)
		}
	}
}

// TestHeartbeatsDoNotAuthenticate: with a password, the etcd client
// authenticates on every gRPC stream it opens, and etcd commits each
// Authenticate through Raft after a bcrypt comparison. Heartbeats must not
// open a stream each (KeepAliveOnce does): a thousand processes beating
// every few seconds would keep the cluster busy checking passwords.
func TestHeartbeatsDoNotAuthenticate(t *testing.T) {
	cl := startCluster(t, etcdtest.Config{Auth: &authConfig})
	var auths atomic.Int64
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == "/etcdserverpb.Auth/Authenticate" {
			auths.Add(1)
		}
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cl.Endpoints(), Username: "roster", Password: "roster-pw",
		DialTimeout: 5 * time.Second, DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(count)}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	d, err := etcd.NewFromClient(cli, etcd.Options{Prefix: etcdtest.HarnessPrefix})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ttl := 2 * time.Second
	reg, err := d.Register(t.Context(), driver.Instance{ID: "a", Service: "svc", Address: "10.0.0.1:80", Weight: 1}, ttl)
	if err != nil {
		t.Fatal(err)
	}
	before := auths.Load()
	const beats = 5
	for range beats {
		// A renewal within a sixth of the TTL of the last is skipped.
		time.Sleep(ttl / 3)
		if err := reg.Heartbeat(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	n := auths.Load() - before
	t.Logf("%d heartbeats, %d Authenticate calls", beats, n)
	if n > 1 {
		t.Errorf("%d heartbeats authenticated %d times; want at most once (one keep-alive stream)", beats, n)
	}
}
