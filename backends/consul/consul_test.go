package consul_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/roster-go/roster/backends/consul"
	"github.com/roster-go/roster/internal/loopback"
	"github.com/roster-go/roster/registry"
)

// rawClient is a plain Consul client, for doing what other tools do.
func rawClient(addr string) (*api.Client, *http.Transport, error) {
	cfg := api.DefaultConfig()
	cfg.Address = addr
	cfg.Token = ""
	tr := cfg.Transport
	c, err := api.NewClient(cfg)
	return c, tr, err
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	good := []struct {
		url  string
		want func(o consul.Options) bool
	}{
		{"consul://", func(o consul.Options) bool {
			return o.Address == "127.0.0.1:8500" && !o.TLS && o.Check == consul.CheckTTL && o.DeregisterAfter == time.Minute && o.Wait == 30*time.Second &&
				o.MaxConns == consul.DefaultMaxConns && o.MaxWatchConns == consul.DefaultMaxWatchConns
		}},
		{"consul://h:1?max_conns=16&max_watch_conns=100", func(o consul.Options) bool {
			return o.MaxConns == 16 && o.MaxWatchConns == 100
		}},
		{"consul://10.0.0.1:18500?token=s3cret&dc=eu1", func(o consul.Options) bool {
			return o.Address == "10.0.0.1:18500" && o.Token == "s3cret" && o.Datacenter == "eu1"
		}},
		// TLS options now load their files when parsed (TestParseURLTLS):
		// without files, only the server name.
		{"consuls://consul.internal?tls_server_name=consul", func(o consul.Options) bool {
			return o.Address == "consul.internal:8501" && o.TLS && o.TLSConfig.ServerName == "consul"
		}},
		{"consul://[::1]:8500?check=http&http_path=/healthz&http_interval=5s&http_timeout=1s&deregister_after=2m", func(o consul.Options) bool {
			return o.Address == "[::1]:8500" && o.Check == consul.CheckHTTP && o.HTTPInterval == 5*time.Second &&
				o.HTTPTimeout == time.Second && o.DeregisterAfter == 2*time.Minute
		}},
		{"consul://h:1?wait=2m&timeout=3s&stale=true", func(o consul.Options) bool {
			return o.Wait == 2*time.Minute && o.Timeout == 3*time.Second && o.AllowStale
		}},
	}
	for _, c := range good {
		u, _ := url.Parse(c.url)
		o, err := consul.ParseURL(u)
		if err != nil || !c.want(o) {
			t.Errorf("ParseURL(%s) = %+v, %v", c.url, o, err)
		}
	}
	bad := []struct{ url, says string }{
		{"consul://h:1?deregister_after=30s", "minimum is 1m"},
		{"consul://h:1?check=tcp", "want one of ttl, http"},
		{"consul://h:1?check=http&http_interval=500ms", "1s"},
		{"consul://h:1?wait=11m", "10m"},
		{"consul://u:pw@h:1", "token="},
		{"consul://h:1/path", "no path"},
		// The messages below are backend.Query's, shared by every backend.
		{"consul://h:1?bogus=1", `unknown option "bogus"`},
		{"consul://h:1?ca_file=/x", "TLS is off"},
		{"consul://h:1?wait=soon", "not a positive duration"},
		{"consul://h:1?max_conns=many", "not a positive integer"},
		{"consul://h:1?max_watch_conns=-1", "not a positive integer"},
		// Zero meant "the default" and was taken silently; now rejected.
		{"consul://h:1?timeout=0s", "not a positive duration"},
		// A repeated option was "first wins" (url.Values.Get); now an error.
		{"consul://h:1?dc=eu1&dc=us1", "given 2 times"},
		// No "//": the host was dropped and the driver talked to
		// 127.0.0.1:8500, sending it the token; now rejected.
		{"consul:10.99.99.99:8500?token=s3cret", `the "//" is missing`},
		{"consul://h:1?token=s3cret&token_file=/t", "choose one"},
		{"consul://h:1?tls_skip_verify=true", "TLS is off"},
		{"consuls://h:1?server_name=a&tls_server_name=b", "both given"},
		{"consuls://h:1?ca_file=/nonexistent/ca.pem", "ca_file"},
	}
	for _, c := range bad {
		u, _ := url.Parse(c.url)
		_, err := consul.ParseURL(u)
		if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), c.says) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParseURL(%s) = %v, want ErrInvalid saying %q, without the token", c.url, err, c.says)
		}
	}
	// Through registry.Open, the token never shows in the error.
	for _, raw := range []string{"consul://h:1?token=s3cret&deregister_after=10s", "consul:10.99.99.99:8500?token=s3cret"} {
		_, err := registry.Open(t.Context(), raw)
		if !errors.Is(err, registry.ErrInvalid) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%s) = %v, want ErrInvalid without the token", registry.Redact(raw), err)
		}
	}
}

// An unreachable agent is ErrUnavailable, quickly, without the token.
func TestUnreachableAgent(t *testing.T) {
	t.Parallel()
	port, err := loopback.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	r, err := registry.Open(t.Context(), "consul://127.0.0.1:"+strconv.Itoa(port)+"?token=s3cret-token&timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Register(t.Context(), registry.Instance{Service: "nowhere", Address: "127.0.0.1:1"})
	if !errors.Is(err, registry.ErrUnavailable) || strings.Contains(err.Error(), "s3cret-token") {
		t.Fatalf("Register against no agent = %v, want ErrUnavailable without the token", err)
	}
	_, err = r.Lookup(t.Context(), "nowhere")
	if !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("Lookup against no agent = %v, want ErrUnavailable", err)
	}
}

// healthServer serves /healthz on a loopback port: 200 while healthy.
func healthServer(t *testing.T) (addr string, healthy *atomic.Bool) {
	t.Helper()
	healthy = new(atomic.Bool)
	healthy.Store(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && healthy.Load() {
			fmt.Fprintln(w, "ok")
			return
		}
		http.Error(w, "unhealthy", http.StatusServiceUnavailable)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), healthy
}

// The PHP article's registration — a raw PUT with Meta.weight, an HTTP
// /healthz check and a 30s deregistercriticalserviceafter — is discovered
// by Roster with its weight, and its deregistration by ID reaches a
// watcher.
func TestArticlePayloadDiscovered(t *testing.T) {
	t.Parallel()
	a := sharedAgent(t)
	addr, _ := healthServer(t)
	host, portS, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portS)
	svc := fmt.Sprintf("php-user-service-%d", time.Now().UnixNano()%1e9)
	id := fmt.Sprintf("%s-%s-%d", svc, host, port)
	payload := fmt.Sprintf(`{
		"ID": %q,
		"Name": %q,
		"Tags": ["php", "discovery"],
		"Address": %q,
		"Port": %d,
		"Meta": {"weight": "3"},
		"EnableTagOverride": false,
		"Check": {
			"http": "http://%s:%d/healthz",
			"interval": "10s",
			"timeout": "2s",
			"deregistercriticalserviceafter": "30s"
		}
	}`, id, svc, host, port, host, port)
	put := func(path, body string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, "http://"+a.Addr()+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		c := &http.Client{Timeout: 3 * time.Second} // CURLOPT_TIMEOUT 3
		defer c.CloseIdleConnections()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("PUT %s: %v", path, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("PUT %s: %s", path, resp.Status)
		}
	}
	put("/v1/agent/service/register", payload)
	t.Cleanup(func() {
		c, tr, _ := rawClient(a.Addr())
		_ = c.Agent().ServiceDeregister(id)
		tr.CloseIdleConnections()
	})

	r, err := openRegistry(t, a)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := r.Watch(t.Context(), svc)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// The check starts critical and the agent's first probe comes within
	// one interval (10s, staggered at random).
	want := registry.Instance{
		ID: id, Service: svc, Address: addr, Weight: 3,
		Tags: []string{"php", "discovery"}, Metadata: map[string]string{"weight": "3"},
	}
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	for {
		sn, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("the article's instance was not discovered within 15s: %v", err)
		}
		if got, ok := sn.Find(id); ok {
			if !got.Equal(want) {
				t.Fatalf("discovered %+v, want %+v", got, want)
			}
			break
		}
	}
	if sn, err := r.Lookup(t.Context(), svc); err != nil || len(sn.Instances) != 1 || sn.Instances[0].Weight != 3 {
		t.Fatalf("Lookup = %+v, %v; want the instance with weight 3", sn.Instances, err)
	}
	// The article's deregister: PUT /v1/agent/service/deregister/<id>.
	put("/v1/agent/service/deregister/"+id, "")
	ctx2, cancel2 := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel2()
	for {
		sn, err := w.Next(ctx2)
		if err != nil {
			t.Fatalf("deregistration by ID did not reach the watcher within 2s: %v", err)
		}
		if len(sn.Instances) == 0 {
			break
		}
	}
}

// check=http: the agent polls the instance's /healthz; a failing probe
// withdraws it, a passing one brings it back, the lease keeps the
// registration alive and re-registers it after an external delete.
func TestHTTPCheck(t *testing.T) {
	t.Parallel()
	a := sharedAgent(t)
	addr, healthy := healthServer(t)
	r, err := registry.Open(t.Context(), "consul://"+a.Addr()+"?check=http&http_interval=1s&http_timeout=500ms&wait=5s")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	svc := fmt.Sprintf("httpcheck-%d", time.Now().UnixNano()%1e9)
	l, err := r.Register(t.Context(), registry.Instance{Service: svc, Address: addr}, registry.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Deregister(context.Background())
	w, err := r.Watch(t.Context(), svc)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	wait := func(what string, d time.Duration, cond func(registry.Snapshot) bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), d)
		defer cancel()
		for {
			sn, err := w.Next(ctx)
			if err != nil {
				t.Fatalf("%s: not seen within %v: %v", what, d, err)
			}
			if !sn.Stale && cond(sn) {
				return
			}
		}
	}
	id := l.Instance().ID
	present := func(sn registry.Snapshot) bool { _, ok := sn.Find(id); return ok }
	wait("listed once the first probe passes", 5*time.Second, present)
	// An update re-registers the service with its check: the agent keeps
	// the check's passing status, so the instance never leaves.
	if err := l.SetWeight(t.Context(), 7); err != nil {
		t.Fatal(err)
	}
	{
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		for {
			sn, err := w.Next(ctx)
			if err != nil {
				cancel()
				t.Fatalf("weight 7 not seen within 3s: %v", err)
			}
			if in, ok := sn.Find(l.Instance().ID); !ok {
				cancel()
				t.Fatalf("the instance left ?passing when its registration was updated")
			} else if in.Weight == 7 {
				break
			}
		}
		cancel()
	}
	healthy.Store(false)
	wait("withdrawn when /healthz fails", 5*time.Second, func(sn registry.Snapshot) bool { return !present(sn) })
	healthy.Store(true)
	wait("back when /healthz passes", 5*time.Second, present)
	c, tr, _ := rawClient(a.Addr())
	defer tr.CloseIdleConnections()
	if err := c.Agent().ServiceDeregister(id); err != nil {
		t.Fatal(err)
	}
	wait("gone after an external deregistration", 3*time.Second, func(sn registry.Snapshot) bool { return !present(sn) })
	wait("re-registered by the lease", 3*time.Second+5*time.Second, present)
}
