package consultest

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/hashicorp/consul/api"
)

// StartACL starts an agent as Start does, with ACLs on and every request
// denied unless a token allows it (default_policy deny). management is
// the initial management token, which the Agent's own calls (readiness,
// CreateToken, the harness's fault hooks) use.
func StartACL(tb testing.TB, management string, args ...string) *Agent {
	tb.Helper()
	acl := fmt.Sprintf(`acl { enabled = true, default_policy = "deny", down_policy = "deny", `+
		`tokens { initial_management = %q, agent = %q } }`, management, management)
	a, err := newAgent("", management, append([]string{"-hcl", acl}, args...))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("consul agent (ACLs) log, tail:\n%s", a.LogTail(8000))
		}
		a.Close()
	})
	return a
}

// ManagementToken is the token given to StartACL, "" without ACLs.
func (a *Agent) ManagementToken() string { return a.token }

type tokenSpec struct{ name, rules, secret string }

// CreateToken creates a policy with the ACL rules (HCL) and a token
// holding only that policy, and returns the token's secret. A -dev agent
// keeps ACLs in memory: the Agent makes the policy and token again, with
// the same secret, each time it starts.
func (a *Agent) CreateToken(ctx context.Context, name, rules string) (string, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	t := tokenSpec{name: name, rules: rules,
		secret: fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])}
	if err := a.makeToken(ctx, t); err != nil {
		return "", err
	}
	a.mu.Lock()
	a.tokens = append(a.tokens, t)
	a.mu.Unlock()
	return t.secret, nil
}

// remakeTokens makes the CreateToken tokens again after a start. a.mu is
// held.
func (a *Agent) remakeTokens() error {
	for _, t := range a.tokens {
		if err := a.makeToken(context.Background(), t); err != nil {
			return err
		}
	}
	return nil
}

func (a *Agent) makeToken(ctx context.Context, t tokenSpec) error {
	c, err := api.NewClient(&api.Config{Address: a.addr, Token: a.token})
	if err != nil {
		return err
	}
	q := (&api.WriteOptions{}).WithContext(ctx)
	if _, _, err := c.ACL().PolicyCreate(&api.ACLPolicy{Name: t.name, Rules: t.rules}, q); err != nil {
		return fmt.Errorf("consultest: policy %s: %w", t.name, err)
	}
	tok := &api.ACLToken{SecretID: t.secret, Description: t.name, Policies: []*api.ACLTokenPolicyLink{{Name: t.name}}}
	if _, _, err := c.ACL().TokenCreate(tok, q); err != nil {
		return fmt.Errorf("consultest: token %s: %w", t.name, err)
	}
	return nil
}
