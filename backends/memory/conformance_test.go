package memory_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// harness runs the suite on one in-process server; each tenant has a
// server of its own (as mem://name gives).
type harness struct {
	srv     *memory.Server
	tenants *sync.Map // tenant → *memory.Server
}

func (h harness) OpenTenant(_ context.Context, tenant string) (*registry.Registry, error) {
	srv, _ := h.tenants.LoadOrStore(tenant, memory.NewServer())
	return registry.New(memory.NewDriver(srv.(*memory.Server)), registry.WithResyncInterval(time.Second)), nil
}

func (h harness) TenantsShareNames() bool { return true }

func (h harness) Open(context.Context) (*registry.Registry, error) {
	return registry.New(memory.NewDriver(h.srv), registry.WithResyncInterval(time.Second)), nil
}

func (h harness) Config() conformance.Config {
	return conformance.Config{TTL: 300 * time.Millisecond, ExpirySlack: 100 * time.Millisecond, Propagation: 500 * time.Millisecond}
}

func (h harness) OpenLinked(context.Context) (*registry.Registry, conformance.Link, error) {
	d := memory.NewDriver(h.srv)
	return registry.New(d, registry.WithResyncInterval(time.Second)), link{d}, nil
}

type link struct{ d *memory.Driver }

func (l link) SetConnected(_ context.Context, ok bool) error { l.d.SetReachable(ok); return nil }

func (h harness) Restart(_ context.Context, keep bool) error {
	h.srv.SetReachable(false)
	if !keep {
		h.srv.Wipe()
	}
	time.Sleep(50 * time.Millisecond) // the server is "down" for a moment
	h.srv.SetReachable(true)
	return nil
}

func (h harness) Wipe(context.Context) error { h.srv.Wipe(); return nil }

func (h harness) DeleteExternally(_ context.Context, in registry.Instance) error {
	h.srv.Delete(in.Service, in.ID)
	return nil
}

func TestConformance(t *testing.T) {
	conformance.Run(t, harness{memory.NewServer(), new(sync.Map)})
}
