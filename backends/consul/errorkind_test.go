package consul_test

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/roster-go/roster/backends/consul"
	"github.com/roster-go/roster/internal/servers/consultest"
	"github.com/roster-go/roster/registry"
)

// ErrorKind classifies what the Consul API client returns from a real
// agent: 404 is ErrNotFound; 400, 413, 403 and a TLS misconfiguration
// are ErrInvalid; the rest is ErrUnavailable.
func TestErrorKind(t *testing.T) {
	t.Parallel()
	const management = "8d3b0e4c-0000-4000-8000-0000000e4c1d"
	a := consultest.StartACL(t, management)
	ctx := t.Context()
	reader, err := a.CreateToken(ctx, "reader", `service_prefix "" { policy = "read" }`)
	if err != nil {
		t.Fatal(err)
	}
	client := func(scheme, token string) *api.Client {
		c, err := api.NewClient(&api.Config{Address: a.Addr(), Scheme: scheme, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	admin := client("http", management)
	q := (&api.QueryOptions{}).WithContext(ctx)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	refused, err := api.NewClient(&api.Config{Address: closed})
	if err != nil {
		t.Fatal(err)
	}

	d, err := consul.NewDriver(consul.Options{Address: a.Addr(), Token: reader})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, regErr := d.Register(ctx, registry.Instance{ID: "i-1", Service: "s", Address: "127.0.0.1:80", Weight: 1}, time.Minute)
	if regErr == nil || strings.Contains(regErr.Error(), reader) {
		t.Fatalf("Register with a read-only token = %v, want a refusal without the token", regErr)
	}
	svc := func(name string) *api.AgentServiceRegistration {
		return &api.AgentServiceRegistration{ID: name, Name: name, Port: 80}
	}
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"404 unknown check", admin.Agent().UpdateTTLOpts("service:none", "", api.HealthPassing, q), registry.ErrNotFound},
		{"404 unknown service", func() error { _, _, err := admin.Agent().Service("none", q); return err }(), registry.ErrNotFound},
		{"400 bad check", admin.Agent().ServiceRegisterOpts(&api.AgentServiceRegistration{Name: "bad", Check: &api.AgentServiceCheck{TTL: "soon"}}, api.ServiceRegisterOpts{}.WithContext(ctx)), registry.ErrInvalid},
		{"413 value too large", func() error {
			_, err := admin.KV().Put(&api.KVPair{Key: "big", Value: make([]byte, 600<<10)}, (&api.WriteOptions{}).WithContext(ctx))
			return err
		}(), registry.ErrInvalid},
		{"403 read-only token", client("http", reader).Agent().ServiceRegisterOpts(svc("ro"), api.ServiceRegisterOpts{}.WithContext(ctx)), registry.ErrInvalid},
		{"403 unknown token", client("http", "00000000-0000-4000-8000-000000000000").Agent().ServiceRegisterOpts(svc("anon"), api.ServiceRegisterOpts{}.WithContext(ctx)), registry.ErrInvalid},
		{"HTTPS to the HTTP port", func() error { _, err := client("https", management).Agent().Self(); return err }(), registry.ErrInvalid},
		{"the driver's own error, wrapped and redacted", regErr, registry.ErrInvalid},
		{"connection refused", func() error { _, err := refused.Agent().Self(); return err }(), registry.ErrUnavailable},
		// Not produced by the agent used here: old agents' lost check,
		// and the answers of a busy one.
		{"500 lost check (old agents)", api.StatusError{Code: http.StatusInternalServerError, Body: `CheckID "service:x" does not have associated TTL`}, registry.ErrNotFound},
		{"429", api.StatusError{Code: http.StatusTooManyRequests, Body: "Your IP is issuing too many concurrent connections"}, registry.ErrUnavailable},
		{"500 no leader", api.StatusError{Code: http.StatusInternalServerError, Body: "No cluster leader"}, registry.ErrUnavailable},
	} {
		if c.err == nil {
			t.Errorf("%s: no error to classify", c.name)
			continue
		}
		t.Logf("%s: %v", c.name, c.err)
		if got := d.ErrorKind(c.err); !errors.Is(got, c.want) {
			t.Errorf("%s: ErrorKind(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
