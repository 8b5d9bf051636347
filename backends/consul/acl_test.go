package consul_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/roster-go/roster/backends/consul"
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/consultest"
	"github.com/roster-go/roster/registry"
)

// docPolicy returns the ACL policy docs/security.md gives for Roster: the
// fenced block that starts with "# roster-policy". The tests grant exactly
// what the documentation tells operators to grant.
func docPolicy(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```hcl\n# roster-policy")
	policy, _, closed := strings.Cut(rest, "```")
	if !ok || !closed {
		t.Fatal("docs/security.md has no ```hcl block starting with # roster-policy")
	}
	return "# roster-policy" + policy
}

// A token with exactly the documented policy, on an agent that denies
// everything else, passes the whole suite.
func TestConformanceLeastPrivilege(t *testing.T) {
	t.Parallel()
	a := consultest.StartACL(t, "8d3b0e4c-0000-4000-8000-00000000a11c")
	token, err := a.CreateToken(t.Context(), "roster", docPolicy(t))
	if err != nil {
		t.Fatal(err)
	}
	conformance.Run(t, consultest.NewHarnessAs(t, a, token))
}

// A policy that may read services but not write them fails Register at
// once with ErrInvalid naming the permission; a token the agent does not
// know fails every call the same way.
func TestACLMissingPermission(t *testing.T) {
	t.Parallel()
	a := consultest.StartACL(t, "8d3b0e4c-0000-4000-8000-00000000a11d")
	policy := docPolicy(t)
	readOnly := strings.Replace(policy, `policy = "write"`, `policy = "read"`, 1)
	if readOnly == policy {
		t.Fatal(`the documented policy has no policy = "write"`)
	}
	token, err := a.CreateToken(t.Context(), "reader", readOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ token, want string }{
		{token, "service:write"},
		{"00000000-0000-4000-8000-000000000000", "ACL not found"},
	} {
		d, err := consul.NewDriver(consul.Options{Address: a.Addr(), Token: c.token})
		if err != nil {
			t.Fatal(err)
		}
		r := registry.New(d)
		defer r.Close()
		_, err = r.Register(t.Context(), registry.Instance{Service: "acl", Address: "127.0.0.1:80"})
		if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(strings.ToLower(err.Error()), "permission denied") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Register = %v; want ErrInvalid, permission denied, %s", err, c.want)
		}
		t.Logf("%v", err)
		if strings.Contains(err.Error(), c.token) {
			t.Errorf("the error shows the token: %v", err)
		}
	}
}
