package etcdtest

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// harnessPrefix is the key prefix the conformance suite works under.
const harnessPrefix = "/roster-conformance"

// harnessProgress is the stall-detection interval of the harness's
// registries: short enough that a silently stalled watcher goes stale well
// within StaleDetect, long enough that a busy 2-core machine under -race
// answers the probe within it.
const harnessProgress = "progress_interval=1s"

// NewHarness starts a cluster as cfg describes, closed when t ends, and
// returns a conformance.Harness on it with every fault hook: a Link per
// partitioned client (Partitioner), Restart (Restarter), Wipe (Wiper),
// and a delete by a client of its own (ExternalDeleter). The backend's
// conformance test is then one line per topology:
//
//	conformance.Run(t, etcdtest.NewHarness(t, etcdtest.Config{Members: 3}))
//
// Registries are opened by etcd:// URL, so the caller imports
// backends/etcd, which registers the scheme (etcdtest cannot import it:
// that package's own tests use etcdtest).
func NewHarness(t testing.TB, cfg Config) conformance.Harness {
	t.Helper()
	if _, ok := backend.Lookup("etcd"); !ok {
		t.Fatal(`etcdtest: the etcd:// scheme is not registered: import _ "github.com/roster-go/roster/backends/etcd"`)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return &harness{c: c}
}

// HarnessPrefix is the key prefix the harness's registries work under:
// a user of NewHarnessAs needs a role on HarnessPrefix + "/".
const HarnessPrefix = harnessPrefix

// NewHarnessAs is NewHarness with registries that log in as user (one of
// cfg.Auth's); the fault hooks log in as root.
func NewHarnessAs(t testing.TB, cfg Config, user, password string) conformance.Harness {
	h := NewHarness(t, cfg).(*harness)
	h.login = []string{"username=" + url.QueryEscape(user), "password=" + url.QueryEscape(password)}
	return h
}

// harness runs the conformance suite on a Cluster.
type harness struct {
	c     *Cluster
	login []string // URL options: username and password
}

func (h *harness) options() []string { return append([]string{harnessProgress}, h.login...) }

func (h *harness) MakeDriver(ctx context.Context) (driver.Driver, error) {
	return backend.OpenURL(ctx, h.URL())
}

// URL is the etcd:// URL of the harness's registries.
func (h *harness) URL() string { return h.c.URL(harnessPrefix, h.options()...) }

// Config is conformance.LoadedMachine: real etcd propagates in
// milliseconds (docs/bench/etcd.md), but the servers run inside the test
// binary under -race beside other packages' tests. The TTL floor is 2s;
// the server's expiry loop runs every 0.5s; a cut-off watcher is reported
// within about 2×progress_interval, or at once when the connection
// drops. 1,000 registrations at once (2,000 Raft proposals) overrun the
// 5s request timeout there; without -race one member holds 1,000
// (docs/reliability.md), hence ManyLeases 300.
func (h *harness) Config() conformance.Config {
	c := conformance.LoadedMachine()
	c.ResyncInterval = 5 * time.Second
	c.Skip = h.skip()
	return c
}

// skip declares TenantIsolation skipped for a user of NewHarnessAs, whose
// role holds the harness's prefix only.
func (h *harness) skip() map[string]string {
	if h.login == nil {
		return nil
	}
	return map[string]string{"TenantIsolation": "the user's role holds one prefix; tenants are other prefixes"}
}

// MakeTenantDriver makes a driver under the key prefix /tenant: the
// prefix is the etcd backend's namespace.
func (h *harness) MakeTenantDriver(ctx context.Context, tenant string) (driver.Driver, error) {
	return backend.OpenURL(ctx, h.c.URL("/"+tenant, h.options()...))
}

// TenantsShareNames is true: each prefix is a namespace of its own.
func (h *harness) TenantsShareNames() bool { return true }

// MakeLinkedDriver makes a driver through a Link of its own. The Link is
// closed with the Cluster.
func (h *harness) MakeLinkedDriver(ctx context.Context) (driver.Driver, conformance.Link, error) {
	l, err := h.c.NewLink()
	if err != nil {
		return nil, nil, err
	}
	d, err := backend.OpenURL(ctx, l.URL(harnessPrefix, h.options()...))
	if err != nil {
		l.Close()
		return nil, nil, err
	}
	return d, l, nil
}

func (h *harness) Restart(ctx context.Context, keepData bool) error {
	return h.c.Restart(ctx, keepData)
}

func (h *harness) Wipe(ctx context.Context) error { return h.c.Wipe(ctx) }

// DeleteExternally deletes the instance's key with a client of its own,
// as an operator's etcdctl would.
func (h *harness) DeleteExternally(ctx context.Context, in registry.Instance) error {
	cli, err := h.c.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	_, err = cli.Delete(ctx, harnessPrefix+"/"+in.Service+"/"+in.ID)
	return err
}
