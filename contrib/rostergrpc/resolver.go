package rostergrpc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/roster-go/roster/internal/backend"

	"google.golang.org/grpc/attributes"
	"google.golang.org/grpc/resolver"

	"github.com/roster-go/roster/registry"
)

// scheme is the URL scheme of Roster targets: roster:///service-name.
const scheme = "roster"

// Target returns the gRPC target of a service: "roster:///" + service.
func Target(service string) string { return scheme + ":///" + service }

type instanceKey struct{}

// instanceAttr carries a registry.Instance in resolver attributes. It is
// a pointer with an Equal method because an Instance holds a slice and a
// map, and attributes compare their values.
type instanceAttr struct{ in registry.Instance }

func (a *instanceAttr) Equal(o any) bool {
	b, ok := o.(*instanceAttr)
	return ok && a.in.Equal(b.in)
}

// InstanceOf returns the registry instance the Roster resolver attached to
// a resolved endpoint's attributes (for balancers of your own).
func InstanceOf(attrs *attributes.Attributes) (registry.Instance, bool) {
	a, ok := attrs.Value(instanceKey{}).(*instanceAttr)
	if !ok {
		return registry.Instance{}, false
	}
	return a.in, true
}

// newResolverBuilder returns a resolver for roster:///service-name targets
// that follows the service in reg. DialOptions installs it with
// grpc.WithResolvers. It does not own reg.
//
// The resolver pushes every snapshot the registry watch delivers, as one
// address per instance that serves the endpoint called endpoint (by
// Instance.Endpoint's rule), the endpoint's own. Each carries the instance
// (InstanceOf), its Address set to that endpoint's, including
// draining instances (weight 0: the Roster balancer uses them only when
// nothing else is left). Following the Watcher contract, a backend outage
// never empties the list: the last known instances stay in use, and the
// resolver reports the error only while it has never had a snapshot. A
// snapshot with no instances is a real answer and is pushed as such.
func newResolverBuilder(reg *registry.Registry, endpoint string) resolver.Builder {
	return &resolverBuilder{reg: reg, endpoint: endpoint}
}

type resolverBuilder struct {
	reg      *registry.Registry
	endpoint string
}

func (b *resolverBuilder) Scheme() string { return scheme }

func (b *resolverBuilder) Build(t resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	service := strings.TrimPrefix(t.Endpoint(), "/")
	if err := backend.ValidateService(service); err != nil {
		return nil, fmt.Errorf("rostergrpc: target %q: %w", t.URL.String(), err)
	}
	w, err := b.reg.Watch(context.Background(), service)
	if err != nil {
		return nil, fmt.Errorf("rostergrpc: watch %s: %w", service, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &rosterResolver{service: service, endpoint: b.endpoint, reg: b.reg.String(), cc: cc, w: w, cancel: cancel,
		done: make(chan struct{}), first: newFirstAnswer()}
	go r.run(ctx)
	return r, nil
}

type rosterResolver struct {
	service  string
	endpoint string // the name of the instances' endpoint to resolve
	reg      string // the registry, its URL redacted, for errors
	cc       resolver.ClientConn
	w        *registry.Watcher
	cancel   context.CancelFunc
	done     chan struct{}
	once     sync.Once
	first    *firstAnswer
}

// ResolveNow does nothing: the watch pushes every change, and the
// registry re-lists on its own resync schedule.
func (r *rosterResolver) ResolveNow(resolver.ResolveNowOptions) {}

func (r *rosterResolver) Close() {
	r.once.Do(func() {
		r.cancel()
		_ = r.w.Close()
		<-r.done
	})
}

func (r *rosterResolver) run(ctx context.Context) {
	defer close(r.done)
	for {
		snap, err := r.w.Next(ctx)
		switch {
		case err == nil:
		case errors.Is(err, registry.ErrUnavailable):
			if snap.Revision == 0 && len(snap.Instances) == 0 {
				// Never reached the backend: say why the channel has no
				// addresses yet, naming the registry.
				err = fmt.Errorf("rostergrpc: %s: no answer from %s: %w", r.service, r.reg, err)
				r.first.failed(err)
				r.cc.ReportError(err)
				continue
			}
			// Stale: keep using the last known instances (pushed again
			// below, unchanged except for the stale flag).
		default:
			return // closed or cancelled
		}
		r.first.answered()
		// The return value is ignored: a watch-based resolver has nothing
		// better to offer on re-resolution than the next change.
		_ = r.cc.UpdateState(stateOf(r.service, r.endpoint, snap))
	}
}

type (
	serviceKey  struct{}
	endpointKey struct{}
)

// stateOf is the resolver state of snap: the instances that serve the
// endpoint called endpoint, each at that endpoint's address.
func stateOf(service, endpoint string, snap registry.Snapshot) resolver.State {
	st := resolver.State{
		Addresses:  make([]resolver.Address, 0, len(snap.Instances)),
		Endpoints:  make([]resolver.Endpoint, 0, len(snap.Instances)),
		Attributes: attributes.New(serviceKey{}, service).WithValue(endpointKey{}, endpoint),
	}
	for _, in := range snap.Instances {
		e, ok := in.Endpoint(endpoint)
		if !ok {
			continue
		}
		in.Address = e.Address
		attr := attributes.New(instanceKey{}, &instanceAttr{in})
		st.Addresses = append(st.Addresses, resolver.Address{Addr: in.Address, BalancerAttributes: attr})
		st.Endpoints = append(st.Endpoints, resolver.Endpoint{
			Addresses:  []resolver.Address{{Addr: in.Address}},
			Attributes: attr,
		})
	}
	return st
}
