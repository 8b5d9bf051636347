package etcd

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// kindOf is the sentinel Registry gives a driver error: its own, if it
// wraps one, else the driver's ErrorKind.
func kindOf(d *Driver, err error) error {
	for _, s := range []error{driver.ErrInvalid, driver.ErrNotFound, driver.ErrUnavailable, driver.ErrClosed} {
		if errors.Is(err, s) {
			return s
		}
	}
	return d.ErrorKind(err)
}

// ErrorKind classifies the client's real errors: a lease the server lost
// is ErrNotFound; a request the server or client refuses, a wrong
// password and a role without the key are ErrInvalid; an unreachable
// server is ErrUnavailable. Before ErrInvalid, a refused request was
// ErrUnavailable, and the lease retried it forever.
func TestErrorKind(t *testing.T) {
	c, err := etcdtest.Start(t.Context(), etcdtest.Config{Dir: t.TempDir(), Auth: &etcdtest.Auth{RootPassword: "root-pw",
		Users: []etcdtest.User{{Name: "elsewhere", Password: "elsewhere-pw", Prefix: "/other/"}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	login := func(user, pw string) (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), Username: user, Password: pw, DialTimeout: 5 * time.Second})
	}
	root, err := login("root", "root-pw")
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	d, err := NewFromClient(root, Options{Prefix: "/t"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := t.Context()
	val := func(n int) string { return strings.Repeat("x", n) }
	for _, row := range []struct {
		name string
		call func() error
		want error
	}{
		{"revoke an unknown lease", func() error { _, err := root.Revoke(ctx, 12345); return err }, driver.ErrNotFound},
		{"lease TTL past 9e9s", func() error { _, err := root.Grant(ctx, 9_100_000_000); return err }, driver.ErrInvalid},
		{"1.6 MiB value (the server's limit)", func() error { _, err := root.Put(ctx, "/t/a", val(1600<<10)); return err }, driver.ErrInvalid},
		{"2 MiB value (the client's limit)", func() error { _, err := root.Put(ctx, "/t/a", val(2<<20)); return err }, driver.ErrInvalid},
		{"wrong password", func() error { _, err := login("root", "wrong"); return err }, driver.ErrInvalid},
		{"a role without the key", func() error {
			cli, err := login("elsewhere", "elsewhere-pw")
			if err != nil {
				return err
			}
			defer cli.Close()
			_, err = cli.Put(ctx, "/t/a", "v")
			return err
		}, driver.ErrInvalid},
		{"no server", func() error {
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}, DialTimeout: time.Second})
			if err != nil {
				return err
			}
			defer cli.Close()
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			_, err = cli.Get(cctx, "/t/a")
			return err
		}, driver.ErrUnavailable},
	} {
		err := row.call()
		if err == nil {
			t.Errorf("%s: no error", row.name)
			continue
		}
		if got := d.ErrorKind(d.wrap(ctx, "op", err)); got != row.want {
			t.Errorf("%s: ErrorKind(%v) = %v, want %v", row.name, err, got, row.want)
		}
	}
}

// Through the registry, a TTL past etcd's maximum is refused by
// validation, naming it; the driver's Register refuses it as ErrInvalid.
func TestTTLPastTheMaximum(t *testing.T) {
	c := startServer(t)
	d := newTestDriver(t, c, time.Minute)
	const tooLong = 9_100_000_000 * time.Second
	_, err := d.Register(t.Context(), registry.Instance{ID: "a", Service: "svc", Address: "127.0.0.1:1"}, tooLong)
	if kindOf(d, err) != driver.ErrInvalid {
		t.Errorf("driver Register with a TTL past 9e9s: %v, want ErrInvalid", err)
	}
	r := registry.New(d)
	_, err = r.Register(t.Context(), registry.Instance{Service: "svc", Address: "127.0.0.1:1"}, registry.WithTTL(tooLong))
	var fe *registry.FieldError
	if !errors.As(err, &fe) || fe.Field != "ttl" || !strings.Contains(err.Error(), "maximum") {
		t.Fatalf("Register with a TTL past etcd's maximum = %v, want an error on ttl naming the maximum", err)
	}
}
