// Package dnssrvtest is the conformance harness of the read-only dns+srv
// backend. Call [NewHarness] with a Consul agent from consultest:
//
//	a := consultest.Start(t)
//	conformance.Run(t, dnssrvtest.NewHarness(t, a))
//
// The suite publishes instances through the agent's HTTP API, and reads
// them back through the agent's DNS interface.
package dnssrvtest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/hashicorp/consul/api"

	"github.com/roster-go/roster/backends/dnssrv"
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/consultest"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// URL returns the dns+srv:// URL that reads Consul's <service>.service.consul
// records from the agent's DNS interface, with query appended if not empty.
func URL(a *consultest.Agent, query string) string {
	u := "dns+srv://" + a.DNSAddr() + "/{service}.service.consul"
	if query != "" {
		u += "?" + query
	}
	return u
}

// harnessQuery polls every 100ms: Consul answers with TTL 0, so the
// propagation delay is the poll interval. The endpoints are those the
// conformance check publishes, each a Consul service of its own.
const harnessQuery = "min_poll=100ms&endpoints=http,grpc,metrics&endpoint_name={service}-{endpoint}.service.consul"

// NewHarness returns a conformance.ReadOnly harness on agent a. Registries
// are opened by dns+srv:// URL, so the caller imports backends/dnssrv.
func NewHarness(tb testing.TB, a *consultest.Agent) conformance.Harness {
	tb.Helper()
	if _, ok := backend.Lookup("dns+srv"); !ok {
		tb.Fatal(`dnssrvtest: the dns+srv:// scheme is not registered: import _ "github.com/roster-go/roster/backends/dnssrv"`)
	}
	c, err := api.NewClient(&api.Config{Address: a.Addr()})
	if err != nil {
		tb.Fatal(err)
	}
	return &harness{a: a, c: c}
}

type harness struct {
	a *consultest.Agent
	c *api.Client
}

func (h *harness) MakeDriver(ctx context.Context) (driver.Driver, error) {
	return backend.OpenURL(ctx, h.URL())
}

// URL is the dns+srv:// URL of the harness's registries.
func (h *harness) URL() string { return URL(h.a, harnessQuery) }

func (h *harness) Config() conformance.Config {
	// An agent registration reaches the agent's DNS answers at once
	// (-dev: the catalog is in the agent); the rest is the 100ms poll and
	// a loaded machine.
	return conformance.Config{Propagation: 3 * time.Second}
}

// serviceID is the Consul service ID of a published instance: one per
// service and address, so that publishing again updates it.
func serviceID(in registry.Instance) string { return in.Service + "@" + in.Address }

// Publish registers in with the agent, with its weight as Consul's passing
// weight (0 becomes Consul's default, 1), and each named endpoint as the
// service <service>-<name> at the endpoint's address, the way Consul's DNS
// can answer for a second port.
func (h *harness) Publish(ctx context.Context, in registry.Instance) (string, error) {
	for _, one := range published(in) {
		host, port, err := net.SplitHostPort(one.Address)
		if err != nil {
			return "", err
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return "", err
		}
		reg := &api.AgentServiceRegistration{ID: serviceID(one), Name: one.Service, Address: host, Port: p}
		if in.Weight > 0 {
			reg.Weights = &api.AgentWeights{Passing: int(in.Weight), Warning: 1}
		}
		if err := h.c.Agent().ServiceRegisterOpts(reg, api.ServiceRegisterOpts{}.WithContext(ctx)); err != nil {
			return "", fmt.Errorf("dnssrvtest: publish %s: %w", one.Address, err)
		}
	}
	return dnssrv.InstanceID(in.Address), nil
}

// published is what Publish registers: in, then a service per endpoint.
func published(in registry.Instance) []registry.Instance {
	out := []registry.Instance{in}
	for _, e := range in.Endpoints {
		out = append(out, registry.Instance{Service: in.Service + "-" + e.Name, Address: e.Address})
	}
	return out
}

// Unpublish deregisters the instance and its endpoints from the agent.
func (h *harness) Unpublish(ctx context.Context, in registry.Instance) error {
	opts := (&api.QueryOptions{}).WithContext(ctx)
	for _, one := range published(in) {
		if err := h.c.Agent().ServiceDeregisterOpts(serviceID(one), opts); err != nil {
			return fmt.Errorf("dnssrvtest: unpublish %s: %w", one.Address, err)
		}
	}
	return nil
}
