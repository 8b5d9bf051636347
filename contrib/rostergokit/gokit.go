// Package rostergokit runs go-kit's service discovery on a Roster
// registry. NewInstancer follows a service for go-kit's sd.NewEndpointer
// and sd/lb balancers; NewRegistrar announces an instance with go-kit's
// Register/Deregister lifecycle:
//
//	reg, err := registry.Open(ctx, "redis://10.0.0.1:6379/0")
//	instancer, err := rostergokit.NewInstancer(reg, "user-svc")
//	endpointer := sd.NewEndpointer(instancer, factory, logger)
//	balancer := lb.NewRoundRobin(endpointer)
//
// Deregister waits DefaultDrainDelay after removing the record, so that
// clients drop the instance before the caller stops its server.
//
// go-kit identifies an instance by one string. The Instancer gives each
// instance's address on the endpoint named by WithEndpoint ("host:port"),
// by the rule of registry.Instance.Endpoint, and leaves out draining
// instances while others remain.
//
// While the registry cannot be reached, go-kit gets an Event with the
// error and keeps its endpoints (unless sd.InvalidateOnError asks
// otherwise); the Roster watch keeps the last instances and sends them
// again when the registry is back.
package rostergokit

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/go-kit/kit/sd"
	"github.com/go-kit/log"

	"github.com/roster-go/roster/registry"
)

// Instancer is go-kit's sd.Instancer over a Roster watch. It is safe for
// concurrent use.
type Instancer struct {
	w        *registry.Watcher
	endpoint string
	cancel   context.CancelFunc
	done     chan struct{}

	mu    sync.Mutex
	state sd.Event
	subs  map[chan<- sd.Event]struct{}
}

var _ sd.Instancer = (*Instancer)(nil)

// InstancerOption configures an Instancer.
type InstancerOption func(*Instancer)

// WithEndpoint makes the Instancer give each instance's address on the
// named endpoint ("http", "grpc") rather than its primary address.
// Instances that do not serve it are left out.
func WithEndpoint(name string) InstancerOption { return func(i *Instancer) { i.endpoint = name } }

// NewInstancer follows service in reg until Stop. The first state is read
// before it returns, so the first Event a channel gets is the current
// list (empty, with the error, when the registry cannot be reached).
func NewInstancer(reg *registry.Registry, service string, opts ...InstancerOption) (*Instancer, error) {
	ctx, cancel := context.WithCancel(context.Background())
	w, err := reg.Watch(ctx, service)
	if err != nil {
		cancel()
		return nil, err
	}
	i := &Instancer{w: w, cancel: cancel, done: make(chan struct{}), subs: map[chan<- sd.Event]struct{}{}}
	for _, f := range opts {
		f(i)
	}
	snap, err := w.Next(ctx)
	i.state = i.event(snap, err)
	go i.run(ctx)
	return i, nil
}

func (i *Instancer) run(ctx context.Context) {
	defer close(i.done)
	for {
		snap, err := i.w.Next(ctx)
		if ctx.Err() != nil || errors.Is(err, registry.ErrClosed) {
			return
		}
		i.update(i.event(snap, err))
	}
}

// event turns a snapshot into go-kit's Event: sorted addresses, or the
// error of a stale list.
func (i *Instancer) event(snap registry.Snapshot, err error) sd.Event {
	if err != nil {
		return sd.Event{Err: err}
	}
	var live, draining []string
	for _, in := range snap.Instances {
		ep, ok := in.Endpoint(i.endpoint)
		if !ok {
			continue
		}
		if in.Weight == 0 {
			draining = append(draining, ep.Address)
		} else {
			live = append(live, ep.Address)
		}
	}
	if len(live) == 0 {
		live = draining // the last ones standing, as Roster's selector does
	}
	slices.Sort(live)
	return sd.Event{Instances: slices.Compact(live)}
}

// update stores ev and sends it to every channel, unless nothing changed.
// Sends happen under the lock, as in go-kit's own instancers, so that a
// channel is never sent to after Deregister returns.
func (i *Instancer) update(ev sd.Event) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if sameEvent(i.state, ev) {
		return
	}
	i.state = ev
	for ch := range i.subs {
		ch <- copyEvent(ev)
	}
}

func sameEvent(a, b sd.Event) bool {
	if (a.Err == nil) != (b.Err == nil) || (a.Err != nil && a.Err.Error() != b.Err.Error()) {
		return false
	}
	return slices.Equal(a.Instances, b.Instances)
}

func copyEvent(ev sd.Event) sd.Event {
	return sd.Event{Instances: slices.Clone(ev.Instances), Err: ev.Err}
}

// Register sends the current state to ch, then every change, until
// Deregister.
func (i *Instancer) Register(ch chan<- sd.Event) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.subs[ch] = struct{}{}
	ch <- copyEvent(i.state)
}

// Deregister stops sending to ch.
func (i *Instancer) Deregister(ch chan<- sd.Event) {
	i.mu.Lock()
	defer i.mu.Unlock()
	delete(i.subs, ch)
}

// Stop ends the watch. Channels get no more events.
func (i *Instancer) Stop() {
	i.cancel()
	i.w.Close()
	<-i.done
}

// Registrar is go-kit's sd.Registrar for one Roster instance. Register
// announces it and keeps it alive; Deregister removes it and waits the
// drain delay, so clients stop calling before the server stops.
type Registrar struct {
	reg   *registry.Registry
	inst  registry.Instance
	opts  []registry.RegisterOption
	log   func(keyvals ...any) error
	drain time.Duration

	mu    sync.Mutex
	lease *registry.Lease
}

var _ sd.Registrar = (*Registrar)(nil)

// DefaultDrainDelay is how long Deregister waits after removing the
// record: enough for every client's watch to drop the instance before
// the caller stops its server.
const DefaultDrainDelay = time.Second

// registerTimeout bounds the first write, as kratos' registrar timeout does.
const registerTimeout = 10 * time.Second

// RegistrarOption configures a Registrar.
type RegistrarOption func(*Registrar)

// WithDrainDelay sets how long Deregister waits after removing the record
// (0: return at once).
func WithDrainDelay(d time.Duration) RegistrarOption {
	return func(r *Registrar) { r.drain = max(d, 0) }
}

// WithRegisterOptions passes options, such as registry.TTL, to the
// registration.
func WithRegisterOptions(opts ...registry.RegisterOption) RegistrarOption {
	return func(r *Registrar) { r.opts = append(r.opts, opts...) }
}

// NewRegistrar returns a Registrar for inst. Errors, which go-kit's
// interface cannot return, go to logger.
func NewRegistrar(reg *registry.Registry, inst registry.Instance, logger log.Logger, opts ...RegistrarOption) *Registrar {
	r := &Registrar{reg: reg, inst: inst, log: logger.Log, drain: DefaultDrainDelay}
	for _, f := range opts {
		f(r)
	}
	return r
}

// Register announces the instance. Calling it again while registered does
// nothing.
func (r *Registrar) Register() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lease != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), registerTimeout)
	defer cancel()
	l, err := r.reg.Register(ctx, r.inst, r.opts...)
	if err != nil {
		r.log("op", "register", "service", r.inst.Service, "err", err)
		return
	}
	r.lease = l
	r.log("op", "register", "service", r.inst.Service, "id", l.Instance().ID, "address", l.Instance().Address)
}

// Deregister removes the instance, then waits the drain delay. Stop the
// server after it returns.
func (r *Registrar) Deregister() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lease == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), registerTimeout)
	defer cancel()
	err := r.lease.Deregister(ctx)
	r.log("op", "deregister", "service", r.inst.Service, "id", r.lease.Instance().ID, "err", err)
	r.lease = nil
	if err == nil {
		time.Sleep(r.drain)
	}
}

// Instance returns the registered instance (its ID filled in), and false
// while not registered.
func (r *Registrar) Instance() (registry.Instance, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lease == nil {
		return registry.Instance{}, false
	}
	return r.lease.Instance(), true
}
