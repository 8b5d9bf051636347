package kubernetes_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/roster-go/roster/backends/kubernetes"
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/kubetest"
	"github.com/roster-go/roster/internal/testca"
	"github.com/roster-go/roster/registry"
)

// docRole returns the Role docs/security.md gives for Roster: the fenced
// block that starts with "# roster-role". The tests grant exactly what the
// documentation tells operators to grant.
func docRole(t *testing.T) rbacv1.Role {
	t.Helper()
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n# roster-role")
	block, _, closed := strings.Cut(rest, "```")
	if !ok || !closed {
		t.Fatal("docs/security.md has no ```yaml block starting with # roster-role")
	}
	var role rbacv1.Role
	if err := yaml.UnmarshalStrict([]byte(block), &role); err != nil {
		t.Fatalf("docs/security.md's Role: %v", err)
	}
	if len(role.Rules) == 0 {
		t.Fatal("docs/security.md's Role has no rules")
	}
	return role
}

// grant makes namespace ns hold exactly role, bound to kubetest's limited
// user, and waits until the apiserver's authorizer applies it.
func grant(t *testing.T, ns string, role rbacv1.Role) {
	t.Helper()
	ctx := t.Context()
	if err := server.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	cs, err := server.Clientset(server.Addr())
	if err != nil {
		t.Fatal(err)
	}
	role.Namespace = ns
	roles := cs.RbacV1().Roles(ns)
	if _, err := roles.Create(ctx, &role, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		cur, gerr := roles.Get(ctx, role.Name, metav1.GetOptions{})
		if gerr != nil {
			t.Fatal(gerr)
		}
		cur.Rules = role.Rules
		_, err = roles.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: kubetest.LimitedUser}}}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, rule := range role.Rules {
		for _, res := range rule.Resources {
			for _, verb := range rule.Verbs {
				waitAuthorized(t, ns, rule.APIGroups[0], res, verb)
			}
		}
	}
}

// waitAuthorized waits until the apiserver allows the limited user verb
// on resource in ns: RBAC objects reach the authorizer through a cache.
func waitAuthorized(t *testing.T, ns, group, resource, verb string) {
	t.Helper()
	cs, err := server.Clientset(server.Addr())
	if err != nil {
		t.Fatal(err)
	}
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{User: kubetest.LimitedUser,
		ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Group: group, Resource: resource, Verb: verb}}}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sar, metav1.CreateOptions{})
		if err == nil && got.Status.Allowed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s in %s not allowed within 10s: %v %+v", verb, resource, ns, err, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The limited user, bound to the documented Role and nothing else on an
// apiserver that authorizes with RBAC, passes the whole suite.
func TestConformanceLeastPrivilege(t *testing.T) {
	const ns = "roster-least-privilege"
	grant(t, ns, docRole(t))
	conformance.Run(t, kubetest.NewLimitedHarness(server, ns))
}

// TestRBACMissingVerb: the documented Role less one verb fails the call
// that needs it with ErrInvalid naming the verb and the resource — a
// refusal, never retried as an outage.
func TestRBACMissingVerb(t *testing.T) {
	doc := docRole(t)
	for _, c := range []struct {
		resource, verb string
		call           func(ctx context.Context, r *registry.Registry) error
	}{
		{"leases", "create", func(ctx context.Context, r *registry.Registry) error {
			_, err := r.Register(ctx, registry.Instance{Service: "svc", Address: "10.0.0.1:80"})
			return err
		}},
		{"endpointslices", "list", func(ctx context.Context, r *registry.Registry) error {
			_, err := r.Lookup(ctx, "svc")
			return err
		}},
		{"leases", "watch", func(ctx context.Context, r *registry.Registry) error {
			w, err := r.Watch(ctx, "svc")
			if err != nil {
				return err
			}
			defer w.Close()
			nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			for err == nil { // the list is allowed: its snapshot may come first
				_, err = w.Next(nctx)
			}
			return err
		}},
		{"endpointslices", "delete", func(ctx context.Context, r *registry.Registry) error {
			l, err := r.Register(ctx, registry.Instance{Service: "svc", Address: "10.0.0.1:80"})
			if err != nil {
				return err
			}
			return l.Deregister(ctx)
		}},
	} {
		t.Run(c.verb+"-"+c.resource, func(t *testing.T) {
			ns := "roster-rbac-no-" + c.verb + "-" + c.resource
			grant(t, ns, without(doc, c.resource, c.verb))
			r := openLimited(t, ns)
			err := c.call(t.Context(), r)
			want := `cannot ` + c.verb + ` resource "` + c.resource + `"`
			if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), want) {
				t.Fatalf("without %s on %s: %v, want ErrInvalid saying %s", c.verb, c.resource, err, want)
			}
		})
	}
}

// without returns role less verb on resource.
func without(role rbacv1.Role, resource, verb string) rbacv1.Role {
	out := *role.DeepCopy()
	for i, rule := range out.Rules {
		if slices.Contains(rule.Resources, resource) {
			out.Rules[i].Verbs = slices.DeleteFunc(slices.Clone(rule.Verbs), func(v string) bool { return v == verb })
		}
	}
	return out
}

func openLimited(t *testing.T, ns string) *registry.Registry {
	t.Helper()
	u, err := server.URLFor(kubetest.Access{Namespace: ns, Token: kubetest.LimitedToken}, "request_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	return openURL(t, u)
}

func openURL(t *testing.T, u string) *registry.Registry {
	t.Helper()
	r, err := registry.Open(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// firstCalls returns the errors of a first Lookup and a first Register
// on r, by name.
func firstCalls(t *testing.T, r *registry.Registry) map[string]error {
	_, lerr := r.Lookup(t.Context(), "svc")
	_, rerr := r.Register(t.Context(), registry.Instance{Service: "svc", Address: "10.0.0.1:80"})
	return map[string]error{"Lookup": lerr, "Register": rerr}
}

// TestRejectedToken: a kubeconfig whose token the apiserver does not know
// fails the first calls with ErrInvalid saying Unauthorized, and no error
// shows the token.
func TestRejectedToken(t *testing.T) {
	const token = "revoked-token-5f0c2a9e"
	u, err := server.URLFor(kubetest.Access{Namespace: "default", Token: token}, "request_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range firstCalls(t, openURL(t, u)) {
		if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "Unauthorized") || strings.Contains(err.Error(), token) {
			t.Errorf("%s with a rejected token: %v, want ErrInvalid saying Unauthorized, without the token", name, err)
		}
	}
}

// TestForeignCA: a kubeconfig whose CA did not sign the apiserver's
// certificate fails the first calls with ErrInvalid naming the cause
// (backend.TLSCause), not ErrUnavailable retried forever.
func TestForeignCA(t *testing.T) {
	ca := testca.NewCA(t, t.TempDir(), "foreign")
	u, err := server.URLFor(kubetest.Access{Namespace: "default", CAFile: ca.File}, "request_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range firstCalls(t, openURL(t, u)) {
		if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "not signed by a CA") {
			t.Errorf("%s with a foreign CA: %v, want ErrInvalid naming the CA", name, err)
		}
	}
}

// TestNoOptionCarriesAToken: credentials come only from the kubeconfig or
// the service account. A URL that tries to carry one — as an option or as
// user info — is refused, and the error does not show it.
func TestNoOptionCarriesAToken(t *testing.T) {
	const secret = "s3cret-token-value"
	for _, raw := range []string{
		"k8s://?namespace=a&token=" + secret,
		"k8s://?namespace=a&token_file=" + secret,
		"k8s://?namespace=a&bearer_token=" + secret,
		"k8s://?namespace=a&password=" + secret,
		"k8s://user:" + secret + "@?namespace=a",
		"k8s://" + secret + "@in-cluster?namespace=a",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		_, err = kubernetes.ParseURL(u)
		if !errors.Is(err, registry.ErrInvalid) || strings.Contains(err.Error(), secret) {
			t.Errorf("%s: %v, want ErrInvalid without the secret", strings.ReplaceAll(raw, secret, "…"), err)
		}
	}
}

// TestKubeconfigErrorsHideTheToken: a kubeconfig that holds a token but
// cannot be used (it does not parse, names a context it lacks, or a
// server URL that does not parse) is ErrInvalid, and the error does not
// show the token.
func TestKubeconfigErrorsHideTheToken(t *testing.T) {
	const token = "kubeconfig-token-7d1e"
	user := "users:\n- name: u\n  user:\n    token: " + token + "\n"
	for name, kc := range map[string]string{
		"does not parse":  "apiVersion: v1\nkind: Config\n" + user + "clusters: [\n",
		"missing context": "apiVersion: v1\nkind: Config\n" + user + "current-context: nowhere\n",
		"bad server URL": "apiVersion: v1\nkind: Config\n" + user +
			"clusters:\n- name: c\n  cluster:\n    server: \"https://%zz\"\n" +
			"contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n",
	} {
		file := filepath.Join(t.TempDir(), "kubeconfig")
		if err := os.WriteFile(file, []byte(kc), 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := registry.Open(t.Context(), "k8s://?namespace=a&request_timeout=1s&kubeconfig="+url.QueryEscape(file))
		if err == nil {
			_, err = r.Lookup(t.Context(), "svc")
			r.Close()
		}
		if !errors.Is(err, registry.ErrInvalid) || strings.Contains(err.Error(), token) {
			t.Errorf("%s: %v, want ErrInvalid without the token", name, err)
		}
	}
}
