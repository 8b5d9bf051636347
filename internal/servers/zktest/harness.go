package zktest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/go-zookeeper/zk"

	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/testserver"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// HarnessRoot is the root znode the conformance suite works under.
const HarnessRoot = "/roster-conformance"

// harnessQuery: a 3s reading session, so that a client stuck on a server
// that lost its data is replaced within the suite's bounds.
const harnessQuery = "session_timeout=3s"

// NewHarness returns the conformance harness of the ZooKeeper backend on
// server s, with every fault hook:
//
//   - conformance.Partitioner: a TCP proxy between the registry and the
//     server (closed when tb ends);
//   - conformance.Restarter: Server.Restart, a kill and a start, with or
//     without the data directory;
//   - conformance.Wiper: a recursive delete of the root by a client of its
//     own, ephemeral znodes included;
//   - conformance.ExternalDeleter: a delete of the instance's znode, as
//     zkCli.sh's delete would;
//   - conformance.Tenants: a root per tenant, the second nested in the
//     first (TenantRoot), the layout most likely to leak.
//
// Registries are opened by zk:// URL, so the caller imports
// backends/zookeeper, which registers the scheme.
func NewHarness(tb testing.TB, s *Server) conformance.Harness {
	tb.Helper()
	return NewHarnessWith(tb, s, "")
}

// NewHarnessWith is NewHarness with more URL options, such as
// "layout=curator", on every registry it opens.
func NewHarnessWith(tb testing.TB, s *Server, query string) conformance.Harness {
	tb.Helper()
	if _, ok := backend.Lookup("zk"); !ok {
		tb.Fatal(`zktest: the zk:// scheme is not registered: import _ "github.com/roster-go/roster/backends/zookeeper"`)
	}
	q := harnessQuery
	if query != "" {
		q += "&" + query
	}
	h := &harness{s: s, query: q}
	tb.Cleanup(h.proxies.Close)
	return h
}

type harness struct {
	s     *Server
	query string // harnessQuery and the caller's options

	proxies testserver.Proxies
}

func (h *harness) MakeDriver(ctx context.Context) (driver.Driver, error) {
	return backend.OpenURL(ctx, h.URL())
}

// URL is the zk:// URL of the harness's registries.
func (h *harness) URL() string { return url([]string{h.s.Addr()}, HarnessRoot, h.query) }

// TenantRoot returns the root of a conformance tenant. Tenant "tenanta"
// gets /roster-conformance-tenanta and every other tenant a root nested in
// it, /roster-conformance-tenanta/_<tenant>: a tenant inside another's
// root is where a layout would leak, so TenantIsolation checks that one.
func TenantRoot(tenant string) string {
	outer := HarnessRoot + "-tenanta"
	if tenant == "tenanta" {
		return outer
	}
	return outer + "/_" + tenant
}

// MakeTenantDriver implements conformance.Tenants: a driver on the
// tenant's root.
func (h *harness) MakeTenantDriver(ctx context.Context, tenant string) (driver.Driver, error) {
	return backend.OpenURL(ctx, url([]string{h.s.Addr()}, TenantRoot(tenant), h.query))
}

// TenantsShareNames is true: each root is a namespace of its own.
func (h *harness) TenantsShareNames() bool { return true }

// Config is conformance.LoadedMachine as it is: ZooKeeper propagates in
// milliseconds, sessions expire on tick boundaries (0.5s) and the
// watchdog of an abandoned lease fires a TTL after its last heartbeat, so
// ExpirySlack's headroom is for the JVM under load. One session per TTL
// holds a thousand leases as a thousand cheap znodes; ManyLeases 300
// keeps the race-detector run short, as on etcd.
func (h *harness) Config() conformance.Config {
	c := conformance.LoadedMachine()
	c.ResyncInterval = 5 * time.Second
	return c
}

// MakeLinkedDriver puts a TCP proxy between the driver and the server.
func (h *harness) MakeLinkedDriver(ctx context.Context) (driver.Driver, conformance.Link, error) {
	return h.proxies.MakeLinkedDriver(h.s.Addr(), func(addr string) (driver.Driver, error) {
		return backend.OpenURL(ctx, url([]string{addr}, HarnessRoot, h.query))
	})
}

func (h *harness) Restart(ctx context.Context, keepData bool) error {
	return h.s.Restart(ctx, keepData)
}

// Wipe deletes the root and everything under it.
func (h *harness) Wipe(ctx context.Context) error {
	return h.withConn(ctx, func(c *zk.Conn) error { return deleteTree(c, HarnessRoot) })
}

// DeleteExternally deletes the instance's znode.
func (h *harness) DeleteExternally(ctx context.Context, in registry.Instance) error {
	p := HarnessRoot + "/" + in.Service + "/" + in.ID
	return h.withConn(ctx, func(c *zk.Conn) error { return c.Delete(p, -1) })
}

// withConn runs fn on a client of its own, connected to the server.
func (h *harness) withConn(ctx context.Context, fn func(*zk.Conn) error) error {
	c, err := Connect(ctx, h.s.Addr())
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}

// Connect returns a client with a session on the servers, for tests that
// act behind the driver's back. The caller closes it.
func Connect(ctx context.Context, addrs ...string) (*zk.Conn, error) {
	c, events, err := zk.Connect(addrs, 10*time.Second, zk.WithLogger(quiet{}), zk.WithLogInfo(false))
	if err != nil {
		return nil, fmt.Errorf("zktest: %w", err)
	}
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				go drain(events)
				return c, nil
			}
		case <-ctx.Done():
			c.Close()
			return nil, fmt.Errorf("zktest: connect %v: %w", addrs, ctx.Err())
		}
	}
}

// drain reads the client's events until it closes them (Close), so that
// the client never blocks on a full channel.
func drain(events <-chan zk.Event) {
	for range events {
	}
}

// deleteTree deletes p and everything under it.
func deleteTree(c *zk.Conn, p string) error {
	kids, _, err := c.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, k := range kids {
		if err := deleteTree(c, p+"/"+k); err != nil {
			return err
		}
	}
	if err := c.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	return nil
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}
