package redis_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
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
