package agent_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/roster-go/roster/agent"
	"github.com/roster-go/roster/registry"
)

// The instances of TestPickByEndpoint: one serving http and grpc (its
// primary the http port), one serving grpc only, and one with one port,
// which serves every name.
var (
	both = registry.Instance{ID: "both", Service: "api", Address: "10.0.0.1:80", Endpoints: []registry.Endpoint{
		{Name: "http", Address: "10.0.0.1:80", Protocol: "http"}, {Name: "grpc", Address: "10.0.0.1:90", Protocol: "grpc"}}}
	grpcOnly = registry.Instance{ID: "grpc-only", Service: "api", Address: "10.0.0.2:90", Endpoints: []registry.Endpoint{
		{Name: "grpc", Address: "10.0.0.2:90"}}}
	onePort = registry.Instance{ID: "one-port", Service: "api", Address: "10.0.0.3:80"}
)

// TestPickByEndpoint: a pick by endpoint name answers that endpoint's
// address, never picks an instance that does not serve the name, and the
// list shows each instance once with its endpoints.
func TestPickByEndpoint(t *testing.T) {
	onBackends(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, agent.Config{})
		for _, in := range []registry.Instance{both, grpcOnly, onePort} {
			f.register(in)
		}
		list := f.waitInstances("api", 10*time.Second, func(l agent.Instances) bool { return len(l.Instances) == 3 })
		for _, in := range list.Instances {
			if in.ID == "both" && (len(in.Endpoints) != 2 || in.Endpoints[1] != both.Endpoints[1]) {
				t.Errorf("listed %+v, want its two endpoints", in)
			}
		}
		for _, c := range []struct {
			endpoint string
			want     map[string]string // instance ID → the address answered
		}{
			{"grpc", map[string]string{"both": "10.0.0.1:90", "grpc-only": "10.0.0.2:90", "one-port": "10.0.0.3:80"}},
			{"http", map[string]string{"both": "10.0.0.1:80", "one-port": "10.0.0.3:80"}},
			{"metrics", map[string]string{"one-port": "10.0.0.3:80"}}, // the named primaries are not "metrics"
			{"", map[string]string{"both": "10.0.0.1:80", "grpc-only": "10.0.0.2:90", "one-port": "10.0.0.3:80"}},
		} {
			seen := map[string]int{}
			for range 30 {
				p := f.pick(agent.PickRequest{Service: "api", Strategy: "round_robin", Endpoint: c.endpoint})
				f.report(p.Token, "success", 1)
				want, ok := c.want[p.Instance.ID]
				if !ok || p.Endpoint.Address != want {
					t.Fatalf("endpoint %q: picked %s at %+v, want one of %v", c.endpoint, p.Instance.ID, p.Endpoint, c.want)
				}
				if wantName := c.endpoint; p.Endpoint.Name != wantName && p.Instance.ID != "one-port" {
					t.Errorf("endpoint %q: answered %+v", c.endpoint, p.Endpoint)
				}
				seen[p.Instance.ID]++
			}
			if len(seen) != len(c.want) {
				t.Errorf("endpoint %q: picked %v, want each of %v", c.endpoint, seen, c.want)
			}
		}
	})
}

// TestPickByEndpointErrors: a name no instance serves is 503
// no_instances; a name no instance could announce is 400, named.
func TestPickByEndpointErrors(t *testing.T) {
	f := newMemFixture(t, agent.Config{})
	f.register(grpcOnly)
	for _, c := range []struct {
		body   agent.PickRequest
		status int
		code   string
	}{
		{agent.PickRequest{Service: "api", Endpoint: "http"}, http.StatusServiceUnavailable, "no_instances"},
		{agent.PickRequest{Service: "api", Endpoint: "GRPC"}, http.StatusBadRequest, "invalid"},
		{agent.PickRequest{Service: "api", Endpoint: "a-very-long-port-name"}, http.StatusBadRequest, "invalid"},
	} {
		var e agent.Error
		if st := do(t, "POST", f.url+"/v1/pick", c.body, &e); st != c.status || e.Code != c.code || !contains(e.Error, "endpoint") {
			t.Errorf("%+v: %d %+v, want %d %s naming the endpoint", c.body, st, e, c.status, c.code)
		}
	}
	if p := f.pick(agent.PickRequest{Service: "api", Endpoint: "grpc"}); p.Endpoint.Address != "10.0.0.2:90" {
		t.Errorf("grpc: %+v", p.Endpoint)
	}
}

// TestTemplateEndpoint: a template reaches an endpoint by name, and skips
// the instances that do not serve it.
func TestTemplateEndpoint(t *testing.T) {
	f := newMemFixture(t, agent.Config{})
	for _, in := range []registry.Instance{both, grpcOnly, onePort} {
		f.register(in)
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "grpc.tmpl"), filepath.Join(dir, "grpc.conf")
	tmpl := `{{range service "api"}}{{with endpoint . "http"}}server {{.}};{{"\n"}}{{end}}{{end}}`
	if err := os.WriteFile(in, []byte(tmpl), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- f.agent.RunTemplates(ctx, agent.TemplateConfig{Templates: []agent.Template{{In: in, Out: out}}})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	if got, want := waitFile(t, out, "server"), "server 10.0.0.1:80;\nserver 10.0.0.3:80;\n"; got != want {
		t.Errorf("rendered %q, want %q: the http ports, and not grpc-only's", got, want)
	}
}

// TestRegisterEndpoints: a local registration announces its endpoints,
// and a pick by name reaches them.
func TestRegisterEndpoints(t *testing.T) {
	f := newMemFixture(t, agent.Config{})
	var in registry.Instance
	body := map[string]any{"service": "web", "ttl": "10s", "endpoints": []map[string]string{
		{"name": "http", "address": "127.0.0.1:8080"}, {"name": "grpc", "address": "LOCALHOST:9090", "protocol": "grpc"}}}
	if st := do(t, "POST", f.url+"/v1/register", body, &in); st != http.StatusOK {
		t.Fatalf("register: %d", st)
	}
	if in.Address != "127.0.0.1:8080" || len(in.Endpoints) != 2 || in.Endpoints[1].Address != "localhost:9090" {
		t.Fatalf("registered %+v, want the first endpoint as primary and canonical addresses", in)
	}
	if p := f.pick(agent.PickRequest{Service: "web", Endpoint: "grpc"}); p.Endpoint != in.Endpoints[1] {
		t.Errorf("pick grpc: %+v, want %+v", p.Endpoint, in.Endpoints[1])
	}
	var e agent.Error
	bad := map[string]any{"service": "web", "address": "127.0.0.1:1", "endpoints": []map[string]string{{"name": "Bad", "address": "127.0.0.1:2"}}}
	if st := do(t, "POST", f.url+"/v1/register", bad, &e); st != http.StatusBadRequest || !contains(e.Error, "endpoints[0].name") {
		t.Errorf("register with a bad endpoint name: %d %+v", st, e)
	}
}
