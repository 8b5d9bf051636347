// Package rosterkratos runs kratos applications on a Roster registry. New
// returns a Registry that is both kratos' registry.Registrar and its
// registry.Discovery, so an app's transport/grpc and transport/http
// clients reach services through any Roster backend unchanged:
//
//	reg, err := registry.Open(ctx, "redis://10.0.0.1:6379/0")
//	r := rosterkratos.New(reg)
//	app := kratos.New(kratos.Name("user-svc"), kratos.Server(srv), kratos.Registrar(r))
//	conn, err := grpc.DialInsecure(ctx, grpc.WithEndpoint("discovery:///user-svc"), grpc.WithDiscovery(r))
//
// A kratos endpoint URL ("grpc://10.0.0.1:9000") becomes a Roster named
// endpoint: its scheme is the name, its host the address. An instance
// registered by Roster itself is shown to kratos with one URL per named
// endpoint, and an instance with one port as both grpc:// and http://,
// since a one-port instance serves every name.
//
// Deregister waits DefaultDrainDelay after the record is gone before it
// returns. kratos stops its servers right after Deregister, and the delay
// lets every client's watch drop the instance first, so a rolling restart
// fails no call.
package rosterkratos

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	kregistry "github.com/go-kratos/kratos/v2/registry"

	"github.com/roster-go/roster/registry"
)

// DefaultDrainDelay is how long Deregister waits after removing the
// record: enough for watches on every backend to see it (docs/benchmarks.md
// has the deregister-to-watcher figures, all well under a second).
const DefaultDrainDelay = time.Second

// Registry is a Roster registry seen as kratos' Registrar and Discovery.
// It is safe for concurrent use.
type Registry struct {
	reg   *registry.Registry
	drain time.Duration
	opts  []registry.RegisterOption

	mu     sync.Mutex
	leases map[string]*registry.Lease // by service and ID
}

// Option configures a Registry.
type Option func(*Registry)

// WithDrainDelay sets how long Deregister waits after removing the record
// (0: return at once).
func WithDrainDelay(d time.Duration) Option { return func(r *Registry) { r.drain = max(d, 0) } }

// WithRegisterOptions passes options, such as registry.TTL, to every
// registration.
func WithRegisterOptions(opts ...registry.RegisterOption) Option {
	return func(r *Registry) { r.opts = append(r.opts, opts...) }
}

// New returns reg as kratos' registry.Registrar and registry.Discovery.
// Closing reg ends every registration and watch made through it.
func New(reg *registry.Registry, opts ...Option) *Registry {
	r := &Registry{reg: reg, drain: DefaultDrainDelay, leases: map[string]*registry.Lease{}}
	for _, f := range opts {
		f(r)
	}
	return r
}

var (
	_ kregistry.Registrar = (*Registry)(nil)
	_ kregistry.Discovery = (*Registry)(nil)
)

func leaseKey(service, id string) string { return service + "\x00" + id }

// Register announces si and keeps it alive until Deregister. The context
// bounds the first write only. Registering the same service and ID again
// replaces the earlier registration.
func (r *Registry) Register(ctx context.Context, si *kregistry.ServiceInstance) error {
	inst, err := toInstance(si)
	if err != nil {
		return err
	}
	l, err := r.reg.Register(ctx, inst, r.opts...)
	if err != nil {
		return err
	}
	r.mu.Lock()
	old := r.leases[leaseKey(si.Name, l.Instance().ID)]
	r.leases[leaseKey(si.Name, l.Instance().ID)] = l
	r.mu.Unlock()
	if old != nil {
		old.Abandon() // the new registration holds the same record
	}
	return nil
}

// Deregister removes si's record, then waits the drain delay (bounded by
// ctx) so that clients stop picking it before its servers stop.
// Deregistering an instance this Registry did not register is an error
// wrapping registry.ErrNotFound.
func (r *Registry) Deregister(ctx context.Context, si *kregistry.ServiceInstance) error {
	if si == nil {
		return fmt.Errorf("rosterkratos: deregister: %w: nil instance", registry.ErrInvalid)
	}
	k := leaseKey(si.Name, si.ID)
	r.mu.Lock()
	l := r.leases[k]
	delete(r.leases, k)
	r.mu.Unlock()
	if l == nil {
		return fmt.Errorf("rosterkratos: deregister %s/%s: %w: not registered here", si.Name, si.ID, registry.ErrNotFound)
	}
	if err := l.Deregister(ctx); err != nil {
		return err
	}
	if r.drain == 0 {
		return nil
	}
	t := time.NewTimer(r.drain)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return nil
}

// GetService returns the live instances of a service. While the registry
// is unreachable it returns the last known instances with the error.
func (r *Registry) GetService(ctx context.Context, name string) ([]*kregistry.ServiceInstance, error) {
	snap, err := r.reg.Lookup(ctx, name)
	if err != nil && len(snap.Instances) == 0 {
		return nil, err
	}
	return fromSnapshot(snap), nil
}

// Watch follows a service until ctx is done or the Watcher is stopped.
func (r *Registry) Watch(ctx context.Context, name string) (kregistry.Watcher, error) {
	ctx, cancel := context.WithCancel(ctx)
	w, err := r.reg.Watch(ctx, name)
	if err != nil {
		cancel()
		return nil, err
	}
	return &watcher{w: w, ctx: ctx, cancel: cancel}, nil
}

// watcher is kratos' Watcher over a Roster Watcher.
type watcher struct {
	w      *registry.Watcher
	ctx    context.Context
	cancel context.CancelFunc
	seen   bool // a non-empty list was returned
}

// Next returns the instances on the first call once there are any, then
// after every change. A backend fault is not an error here: kratos'
// resolver would log it and sleep a second, while the Roster watch keeps
// the last instances and recovers by itself, so Next waits for that.
func (w *watcher) Next() ([]*kregistry.ServiceInstance, error) {
	for {
		snap, err := w.w.Next(w.ctx)
		if err != nil && (errors.Is(err, registry.ErrClosed) || w.ctx.Err() != nil) {
			return nil, context.Canceled // kratos stops watching on Canceled
		}
		if err != nil && snap.Stale && w.seen {
			continue // the list is unchanged; the Roster watch retries
		}
		if len(snap.Instances) == 0 && !w.seen {
			continue // kratos: the first Next waits for instances
		}
		w.seen = true
		return fromSnapshot(snap), nil
	}
}

// Stop ends the watch; a blocked Next returns.
func (w *watcher) Stop() error {
	w.cancel()
	return w.w.Close()
}

// toInstance maps a kratos instance onto a Roster one. Endpoint URLs
// become named endpoints; the first is the primary address.
func toInstance(si *kregistry.ServiceInstance) (registry.Instance, error) {
	if si == nil {
		return registry.Instance{}, fmt.Errorf("rosterkratos: register: %w: nil instance", registry.ErrInvalid)
	}
	inst := registry.Instance{Service: si.Name, ID: si.ID, Version: si.Version}
	if len(si.Metadata) > 0 {
		inst.Metadata = make(map[string]string, len(si.Metadata))
		for k, v := range si.Metadata {
			inst.Metadata[k] = v
		}
	}
	for i, raw := range si.Endpoints {
		u, err := url.Parse(raw)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return inst, &registry.FieldError{Field: fmt.Sprintf("endpoints[%d]", i), Reason: fmt.Sprintf("%q is not a scheme://host:port URL", raw)}
		}
		inst.Endpoints = append(inst.Endpoints, registry.Endpoint{Name: u.Scheme, Address: u.Host, Protocol: u.Scheme})
	}
	return inst, nil
}

// fromSnapshot maps Roster instances onto kratos ones.
func fromSnapshot(snap registry.Snapshot) []*kregistry.ServiceInstance {
	out := make([]*kregistry.ServiceInstance, 0, len(snap.Instances))
	for _, in := range snap.Instances {
		if in.Weight == 0 {
			continue // draining: kratos has no weights to say so
		}
		out = append(out, fromInstance(in))
	}
	return out
}

func fromInstance(in registry.Instance) *kregistry.ServiceInstance {
	si := &kregistry.ServiceInstance{ID: in.ID, Name: in.Service, Version: in.Version, Metadata: map[string]string{}}
	for k, v := range in.Metadata {
		si.Metadata[k] = v
	}
	if _, ok := si.Metadata["weight"]; !ok {
		si.Metadata["weight"] = strconv.FormatUint(uint64(in.Weight), 10) // kratos' wrr and p2c read it
	}
	if len(in.Endpoints) == 0 {
		si.Endpoints = []string{"grpc://" + in.Address, "http://" + in.Address}
		return si
	}
	for _, e := range in.Endpoints {
		si.Endpoints = append(si.Endpoints, e.Name+"://"+e.Address)
	}
	return si
}
