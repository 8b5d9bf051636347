package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/go-kit/kit/sd"
	kitconsul "github.com/go-kit/kit/sd/consul"
	kitetcd "github.com/go-kit/kit/sd/etcdv3"
	kitlog "github.com/go-kit/log"
	consulapi "github.com/hashicorp/consul/api"
	"github.com/zeromicro/go-zero/core/discov"
	"github.com/zeromicro/go-zero/core/logx"

	_ "github.com/roster-go/roster/backends/consul"
	_ "github.com/roster-go/roster/backends/etcd"
	"github.com/roster-go/roster/registry"
)

// ttl is every implementation's registration TTL (flag -ttl).
var ttl = 5 * time.Second

// An impl is one library on one backend. A client registers instances,
// and watches a service through its own connection.
type impl interface {
	name() string
	backend() string
	open(ctx context.Context) (client, error)
	watch(ctx context.Context, service string) (*view, error)
}

type client interface {
	// register announces addr as an instance of service and keeps it alive.
	register(ctx context.Context, service, addr string) (handle, error)
	close()
}

type handle interface {
	// deregister removes the instance gracefully.
	deregister(ctx context.Context) error
}

// A view is a watcher's current set of addresses, and when each one
// left it, as seen by the library's own watch.
type view struct {
	mu      sync.Mutex
	set     map[string]bool
	goneAt  map[string]time.Time
	history []point // count after every update
	changed chan struct{}
	stop    func()
}

type point struct {
	at time.Time
	n  int
}

func newView() *view {
	return &view{set: map[string]bool{}, goneAt: map[string]time.Time{}, changed: make(chan struct{})}
}

// update replaces the set with addrs, received now.
func (v *view) update(addrs []string) {
	now := time.Now()
	next := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		next[a] = true
	}
	v.mu.Lock()
	for a := range v.set {
		if !next[a] {
			v.goneAt[a] = now
		}
	}
	for a := range next {
		delete(v.goneAt, a)
	}
	v.set = next
	v.history = append(v.history, point{now, len(next)})
	close(v.changed)
	v.changed = make(chan struct{})
	v.mu.Unlock()
}

// wait waits until cond holds or the deadline passes.
func (v *view) wait(d time.Duration, cond func(set map[string]bool) bool) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		v.mu.Lock()
		ok, ch := cond(v.set), v.changed
		v.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return false
		}
	}
}

func (v *view) count() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.set)
}

func (v *view) gone(addr string) (time.Time, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	t, ok := v.goneAt[addr]
	return t, ok
}

// since returns the counts recorded after t.
func (v *view) since(t time.Time) []point {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []point
	for _, p := range v.history {
		if !p.at.Before(t) {
			out = append(out, p)
		}
	}
	return out
}

// ---- Roster ----

type rosterImpl struct{ url, back string }

func (r rosterImpl) name() string    { return "roster" }
func (r rosterImpl) backend() string { return r.back }

type rosterClient struct{ reg *registry.Registry }

func (r rosterImpl) open(ctx context.Context) (client, error) {
	reg, err := registry.Open(ctx, r.url)
	if err != nil {
		return nil, err
	}
	return rosterClient{reg}, nil
}

func (c rosterClient) register(ctx context.Context, service, addr string) (handle, error) {
	l, err := c.reg.Register(ctx, registry.Instance{Service: service, Address: addr}, registry.WithTTL(ttl))
	if err != nil {
		return nil, err
	}
	return rosterHandle{l}, nil
}

func (c rosterClient) close() { c.reg.Close() }

type rosterHandle struct{ l *registry.Lease }

func (h rosterHandle) deregister(ctx context.Context) error { return h.l.Deregister(ctx) }

func (r rosterImpl) watch(ctx context.Context, service string) (*view, error) {
	reg, err := registry.Open(ctx, r.url)
	if err != nil {
		return nil, err
	}
	w, err := reg.Watch(ctx, service)
	if err != nil {
		reg.Close()
		return nil, err
	}
	v := newView()
	wctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			s, _ := w.Next(wctx)
			if wctx.Err() != nil {
				return
			}
			addrs := make([]string, len(s.Instances))
			for i, in := range s.Instances {
				addrs[i] = in.Address
			}
			v.update(addrs)
		}
	}()
	v.stop = func() { cancel(); <-done; w.Close(); reg.Close() }
	return v, nil
}

// ---- go-zero core/discov (etcd) ----

type gozeroImpl struct{ endpoints []string }

func (gozeroImpl) name() string    { return "go-zero" }
func (gozeroImpl) backend() string { return "etcd" }

type gozeroClient struct{ endpoints []string }

func (g gozeroImpl) open(context.Context) (client, error) {
	logx.Disable()
	discov.TimeToLive = int64(ttl / time.Second)
	return gozeroClient(g), nil
}

func (c gozeroClient) register(_ context.Context, service, addr string) (handle, error) {
	p := discov.NewPublisher(c.endpoints, service, addr)
	if err := p.KeepAlive(); err != nil {
		return nil, err
	}
	return gozeroHandle{p}, nil
}

func (gozeroClient) close() {}

type gozeroHandle struct{ p *discov.Publisher }

// deregister is Stop, which revokes the lease: go-zero's graceful exit.
func (h gozeroHandle) deregister(context.Context) error { h.p.Stop(); return nil }

func (g gozeroImpl) watch(_ context.Context, service string) (*view, error) {
	s, err := discov.NewSubscriber(g.endpoints, service)
	if err != nil {
		return nil, err
	}
	v := newView()
	s.AddListener(func() { v.update(s.Values()) })
	v.update(s.Values())
	v.stop = s.Close
	return v, nil
}

// ---- go-kit sd/etcdv3 ----

type kitEtcdImpl struct{ endpoints []string }

func (kitEtcdImpl) name() string    { return "go-kit" }
func (kitEtcdImpl) backend() string { return "etcd" }

// go-kit's etcdv3 client holds one registration (its lease and
// keep-alive), so each registration gets a client of its own, as each
// process of a go-kit service has.
type kitEtcdClient struct {
	endpoints []string
	mu        sync.Mutex
	cancels   []context.CancelFunc
}

func (k kitEtcdImpl) open(context.Context) (client, error) {
	return &kitEtcdClient{endpoints: k.endpoints}, nil
}

func kitEtcdKey(service, addr string) string { return "/kit/" + service + "/" + addr }

func (c *kitEtcdClient) register(ctx context.Context, service, addr string) (handle, error) {
	cctx, cancel := context.WithCancel(context.Background())
	cl, err := kitetcd.NewClient(cctx, c.endpoints, kitetcd.ClientOptions{})
	if err != nil {
		cancel()
		return nil, err
	}
	svc := kitetcd.Service{Key: kitEtcdKey(service, addr), Value: addr, TTL: kitetcd.NewTTLOption(ttl/3, ttl)}
	if err := cl.Register(svc); err != nil {
		cancel()
		return nil, err
	}
	c.mu.Lock()
	c.cancels = append(c.cancels, cancel)
	c.mu.Unlock()
	return kitEtcdHandle{cl, svc}, nil
}

func (c *kitEtcdClient) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cancel := range c.cancels {
		cancel()
	}
	c.cancels = nil
}

type kitEtcdHandle struct {
	cl  kitetcd.Client
	svc kitetcd.Service
}

func (h kitEtcdHandle) deregister(context.Context) error { return h.cl.Deregister(h.svc) }

func (k kitEtcdImpl) watch(_ context.Context, service string) (*view, error) {
	cctx, cancel := context.WithCancel(context.Background())
	cl, err := kitetcd.NewClient(cctx, k.endpoints, kitetcd.ClientOptions{})
	if err != nil {
		cancel()
		return nil, err
	}
	ins, err := kitetcd.NewInstancer(cl, "/kit/"+service+"/", kitlog.NewNopLogger())
	if err != nil {
		cancel()
		return nil, err
	}
	return kitView(ins, cancel), nil
}

// kitView follows a go-kit Instancer.
func kitView(ins interface {
	Register(chan<- sd.Event)
	Deregister(chan<- sd.Event)
	Stop()
}, cancel func()) *view {
	v := newView()
	ch := make(chan sd.Event, 16)
	done := make(chan struct{})
	quit := make(chan struct{})
	ins.Register(ch)
	go func() {
		defer close(done)
		for {
			select {
			case e := <-ch:
				if e.Err == nil {
					v.update(e.Instances)
				}
			case <-quit:
				return
			}
		}
	}()
	v.stop = func() { ins.Deregister(ch); ins.Stop(); close(quit); <-done; cancel() }
	return v
}

// ---- go-kit sd/consul ----

// kitConsulImpl is go-kit's sd/consul. With check set it is not go-kit
// but plain agent registrations that carry a TTL check, created passing
// and never renewed: the agent's own rate for what Roster registers.
type kitConsulImpl struct {
	addr  string
	check bool
}

func (k kitConsulImpl) name() string {
	if k.check {
		return "plain+check"
	}
	return "go-kit"
}
func (kitConsulImpl) backend() string { return "consul" }

type kitConsulClient struct {
	c     kitconsul.Client
	check bool
}

func (k kitConsulImpl) open(context.Context) (client, error) {
	c, err := consulapi.NewClient(&consulapi.Config{Address: k.addr})
	if err != nil {
		return nil, err
	}
	return kitConsulClient{kitconsul.NewClient(c), k.check}, nil
}

// register registers the service as go-kit's examples do. go-kit's
// registrar keeps no check alive: a TTL check would need the caller's
// own heartbeat, and a crashed instance stays listed.
func (c kitConsulClient) register(_ context.Context, service, addr string) (handle, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	p, _ := strconv.Atoi(port)
	r := &consulapi.AgentServiceRegistration{ID: service + "-" + addr, Name: service, Address: host, Port: p}
	if c.check {
		r.Check = &consulapi.AgentServiceCheck{TTL: ttl.String(), Status: consulapi.HealthPassing}
	}
	// Registrar.Register logs errors and returns none; call the client
	// directly so a failure is seen.
	if err := c.c.Register(r); err != nil {
		return nil, err
	}
	return kitConsulHandle{c.c, r}, nil
}

func (kitConsulClient) close() {}

type kitConsulHandle struct {
	c kitconsul.Client
	r *consulapi.AgentServiceRegistration
}

func (h kitConsulHandle) deregister(context.Context) error { return h.c.Deregister(h.r) }

func (k kitConsulImpl) watch(_ context.Context, service string) (*view, error) {
	c, err := consulapi.NewClient(&consulapi.Config{Address: k.addr})
	if err != nil {
		return nil, err
	}
	ins := kitconsul.NewInstancer(kitconsul.NewClient(c), kitlog.NewNopLogger(), service, nil, true)
	return kitView(ins, func() {}), nil
}

func implsFor(etcdURL string, etcdEndpoints []string, consulAddr string) []impl {
	var out []impl
	if etcdURL != "" {
		out = append(out, rosterImpl{etcdURL, "etcd"}, gozeroImpl{etcdEndpoints}, kitEtcdImpl{etcdEndpoints})
	}
	if consulAddr != "" {
		out = append(out, rosterImpl{"consul://" + consulAddr, "consul"}, kitConsulImpl{addr: consulAddr},
			kitConsulImpl{addr: consulAddr, check: true})
	}
	return out
}

func label(im impl) string { return fmt.Sprintf("%s/%s", im.backend(), im.name()) }
