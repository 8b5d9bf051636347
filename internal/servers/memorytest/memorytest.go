// Package memorytest is the conformance harness of the memory backend:
//
//	conformance.Run(t, memorytest.NewHarness())
//
// Its registries share one named server, reached by mem://name as well as
// by driver, and it has every fault hook the suite knows.
package memorytest

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

var harnesses atomic.Uint64

// NewHarness returns a harness on a new named server, with every fault
// hook: a one-sided cut per driver (Partitioner), Restart, Wipe, an
// external delete, and a server of its own per tenant (Tenants).
func NewHarness() conformance.Harness {
	name := fmt.Sprintf("memorytest-%d", harnesses.Add(1))
	return &harness{name: name, srv: memory.Named(name)}
}

type harness struct {
	name string
	srv  *memory.Server
}

func (h *harness) MakeDriver(context.Context) (driver.Driver, error) {
	return memory.NewDriver(h.srv), nil
}

// URL names the harness's server: the suite's observers open it.
func (h *harness) URL() string { return "mem://" + h.name }

// Config: expiry is exact (a timer per deadline), so the bounds are short.
func (h *harness) Config() conformance.Config {
	return conformance.Config{TTL: 300 * time.Millisecond, ExpirySlack: 100 * time.Millisecond,
		Propagation: 500 * time.Millisecond, ResyncInterval: time.Second}
}

// MakeTenantDriver: each tenant has a named server of its own, as
// mem://name gives.
func (h *harness) MakeTenantDriver(_ context.Context, tenant string) (driver.Driver, error) {
	return memory.NewDriver(memory.Named(h.name + "-" + tenant)), nil
}

// TenantsShareNames is true: each server is a namespace of its own.
func (h *harness) TenantsShareNames() bool { return true }

// MakeLinkedDriver returns a driver that can be cut off from the server
// alone, a one-sided partition.
func (h *harness) MakeLinkedDriver(context.Context) (driver.Driver, conformance.Link, error) {
	d := memory.NewDriver(h.srv)
	return d, link{d}, nil
}

type link struct{ d *memory.Driver }

func (l link) SetConnected(_ context.Context, ok bool) error { l.d.SetReachable(ok); return nil }

// Restart makes the server unreachable for a moment, losing its data
// unless keep.
func (h *harness) Restart(_ context.Context, keep bool) error {
	h.srv.SetReachable(false)
	if !keep {
		h.srv.Wipe()
	}
	time.Sleep(50 * time.Millisecond) // the server is "down" for a moment
	h.srv.SetReachable(true)
	return nil
}

func (h *harness) Wipe(context.Context) error { h.srv.Wipe(); return nil }

func (h *harness) DeleteExternally(_ context.Context, in registry.Instance) error {
	h.srv.Delete(in.Service, in.ID)
	return nil
}
