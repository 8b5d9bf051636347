package consultest

import (
	"context"
	"fmt"
	"hash/crc32"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/roster-go/roster/backends/consul"
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/testserver"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// NewHarness returns the conformance harness of the Consul backend on
// agent a, for conformance.Run and for suites built on it. Its registries
// use a 5s blocking wait, so that the wait-timeout path runs often, and a
// 5s resync. It implements the fault hooks:
//
//   - conformance.Partitioner: a TCP proxy between the registry and the
//     agent (closed when tb ends);
//   - conformance.Restarter: Agent.Restart, a kill and a start, with or
//     without the agent's data dir;
//   - conformance.ExternalDeleter: a deregistration through the agent's
//     HTTP API, as `consul services deregister -id` does.
//
// It has no conformance.Wiper: Consul cannot delete every agent
// registration while the agent runs, so WipeReregistersAndResyncs is
// declared skipped; its equivalent, an agent restarted without its data,
// is RestartLosingData.
func NewHarness(tb testing.TB, a *Agent) conformance.Harness { return NewHarnessAs(tb, a, "") }

// NewHarnessAs is NewHarness with registries that use the ACL token
// (from CreateToken on a StartACL agent); the fault hooks use the
// agent's management token. On a StartACL agent it also has tenants
// (conformance.Tenants): Consul OSS has no namespaces, so a tenant is an
// ACL token that may write only the services named "<tenant>-…".
func NewHarnessAs(tb testing.TB, a *Agent, token string) conformance.Harness {
	h := &harness{a: a, token: token}
	tb.Cleanup(h.proxies.Close)
	if a.ManagementToken() == "" {
		return h
	}
	return &aclHarness{harness: h, tokens: map[string]string{}}
}

// TenantPolicy is the ACL policy of a tenant that owns the services named
// "<tenant>-…" and sees no others.
func TenantPolicy(tenant string) string {
	return fmt.Sprintf("service_prefix %q {\n  policy = \"write\"\n}\nnode_prefix \"\" {\n  policy = \"read\"\n}\n", tenant+"-")
}

// aclHarness is a harness on an agent with ACLs, whose tenants are tokens.
type aclHarness struct {
	*harness
	mu     sync.Mutex
	tokens map[string]string // tenant → token
}

func (h *aclHarness) MakeTenantDriver(ctx context.Context, tenant string) (driver.Driver, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	token, ok := h.tokens[tenant]
	if !ok {
		var err error
		if token, err = h.a.CreateToken(ctx, "tenant-"+tenant, TenantPolicy(tenant)); err != nil {
			return nil, err
		}
		h.tokens[tenant] = token
	}
	return h.openAs(h.a.Addr(), token)
}

// TenantsShareNames is false: tenants split one catalog by service name.
func (h *aclHarness) TenantsShareNames() bool { return false }

type harness struct {
	a     *Agent
	token string

	proxies testserver.Proxies
}

func (h *harness) MakeDriver(context.Context) (driver.Driver, error) { return h.open(h.a.Addr()) }

// URL is the consul:// URL of what MakeDriver makes: the suite opens its
// observers with it.
func (h *harness) URL() string {
	u := "consul://" + h.a.Addr() + "?wait=5s"
	if h.token != "" {
		u += "&token=" + url.QueryEscape(h.token)
	}
	return u
}

// open makes a driver on the agent API at addr. The call timeout is the
// default (10s): the agent registers one service at a time, each a Raft
// apply, so a hundred concurrent registrations on a loaded 2-core machine
// take seconds.
func (h *harness) open(addr string) (driver.Driver, error) { return h.openAs(addr, h.token) }

func (h *harness) openAs(addr, token string) (driver.Driver, error) {
	d, err := consul.NewDriver(consul.Options{Address: addr, Wait: 5 * time.Second, Token: token})
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return d, nil
}

func (h *harness) Config() conformance.Config {
	// The agent's TTL timer is exact, but on 2 shared cores under -race
	// (load average 10 measured) the agent itself sometimes takes over a
	// second to answer a heartbeat: TTL 3s (heartbeat every 1s) leaves two
	// heartbeats of margin. Each registration and heartbeat is a write the
	// agent syncs to its data directory under its state lock: 1,000 leases
	// at the default TTL is the agent's ceiling there, not the driver's
	// (TestManyLeasesWithinAgentConnLimit runs 1,000 on a RAM disk;
	// docs/backends/consul.md has the figures), hence ManyLeases 300.
	c := conformance.LoadedMachine()
	c.ResyncInterval = 5 * time.Second
	// Check critical → Raft apply → blocking query wake-up → watcher:
	// milliseconds when idle, up to a second or so under load.
	c.ExpirySlack = 2 * time.Second
	// A register or deregister reaches another client in milliseconds
	// (docs/bench/consul.md) but queues behind Raft applies when the
	// suite's hundred concurrent registrations share 2 loaded cores.
	c.Propagation = 3 * time.Second
	c.Skip = map[string]string{
		"WipeReregistersAndResyncs": "Consul has no way to delete every agent registration while the agent runs; " +
			"its equivalent, an agent restarted without its data, is RestartLosingData",
	}
	return c
}

// MakeLinkedDriver puts a TCP proxy between the driver and the agent.
func (h *harness) MakeLinkedDriver(context.Context) (driver.Driver, conformance.Link, error) {
	return h.proxies.MakeLinkedDriver(h.a.Addr(), h.open)
}

func (h *harness) Restart(ctx context.Context, keepData bool) error {
	return h.a.Restart(ctx, keepData)
}

// DeleteExternally deregisters the instance through the agent's HTTP API
// (PUT /v1/agent/service/deregister/<id>), with the management token
// when the agent has ACLs.
func (h *harness) DeleteExternally(ctx context.Context, in registry.Instance) error {
	u := "http://" + h.a.Addr() + "/v1/agent/service/deregister/" + url.PathEscape(in.ID)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, nil)
	if err != nil {
		return err
	}
	if t := h.a.ManagementToken(); t != "" {
		req.Header.Set("X-Consul-Token", t)
	}
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("consultest: deregister %s: %w", in.ID, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("consultest: deregister %s: %s", in.ID, resp.Status)
	}
	return nil
}

// WriteForeign registers in through the catalog (PUT /v1/catalog/register)
// on a node of its own, named to sort before the agent's, with no check:
// what another team's tool or an external-service registrar writes.
func (h *harness) WriteForeign(ctx context.Context, in registry.Instance) (func(context.Context) error, error) {
	host, portS, err := net.SplitHostPort(in.Address)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portS)
	if err != nil {
		return nil, err
	}
	c, err := api.NewClient(&api.Config{Address: h.a.Addr(), Token: h.a.ManagementToken()})
	if err != nil {
		return nil, err
	}
	node := "0-foreign-" + strconv.FormatUint(uint64(crc32.ChecksumIEEE([]byte(in.Service+"/"+in.ID))), 16)
	reg := &api.CatalogRegistration{Node: node, Address: host, Service: &api.AgentService{
		ID: in.ID, Service: in.Service, Address: host, Port: port,
		Meta:    map[string]string{"weight": strconv.FormatUint(uint64(in.Weight), 10)},
		Weights: api.AgentWeights{Passing: max(int(in.Weight), 1), Warning: 1},
	}}
	if _, err := c.Catalog().Register(reg, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return nil, fmt.Errorf("consultest: catalog register %s on %s: %w", in.ID, node, err)
	}
	return func(ctx context.Context) error {
		_, err := c.Catalog().Deregister(&api.CatalogDeregistration{Node: node}, (&api.WriteOptions{}).WithContext(ctx))
		return err
	}, nil
}
