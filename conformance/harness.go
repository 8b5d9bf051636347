// Package conformance is the behaviour every Roster backend must show, as
// one suite. Call [Run] from a test with a [Harness] for your backend:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, myHarness{...})
//	}
//
// A Harness makes fresh drivers on the backend under test, and its
// [Config] declares the backend's timings and Registry options. The suite
// wraps each driver with registry.New itself. A harness whose backend
// opens by URL says so with [URLOpener]: the suite then opens its
// observing registries with registry.Open, so the URL path stays tested.
// Each backend's test-server package gives a ready harness, such as
// etcdtest.NewHarness. [RunChecks] runs the same checks outside go test,
// as "roster conformance URL" does.
//
// Fault hooks are optional interfaces. They partition one client, restart
// or wipe the backend, or delete an instance behind its owner's back. A
// check that needs a hook the harness lacks is skipped, with the reason.
// Crashes need no hook, since Lease.Abandon stops heartbeats without
// deregistering. [Tenants], also optional, opens registries of other
// tenants for TenantIsolation.
//
// Every check uses services named "conf-<start>-<run>-<random>-…". So the
// suite never touches other data in a shared deployment. It deregisters
// what it registered. Under RunChecks every record's TTL is at most
// [MaxRecordTTL], so a killed run leaves nothing lasting, and
// [CleanLeftovers] removes what runs killed earlier left. A failure names
// the contract that was broken.
package conformance

import (
	"context"
	"os"
	"strconv"
	"time"

	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// Harness gives the suite access to one backend.
type Harness interface {
	// MakeDriver returns a new driver on the backend, as a new process
	// would open. The suite wraps it with registry.New and closes it.
	MakeDriver(ctx context.Context) (driver.Driver, error)
	// Config declares the backend's timings and known gaps.
	Config() Config
}

// URLOpener is implemented by harnesses whose backend opens by URL. The
// suite then opens the observing registry of most checks with
// registry.Open(ctx, URL()), and the acting one with MakeDriver.
type URLOpener interface {
	URL() string
}

// Config is what a harness declares about its backend.
type Config struct {
	// TTL used by liveness checks (expiry after a crash, outages). It must
	// be at least the backend's minimum TTL. Default 1s.
	TTL time.Duration
	// ExpirySlack: a crashed instance must be gone from Lookup and Watch
	// within TTL + ExpirySlack (etcd: ~1s, Redis: one sweep interval).
	ExpirySlack time.Duration
	// Propagation bounds how long a write takes to reach Lookup and a
	// Watcher on another client. Default 1s.
	Propagation time.Duration
	// StaleDetect bounds how long a watcher cut off from the backend takes
	// to report Stale. Default 2×TTL.
	StaleDetect time.Duration
	// ManyLeases is how many leases ManyLeasesThenClose holds from one
	// process (default 1,000). The environment variable
	// ROSTER_MANY_LEASES, when set, overrides it (to measure a backend's
	// ceiling).
	ManyLeases int
	// ResyncInterval is the registries' resync interval
	// (registry.WithResyncInterval). Zero keeps the Registry's default.
	ResyncInterval time.Duration
	// Skip names checks this backend cannot pass, with the reason, e.g.
	// {"CrashRemovedFromCatalog": "Consul reaps critical services after ≥1m"}.
	Skip map[string]string
}

// LoadedMachine returns the timings of a networked test server (etcd,
// ZooKeeper, Kubernetes, Consul…) on a small machine shared with other
// test runs under -race, where a new client's first call can take a
// second although the server itself propagates in milliseconds. A
// harness starts from it and adjusts what its backend needs:
//
//	c := conformance.LoadedMachine()
//	c.Propagation = 3 * time.Second // writes queue behind Raft applies
//	return c
//
// It is a function, not a variable, so no harness can change another's.
func LoadedMachine() Config {
	return Config{
		// 3s: one slow heartbeat round on a loaded machine must not lose
		// the lease (2s was seen to fail there).
		TTL: 3 * time.Second,
		// Servers expire leases on ticks of about half a second; the rest
		// is headroom for a loaded machine.
		ExpirySlack: 1500 * time.Millisecond,
		Propagation: 2 * time.Second,
		// 2×TTL, the default, stated for readers of a harness.
		StaleDetect: 6 * time.Second,
		// 1,000 registrations at once overrun a single test server's
		// request timeouts under -race; 300 keeps the run short.
		ManyLeases: 300,
	}
}

func (c Config) withDefaults() Config {
	if c.TTL <= 0 {
		c.TTL = time.Second
	}
	if c.Propagation <= 0 {
		c.Propagation = time.Second
	}
	if c.ExpirySlack <= 0 {
		c.ExpirySlack = c.Propagation
	}
	if c.StaleDetect <= 0 {
		c.StaleDetect = 2 * c.TTL
	}
	if n, err := strconv.Atoi(os.Getenv("ROSTER_MANY_LEASES")); err == nil && n > 0 {
		c.ManyLeases = n
	}
	if c.ManyLeases <= 0 {
		c.ManyLeases = 1000
	}
	return c
}

// Partitioner is implemented by harnesses that can cut one client off
// from the backend while others keep access (a TCP proxy in front of the
// server, say).
type Partitioner interface {
	// MakeLinkedDriver returns a driver whose connection to the backend
	// can be cut and restored with the returned Link.
	MakeLinkedDriver(ctx context.Context) (driver.Driver, Link, error)
}

// Link is one client's connection to the backend.
type Link interface {
	// SetConnected cuts (false) or restores (true) the connection. Cutting
	// drops established connections and refuses new ones.
	SetConnected(ctx context.Context, connected bool) error
}

// Restarter is implemented by harnesses that can restart the backend.
type Restarter interface {
	// Restart stops and starts the backend. With keepData false it comes
	// back empty (like a Consul -dev agent or Redis without persistence).
	Restart(ctx context.Context, keepData bool) error
}

// Wiper is implemented by harnesses that can delete all of the backend's
// data while it runs (FLUSHALL, a new etcd data directory).
type Wiper interface {
	Wipe(ctx context.Context) error
}

// ExternalDeleter is implemented by harnesses that can remove one
// instance behind its owner's back, as an operator or script would.
type ExternalDeleter interface {
	DeleteExternally(ctx context.Context, inst registry.Instance) error
}

// ReadOnly is implemented by harnesses of read-only backends (DNS SRV),
// whose Registry cannot register. The suite then publishes instances
// through the server's own API (Consul's agent API, say) and runs the
// checks that only read (Lookup and Watch) in a form of their own; every
// check that needs Registry.Register is skipped as "n/a: read-only", with
// the reason, never passed.
type ReadOnly interface {
	// Publish makes in (Service, Address, Weight, Endpoints' names and
	// addresses) visible to the backend
	// through the server's own API, replacing an earlier Publish of the
	// same Service and Address, and returns the ID the backend reports it
	// under.
	Publish(ctx context.Context, in registry.Instance) (id string, err error)
	// Unpublish withdraws what Publish made visible.
	Unpublish(ctx context.Context, in registry.Instance) error
}

// Tenants is implemented by harnesses that can make drivers for other
// tenants of the same deployment — another key prefix (Redis, etcd),
// another server (memory), another ACL token (Consul) — so that
// TenantIsolation can check that tenants never see or touch each other's
// instances.
type Tenants interface {
	// MakeTenantDriver returns a new driver of tenant ("tenanta",
	// "tenantb": lowercase letters). Two calls with the same tenant share
	// a namespace. The suite wraps it and closes it.
	MakeTenantDriver(ctx context.Context, tenant string) (driver.Driver, error)
	// TenantsShareNames is true when each tenant has a namespace of its
	// own, where a service name may exist in both (a key prefix); false
	// when tenants split one catalog by name, tenant t owning the services
	// named "t-…" (Consul OSS, which has no namespaces, with one ACL token
	// per tenant).
	TenantsShareNames() bool
}
