package natstest

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	rnats "github.com/roster-go/roster/backends/nats"
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/backend"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// harnessBucket is the bucket the conformance suite works in.
const harnessBucket = "conformance"

// Harness returns the conformance.Harness on s, with every fault hook:
// a proxy per partitioned client (Partitioner), Restart, Wipe, a delete
// by a client of its own (ExternalDeleter), and a bucket per tenant.
func (s *Server) Harness() conformance.Harness { return harness{s} }

type harness struct{ s *Server }

func (h harness) open(ctx context.Context, addr, bucket string) (driver.Driver, error) {
	return backend.OpenURL(ctx, h.s.urlAt(addr, "bucket="+bucket))
}

func (h harness) MakeDriver(ctx context.Context) (driver.Driver, error) {
	return h.open(ctx, h.s.addr, harnessBucket)
}

// URL is the harness's URL: the suite opens its observers with it.
func (h harness) URL() string { return h.s.urlAt(h.s.addr, "bucket="+harnessBucket) }

// Config is conformance.LoadedMachine: the server expires TTLs on time,
// and a cut link drops the connection, which ends the watch at once.
func (h harness) Config() conformance.Config {
	c := conformance.LoadedMachine()
	c.ResyncInterval = 5 * time.Second
	return c
}

// MakeTenantDriver makes a driver on the bucket named tenant: each bucket
// is a namespace of its own.
func (h harness) MakeTenantDriver(ctx context.Context, tenant string) (driver.Driver, error) {
	return h.open(ctx, h.s.addr, tenant)
}

func (h harness) TenantsShareNames() bool { return true }

func (h harness) MakeLinkedDriver(ctx context.Context) (driver.Driver, conformance.Link, error) {
	return h.s.proxies.MakeLinkedDriver(h.s.addr, func(addr string) (driver.Driver, error) {
		return h.open(ctx, addr, harnessBucket)
	})
}

func (h harness) Restart(ctx context.Context, keepData bool) error { return h.s.Restart(ctx, keepData) }

func (h harness) Wipe(ctx context.Context) error { return h.s.Wipe(ctx) }

// DeleteExternally purges the instance's key with a client of its own.
func (h harness) DeleteExternally(ctx context.Context, in registry.Instance) error {
	nc, err := h.s.Client()
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	kv, err := js.KeyValue(ctx, harnessBucket)
	if err != nil {
		return err
	}
	return kv.Purge(ctx, rnats.Key(in.Service, in.ID))
}
