package redistest

import (
	"context"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roster-go/roster/conformance"
)

// StartACL starts a redis-server as Start does, with an ACL file, so that
// the users SetUser makes survive Restart.
func StartACL(t testing.TB, args ...string) *Server {
	t.Helper()
	dir := t.TempDir()
	acl := filepath.Join(dir, "users.acl")
	if err := os.WriteFile(acl, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(dir, append([]string{"--aclfile", acl}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// SetUser runs one "ACL SETUSER name rule…" line, as docs/security.md
// prints it, and saves the ACL file (a server from StartACL keeps the user
// across restarts).
func (s *Server) SetUser(ctx context.Context, line string) error {
	f := strings.Fields(line)
	args := make([]any, len(f))
	for i, w := range f {
		args[i] = w
	}
	c := s.Client()
	defer c.Close()
	if err := c.Do(ctx, args...).Err(); err != nil {
		return err
	}
	return c.Do(ctx, "ACL", "SAVE").Err()
}

// HarnessAs is Harness with registries that log in as user with pass,
// while the fault hooks keep the default user's rights. It declares
// TenantIsolation skipped: a user's ACL holds one prefix, not the
// tenants'.
func (s *Server) HarnessAs(t testing.TB, user, pass, query string, cfg conformance.Config) conformance.Harness {
	cfg.Skip = maps.Clone(cfg.Skip)
	if cfg.Skip == nil {
		cfg.Skip = map[string]string{}
	}
	cfg.Skip["TenantIsolation"] = "the ACL user may use one key prefix; tenants are other prefixes"
	u := url.URL{Scheme: "redis", User: url.UserPassword(user, pass), Host: s.Addr(), Path: "/0", RawQuery: query}
	h := newHarness(t, u.String(), cfg, s.Client)
	return &restartable{h, s.Restart}
}
