package kubernetes

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/roster-go/roster/internal/backend"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/roster-go/roster/registry/driver"
)

// publicOptions are the URL options whose values may appear in errors:
// all of them (the kubeconfig path is only a path; tokens never appear in
// a k8s:// URL).
var publicOptions = []string{"namespace", "kubeconfig", "context", "request_timeout", "sweep_interval", "qps", "port"}

func openURL(_ context.Context, u *url.URL) (driver.Driver, error) {
	opts, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	return New(opts)
}

// ParseURL turns a k8s:// URL into Options, loading the client
// configuration it names (see the package documentation). Errors wrap
// driver.ErrInvalid and name the option; they never quote a token.
func ParseURL(u *url.URL) (Options, error) {
	var o Options
	if !strings.EqualFold(u.Scheme, Scheme) {
		return o, invalid(u, "scheme %q: want %s", u.Scheme, Scheme)
	}
	q, err := backend.ParseQuery("k8s", u)
	if err != nil {
		return o, err
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.Port() != "" {
		return o, invalid(u, "want k8s://?namespace=… or k8s://in-cluster?namespace=…")
	}
	var kubeconfig, kubeContext string
	var qps int
	q.String("namespace", &o.Namespace)
	q.String("kubeconfig", &kubeconfig)
	q.String("context", &kubeContext)
	q.Duration("request_timeout", &o.RequestTimeout)
	q.Duration("sweep_interval", &o.SweepInterval)
	q.Int("qps", &qps)
	q.String("port", &o.Port)
	if err := q.Err(); err != nil {
		return o, err
	}
	if o.Port != "" && !portName(o.Port) {
		return o, invalid(u, "option port=%q: want a port name, [a-z0-9]([a-z0-9-]*[a-z0-9])? of at most %d bytes", o.Port, backend.MaxEndpointNameLen)
	}
	if qps > maxQPS {
		return o, invalid(u, "option qps=%d: at most %d", qps, maxQPS)
	}
	switch u.Host {
	case "":
		o.Config, o.Namespace, err = loadKubeconfig(kubeconfig, kubeContext, o.Namespace)
	case "in-cluster":
		if kubeconfig != "" || kubeContext != "" {
			return o, invalid(u, "options kubeconfig and context have no meaning with in-cluster")
		}
		o.Config, err = rest.InClusterConfig()
		if err == nil && o.Namespace == "" {
			o.Namespace = inClusterNamespace()
		}
	default:
		return o, invalid(u, "host %q: want none (kubeconfig) or in-cluster", u.Host)
	}
	if err != nil {
		return o, invalid(u, "client configuration: %v", err)
	}
	if qps > 0 {
		o.Config.QPS, o.Config.Burst = float32(qps), 2*qps
	}
	return o, nil
}

// maxQPS bounds the qps option: a client limit far above what one
// apiserver serves is no limit at all.
const maxQPS = 100000

// loadKubeconfig follows kubectl's rules: the file given, else $KUBECONFIG,
// else ~/.kube/config, else the in-cluster configuration; the namespace
// given, else the context's, else "default".
func loadKubeconfig(path, kubeContext, namespace string) (*rest.Config, string, error) {
	if path != "" {
		// client-go reads the whole file: /dev/zero would fill the memory.
		fi, err := os.Stat(path)
		if err == nil && (!fi.Mode().IsRegular() || fi.Size() > maxKubeconfig) {
			return nil, "", fmt.Errorf("kubeconfig %q: not a regular file of at most %d bytes", path, maxKubeconfig)
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	overrides := &clientcmd.ConfigOverrides{CurrentContext: kubeContext}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", err
	}
	if namespace == "" {
		if namespace, _, err = cc.Namespace(); err != nil {
			return nil, "", err
		}
	}
	return cfg, namespace, nil
}

// maxKubeconfig bounds the kubeconfig file read (real ones are a few KB).
const maxKubeconfig = 16 << 20

// inClusterNamespace is the pod's own namespace.
func inClusterNamespace() string {
	b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil || strings.TrimSpace(string(b)) == "" {
		return "default"
	}
	return strings.TrimSpace(string(b))
}

// invalid is an ErrInvalid in the form backend.Query gives its own. It
// does not name the URL: registry.Open does, once, redacted.
func invalid(_ *url.URL, format string, args ...any) error {
	return backend.InvalidURL("k8s", format, args...)
}
