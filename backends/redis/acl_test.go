package redis_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// aclLine returns the "ACL SETUSER <user> …" line docs/security.md gives
// for user, with pass as its password: the test grants exactly what the
// documentation tells operators to grant.
func aclLine(t *testing.T, user, pass string) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "ACL SETUSER "+user+" ") {
			return strings.Replace(line, ">PASSWORD", ">"+pass, 1)
		}
	}
	t.Fatalf("docs/security.md has no line ACL SETUSER %s", user)
	return ""
}

// The documented ACL of each layout is enough for the whole suite: the
// registries log in as a user with exactly those commands and keys.
func TestConformanceLeastPrivilege(t *testing.T) {
	for _, c := range []struct {
		user, query string
		cfg         conformance.Config
		args        []string
	}{
		{"roster-hash", hash, hashCfg, nil},
		{"roster-keys", "layout=keys&poll=100ms&notify=on", keysCfg, []string{"--notify-keyspace-events", "Eg$x"}},
	} {
		t.Run(c.user, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartACL(t, c.args...)
			if err := srv.SetUser(t.Context(), aclLine(t, c.user, "s3cret")); err != nil {
				t.Fatal(err)
			}
			conformance.Run(t, srv.HarnessAs(t, c.user, "s3cret", c.query, c.cfg))
		})
	}
}

// A user missing one documented command fails with ErrInvalid naming the
// command (NOPERM), at once: no retry grants a permission.
func TestACLMissingPermission(t *testing.T) {
	t.Parallel()
	srv := redistest.StartACL(t)
	for _, c := range []struct{ user, drop, query string }{
		{"roster-hash", "+xadd", ""},
		{"roster-hash", "+zrangebyscore", ""},
		{"roster-keys", "+scan", "layout=keys&notify=off"},
	} {
		line := aclLine(t, c.user, "s3cret")
		if !strings.Contains(line, " "+c.drop+" ") && !strings.HasSuffix(line, " "+c.drop) {
			t.Fatalf("the documented ACL of %s has no %s", c.user, c.drop)
		}
		line = strings.Replace(line, " "+c.drop, "", 1)
		if err := srv.SetUser(t.Context(), line); err != nil {
			t.Fatal(err)
		}
		r := open(t, "redis://"+c.user+":s3cret@"+srv.Addr()+"/0?"+c.query)
		err := useAll(t, r)
		want := "'" + strings.TrimPrefix(c.drop, "+") + "'"
		if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s without %s: %v; want ErrInvalid with NOPERM naming %s", c.user, c.drop, err, want)
		}
	}
}

// useAll registers, looks up and lists services, and returns the first
// error.
func useAll(t *testing.T, r *registry.Registry) error {
	ctx := t.Context()
	l, err := r.Register(ctx, registry.Instance{Service: "acl", Address: "127.0.0.1:80"})
	if err != nil {
		return err
	}
	defer l.Deregister(ctx)
	if _, err := r.Lookup(ctx, "acl"); err != nil {
		return err
	}
	_, err = r.Services(ctx)
	return err
}

// A user with the hash ACL documented before the watches' quiet checks
// used MGET and large services were read in pages (no +mget, +zscan,
// +xrange) still gets both: each watch checks its own counter, and a
// large service is read in one script.
func TestACLBeforePagingStillWorks(t *testing.T) {
	t.Parallel()
	srv := redistest.StartACL(t)
	line := aclLine(t, "roster-hash", "s3cret")
	for _, c := range []string{"+mget", "+zscan", "+xrange"} {
		if !strings.Contains(line, " "+c) {
			t.Fatalf("the documented ACL has no %s", c)
		}
		line = strings.Replace(line, " "+c, "", 1)
	}
	if err := srv.SetUser(t.Context(), line); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const quiet = 300 * time.Millisecond
	url := fmt.Sprintf("redis://roster-hash:s3cret@%s/0?quiet=%v", srv.Addr(), quiet)
	d := openDriver(t, url)
	const n = 1100 // past one page
	for i := range n {
		if _, err := d.Register(ctx, driver.Instance{ID: fmt.Sprintf("a-%04d", i), Service: "old-acl", Address: fmt.Sprintf("10.5.%d.%d:80", i/250, i%250)}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if s, err := d.List(ctx, "old-acl"); err != nil || len(s.Instances) != n {
		t.Fatalf("List: %d instances, %v; want %d", len(s.Instances), err, n)
	}
	obs := open(t, url)
	w := watchMany(t, obs, 1, func(int) string { return "old-acl" })[0]
	// A change behind the log's back: only the quiet check finds it.
	rdb := srv.Client()
	defer rdb.Close()
	if err := rdb.Set(ctx, "roster:{old-acl}:i:raw", `{"id":"raw","service":"old-acl","address":"10.6.0.1:80"}`, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.ZAdd(ctx, "roster:{old-acl}:idx", goredis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: "raw"})
	rdb.Incr(ctx, "roster:{old-acl}:rev")
	wctx, cancel := context.WithTimeout(ctx, 4*quiet+5*time.Second)
	defer cancel()
	nextWith(wctx, t, w, 0, n+1)
}
