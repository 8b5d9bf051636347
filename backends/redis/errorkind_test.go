package redis_test

import (
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

// ErrorKind classifies what go-redis returns from a real server: a
// refusal no retry can cure is ErrInvalid, the rest ErrUnavailable.
func TestErrorKind(t *testing.T) {
	t.Parallel()
	f := writeCerts(t, t.TempDir())
	srv := redistest.StartTLS(t, f)
	ctx := t.Context()
	admin := srv.Client()
	defer admin.Close()
	if err := admin.Do(ctx, "ACL", "SETUSER", "reader", "on", ">Rd-s3cret", "~*", "+@read", "+@scripting", "+@connection").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.HSet(ctx, "a-hash", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	as := func(user, pass string) *goredis.Client {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Username: user, Password: pass, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	reader := as("reader", "Rd-s3cret")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	untrusted := goredis.NewClient(&goredis.Options{Addr: srv.TLSAddr(), TLSConfig: &tls.Config{ServerName: "127.0.0.1"}, MaxRetries: -1})
	defer untrusted.Close()
	refused := goredis.NewClient(&goredis.Options{Addr: closed, MaxRetries: -1, DialerRetries: 1})
	defer refused.Close()

	d := openDriver(t, "redis://reader:Rd-s3cret@"+srv.Addr())
	_, regErr := d.Register(ctx, registry.Instance{ID: "i-1", Service: "s", Address: "127.0.0.1:1"}, time.Minute)
	if regErr == nil || strings.Contains(regErr.Error(), "Rd-s3cret") {
		t.Fatalf("Register as a read-only user = %v, want a refusal without the password", regErr)
	}
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"NOPERM", reader.Set(ctx, "k", "v", 0).Err(), registry.ErrInvalid},
		{"NOPERM in a script", reader.Eval(ctx, "return redis.call('SET', KEYS[1], 'v')", []string{"k"}).Err(), registry.ErrInvalid},
		{"WRONGPASS", as("reader", "wrong").Ping(ctx).Err(), registry.ErrInvalid},
		{"WRONGTYPE", admin.Get(ctx, "a-hash").Err(), registry.ErrInvalid},
		{"untrusted server certificate", untrusted.Ping(ctx).Err(), registry.ErrInvalid},
		{"the driver's own error, wrapped and redacted", regErr, registry.ErrInvalid},
		{"another reply", admin.Do(ctx, "NO-SUCH-COMMAND").Err(), registry.ErrUnavailable},
		{"connection refused", refused.Ping(ctx).Err(), registry.ErrUnavailable},
	} {
		if c.err == nil {
			t.Errorf("%s: no error to classify", c.name)
			continue
		}
		t.Logf("%s: %v", c.name, c.err)
		if got := d.ErrorKind(c.err); !errors.Is(got, c.want) {
			t.Errorf("%s: ErrorKind(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
