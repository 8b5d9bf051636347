package kubernetes_test

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roster-go/roster/backends/kubernetes"
	"github.com/roster-go/roster/registry/driver"
)

const secretToken = "s3cret-token-never-printed"

// writeKubeconfig writes a kubeconfig whose context has namespace ns.
func writeKubeconfig(t testing.TB, ns string) string {
	p := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://10.0.0.1:6443", insecure-skip-tls-verify: true}
contexts:
- name: a
  context: {cluster: c, user: u, namespace: ` + ns + `}
- name: b
  context: {cluster: c, user: u}
current-context: a
users:
- name: u
  user: {token: ` + secretToken + `}
`
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func parse(t *testing.T, raw string) (kubernetes.Options, error) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.ParseURL(u)
}

func TestParseURL(t *testing.T) {
	kc := url.QueryEscape(writeKubeconfig(t, "shop"))
	for _, c := range []struct{ url, ns string }{
		{"k8s://?kubeconfig=" + kc, "shop"},
		{"k8s://?kubeconfig=" + kc + "&namespace=web", "web"},
		{"k8s://?kubeconfig=" + kc + "&context=b", "default"},
	} {
		o, err := parse(t, c.url)
		if err != nil {
			t.Fatalf("%s: %v", c.url, err)
		}
		if o.Namespace != c.ns || o.Config.Host != "https://10.0.0.1:6443" || o.Config.BearerToken != secretToken {
			t.Errorf("%s: namespace %q host %q, want %q on https://10.0.0.1:6443 with the file's token", c.url, o.Namespace, o.Config.Host, c.ns)
		}
	}
}

func TestParseURLQPS(t *testing.T) {
	kc := url.QueryEscape(writeKubeconfig(t, "shop"))
	o, err := parse(t, "k8s://?kubeconfig="+kc+"&qps=1000")
	if err != nil || o.Config.QPS != 1000 || o.Config.Burst != 2000 {
		t.Fatalf("qps=1000: QPS %v burst %v, %v; want 1000 and 2000", o.Config.QPS, o.Config.Burst, err)
	}
}

// TestParseURLPort: port names the primary port of Services' endpoints.
func TestParseURLPort(t *testing.T) {
	kc := url.QueryEscape(writeKubeconfig(t, "shop"))
	o, err := parse(t, "k8s://?kubeconfig="+kc+"&port=grpc")
	if err != nil || o.Port != "grpc" {
		t.Fatalf("port=grpc: %q, %v", o.Port, err)
	}
	_, err = kubernetes.New(kubernetes.Options{Config: o.Config, Port: "Not_A_Port"})
	if !errors.Is(err, driver.ErrInvalid) || !strings.Contains(err.Error(), "port") {
		t.Fatalf("New with Port Not_A_Port: %v, want ErrInvalid naming port", err)
	}
}

func TestParseURLInvalid(t *testing.T) {
	kc := url.QueryEscape(writeKubeconfig(t, "shop"))
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	for _, raw := range []string{
		"k8s://cluster.example?kubeconfig=" + kc,       // a host other than in-cluster
		"k8s://?kubeconfig=" + kc + "&namespcae=x",     // unknown option
		"k8s://?kubeconfig=" + kc + "&context=missing", // no such context
		"k8s://?kubeconfig=/nonexistent/kubeconfig",
		"k8s://?kubeconfig=/dev/zero",       // client-go would read it until the memory is full
		"k8s://in-cluster?kubeconfig=" + kc, // both
		"k8s://in-cluster",                  // not in a pod
		"k8s://?kubeconfig=" + kc + "&request_timeout=soon",
		"k8s://?kubeconfig=" + kc + "&qps=0",
		"k8s://?kubeconfig=" + kc + "&qps=-5",
		"k8s://?kubeconfig=" + kc + "&qps=100001",
		"k8s://?kubeconfig=" + kc + "&port=HTTP",                  // port names are lower case
		"k8s://?kubeconfig=" + kc + "&port=a-very-long-port-name", // over 15 bytes
		"k8s://?kubeconfig=" + kc + "&token=" + secretToken,
		"k8s://u:" + secretToken + "@?kubeconfig=" + kc,
	} {
		_, err := parse(t, raw)
		if !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("%s: error %v, want ErrInvalid", raw, err)
			continue
		}
		if strings.Contains(err.Error(), secretToken) {
			t.Errorf("%s: error prints the token: %v", raw, err)
		}
	}
}

func FuzzParseURL(f *testing.F) {
	f.Add("k8s://?namespace=shop&kubeconfig=/nonexistent")
	f.Add("k8s://in-cluster?namespace=x")
	f.Add("k8s://?token=" + secretToken)
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil || !strings.EqualFold(u.Scheme, "k8s") {
			return
		}
		if _, err := kubernetes.ParseURL(u); err != nil && !errors.Is(err, driver.ErrInvalid) {
			t.Fatalf("%q: %v is not ErrInvalid", raw, err)
		}
	})
}
