package rostergrpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"
	"google.golang.org/grpc/status"

	"github.com/roster-go/roster/internal/mwhook"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// balancerName is the name of the Roster load-balancing policy, for
// service configs: {"loadBalancingConfig":[{"roster":{"strategy":"p2c_ewma"}}]}.
const balancerName = "roster"

func init() { balancer.Register(builder{}) }

// lbConfig is the policy's JSON configuration.
type lbConfig struct {
	serviceconfig.LoadBalancingConfig `json:"-"`

	// Strategy is a selector strategy name (selector.ParseStrategy);
	// empty means selector.DefaultStrategy.
	Strategy string `json:"strategy,omitempty"`
}

type builder struct{}

func (builder) Name() string { return balancerName }

func (builder) ParseConfig(js json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	var c lbConfig
	if err := json.Unmarshal(js, &c); err != nil {
		return nil, fmt.Errorf("rostergrpc: balancer config: %w", err)
	}
	if c.Strategy != "" {
		if _, err := selector.ParseStrategy(c.Strategy); err != nil {
			return nil, fmt.Errorf("rostergrpc: balancer config: %w", err)
		}
	}
	return &c, nil
}

func (builder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	return &rosterBalancer{
		cc:      cc,
		service: opts.Target.Endpoint(),
		conns:   map[string]*subConn{},
		state:   connectivity.Connecting,
		ejected: map[string]bool{},
	}
}

// settings are what a dial's Options give the balancer, through the
// resolver state's attributes (a balancer is built by name, globally).
// They also tell the balancers of the dial what the quarantine ejects.
type settings struct {
	quarantine *middleware.Quarantine
	classify   middleware.Classifier
	selOpts    []selector.Option
	policies   *policies // nil: no policies (a balancer not built by a dial)

	mu        sync.Mutex
	balancers map[*rosterBalancer]bool
}

func newSettings(q *middleware.Quarantine, classify middleware.Classifier, selOpts []selector.Option) *settings {
	s := &settings{quarantine: q, classify: classify, selOpts: selOpts, balancers: map[*rosterBalancer]bool{}}
	mwhook.WatchUsable(q, s.usable)
	return s
}

// join and leave add and remove a balancer that follows the quarantine.
func (s *settings) join(b *rosterBalancer) {
	s.mu.Lock()
	first := len(s.balancers) == 0
	s.balancers[b] = true
	s.mu.Unlock()
	if first && s.policies != nil {
		s.policies.start(s.policyChanged)
	}
}

func (s *settings) leave(b *rosterBalancer) {
	s.mu.Lock()
	delete(s.balancers, b)
	last := len(s.balancers) == 0
	s.mu.Unlock()
	if last && s.policies != nil {
		s.policies.stop()
	}
}

// usable passes an ejection, or its end, to the balancers of the dial.
func (s *settings) usable(service, id string, usable bool) {
	for _, b := range s.list() {
		b.setEjected(service, id, !usable)
	}
}

// list returns the balancers of the dial, to call without s.mu held.
func (s *settings) list() []*rosterBalancer {
	s.mu.Lock()
	defer s.mu.Unlock()
	bs := make([]*rosterBalancer, 0, len(s.balancers))
	for b := range s.balancers {
		bs = append(bs, b)
	}
	return bs
}

type settingsKey struct{}

// rosterBalancer keeps one SubConn per instance address and, on every
// change (addresses, weights, connectivity, ejections), publishes an
// immutable picker over the READY ones, backed by a Roster selector that
// holds every instance: those not READY count as unusable in their
// locality tier. gRPC calls its methods (and the SubConn state
// listeners) one at a time, and the quarantine's ejections come from
// other goroutines, hence mu.
type rosterBalancer struct {
	cc      balancer.ClientConn
	service string

	mu       sync.Mutex
	strategy selector.Strategy
	sel      *selector.Selector
	set      *settings
	selErr   error  // the selector options are invalid
	hashKey  string // the policy's: the metadata key of the affinity key

	conns       map[string]*subConn // by address
	ejected     map[string]bool     // by instance ID: the quarantine holds it out
	state       connectivity.State
	resolverErr error
	connErr     error
	closed      bool
}

type subConn struct {
	sc    balancer.SubConn
	inst  registry.Instance
	state connectivity.State
}

func (b *rosterBalancer) UpdateClientConnState(s balancer.ClientConnState) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	if err := b.configure(s); err != nil {
		// Bad selector options (DialOptions cannot return an error):
		// every RPC fails, saying why.
		b.selErr = err
		b.publish()
		return nil
	}
	b.selErr = nil
	b.syncConns(s.ResolverState)
	b.baseline()
	b.update()
	if len(b.conns) == 0 {
		b.resolverErr = b.noInstances(s.ResolverState)
		b.publish()
		return balancer.ErrBadResolverState
	}
	b.resolverErr = nil
	b.publish()
	return nil
}

// noInstances is the error of a state with no instance: of the service,
// or serving the endpoint the resolver was asked for.
func (b *rosterBalancer) noInstances(rs resolver.State) error {
	if name, _ := rs.Attributes.Value(endpointKey{}).(string); name != "" {
		return fmt.Errorf("rostergrpc: service %s has no instances serving endpoint %q", b.service, name)
	}
	return fmt.Errorf("rostergrpc: service %s has no instances", b.service)
}

// configure takes the service, the dial's settings and the strategy from
// a new state; a new strategy gets a new selector.
func (b *rosterBalancer) configure(s balancer.ClientConnState) error {
	if svc, ok := s.ResolverState.Attributes.Value(serviceKey{}).(string); ok {
		b.service = svc
	}
	if set, ok := s.ResolverState.Attributes.Value(settingsKey{}).(*settings); ok && set != b.set {
		if b.set != nil {
			b.set.leave(b)
		}
		b.set = set
		set.join(b)
	}
	if b.set == nil {
		b.set = newSettings(middleware.NewQuarantine(middleware.QuarantineConfig{}), defaultClassify, nil)
		b.set.join(b)
	}
	// The strategy of the balancer config wins over one in the selector
	// options; without either it is the selector's default.
	var strategy selector.Strategy
	if c, ok := s.BalancerConfig.(*lbConfig); ok && c.Strategy != "" {
		strategy = selector.Strategy(c.Strategy)
	}
	if b.sel == nil || strategy != b.strategy {
		opts, key, err := b.set.selectorOptions(b.service, strategy)
		if err != nil {
			return fmt.Errorf("rostergrpc: %s: %w", b.service, err)
		}
		sel, err := selector.New(opts...)
		if err != nil {
			return fmt.Errorf("rostergrpc: %s: %w", b.service, err)
		}
		b.sel, b.strategy, b.hashKey = sel, strategy, key
	}
	return nil
}

// syncConns keeps one SubConn per address of the resolver state: new
// addresses connect, gone ones shut down, and an instance that changed
// (a new weight when draining, metadata) is updated without reconnecting.
func (b *rosterBalancer) syncConns(rs resolver.State) {
	seen := map[string]bool{}
	for _, ep := range endpointsOf(rs) {
		if len(ep.Addresses) == 0 {
			continue
		}
		addr := ep.Addresses[0].Addr
		inst, ok := InstanceOf(ep.Attributes)
		if !ok {
			// Not from the Roster resolver: an anonymous instance.
			inst = registry.Instance{ID: addr, Service: b.service, Address: addr, Weight: registry.DefaultWeight}
		}
		if seen[addr] {
			continue // two registrations of one address: one connection
		}
		seen[addr] = true
		if c := b.conns[addr]; c != nil {
			c.inst = inst
			continue
		}
		c := &subConn{inst: inst, state: connectivity.Idle}
		sc, err := b.cc.NewSubConn([]resolver.Address{{Addr: addr}}, balancer.NewSubConnOptions{
			StateListener: func(st balancer.SubConnState) { b.updateSubConnState(c, st) },
		})
		if err != nil {
			continue
		}
		c.sc = sc
		b.conns[addr] = c
		sc.Connect()
	}
	for addr, c := range b.conns {
		if !seen[addr] {
			c.sc.Shutdown()
			delete(b.conns, addr)
		}
	}
}

// baseline gives the selector the instances the service has when the
// balancer first hears of them, so they are not slow-started as if they
// had just joined.
func (b *rosterBalancer) baseline() {
	b.sel.Baseline(b.snapshot())
}

// snapshot is the snapshot of every instance with a SubConn.
func (b *rosterBalancer) snapshot() registry.Snapshot {
	snap := registry.Snapshot{Service: b.service, Instances: make([]registry.Instance, 0, len(b.conns)), At: time.Now()}
	for _, c := range b.conns {
		snap.Instances = append(snap.Instances, c.inst)
	}
	backend.SortInstances(snap.Instances)
	return snap
}

// update gives the selector every instance with a SubConn, READY or not,
// and marks which are usable. The selector keeps per-instance state (in
// flight, latency) by ID across updates.
func (b *rosterBalancer) update() {
	b.sel.Update(b.snapshot())
	if len(b.ejected) > 0 {
		ids := make(map[string]bool, len(b.conns))
		for _, c := range b.conns {
			ids[c.inst.ID] = true
		}
		for id := range b.ejected {
			if !ids[id] {
				delete(b.ejected, id) // gone: a new instance reusing the ID starts clean
			}
		}
	}
	for _, c := range b.conns {
		b.markUsable(c)
	}
}

// markUsable tells the selector whether the instance can take calls now,
// for the usable share of its locality tier: READY and not held out by
// the quarantine (draining the selector sees by itself).
func (b *rosterBalancer) markUsable(c *subConn) {
	b.sel.SetUsable(c.inst.ID, c.state == connectivity.Ready && !b.ejected[c.inst.ID])
}

// setEjected records an ejection by the quarantine, or its end, and
// publishes a picker with the new locality shares.
func (b *rosterBalancer) setEjected(service, id string, ejected bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || service != b.service || b.sel == nil || b.ejected[id] == ejected {
		return
	}
	if ejected {
		b.ejected[id] = true
	} else {
		delete(b.ejected, id)
	}
	for _, c := range b.conns {
		if c.inst.ID == id {
			b.markUsable(c)
		}
	}
	if b.state == connectivity.Ready {
		b.publish()
	}
}

func endpointsOf(s resolver.State) []resolver.Endpoint {
	if len(s.Endpoints) > 0 {
		return s.Endpoints
	}
	eps := make([]resolver.Endpoint, 0, len(s.Addresses))
	for _, a := range s.Addresses {
		eps = append(eps, resolver.Endpoint{Addresses: []resolver.Address{a}, Attributes: a.BalancerAttributes})
	}
	return eps
}

func (b *rosterBalancer) ResolverError(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.resolverErr = err
	if len(b.conns) == 0 {
		b.publish()
	}
	// With connections, keep using them: an error never empties the list.
}

// UpdateSubConnState is unused: every SubConn has a StateListener.
func (b *rosterBalancer) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {}

func (b *rosterBalancer) updateSubConnState(c *subConn, st balancer.SubConnState) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.conns[c.inst.Address] != c {
		return // shut down already
	}
	old := c.state
	switch st.ConnectivityState {
	case connectivity.Idle:
		// Reconnect at once: we keep every instance connected, as the
		// selector needs them all to choose from.
		c.sc.Connect()
		if old == connectivity.TransientFailure {
			return // stay failed until it is READY again
		}
	case connectivity.Connecting:
		if old == connectivity.TransientFailure {
			return
		}
	case connectivity.TransientFailure:
		b.connErr = st.ConnectionError
	case connectivity.Shutdown:
		return
	}
	c.state = st.ConnectivityState
	if (old == connectivity.Ready) != (c.state == connectivity.Ready) || c.state == connectivity.TransientFailure {
		b.markUsable(c)
		b.publish()
	}
}

func (b *rosterBalancer) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.set != nil {
		b.set.leave(b)
	}
	for addr, c := range b.conns {
		c.sc.Shutdown()
		delete(b.conns, addr)
	}
}

func (b *rosterBalancer) ExitIdle() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.conns {
		if c.state == connectivity.Idle {
			c.sc.Connect()
		}
	}
}

// publish computes the aggregate state and a new picker; b.mu is held.
func (b *rosterBalancer) publish() {
	if b.selErr != nil {
		b.state = connectivity.TransientFailure
		b.cc.UpdateState(balancer.State{ConnectivityState: connectivity.TransientFailure,
			Picker: errPicker{status.Error(codes.Unavailable, b.selErr.Error())}})
		return
	}
	ready := 0
	connecting := false
	for _, c := range b.conns {
		switch c.state {
		case connectivity.Ready:
			ready++
		case connectivity.Idle, connectivity.Connecting:
			connecting = true
		}
	}
	switch {
	case ready > 0:
		byID := make(map[string]balancer.SubConn, ready)
		for _, c := range b.conns {
			if c.state == connectivity.Ready {
				byID[c.inst.ID] = c.sc
			}
		}
		// The picker captures the selector's current immutable view
		// (the instances of the last update, with the usable shares of
		// now), so it never picks from a later set.
		b.state = connectivity.Ready
		b.cc.UpdateState(balancer.State{ConnectivityState: connectivity.Ready, Picker: &picker{
			service: b.service, view: b.sel.Picker(), byID: byID, set: b.set, total: b.sel.Len(), hashKey: b.hashKey,
			partial: ready < len(b.conns), connecting: connecting,
		}})
	case connecting:
		b.state = connectivity.Connecting
		b.cc.UpdateState(balancer.State{ConnectivityState: connectivity.Connecting, Picker: queuePicker{}})
	default:
		b.state = connectivity.TransientFailure
		err := b.connErr
		switch {
		case err == nil && b.resolverErr != nil:
			err = b.resolverErr
		case err == nil:
			err = errors.New("no instance reachable")
		case b.resolverErr != nil:
			err = fmt.Errorf("last connection error: %w; last resolver error: %v", err, b.resolverErr)
		}
		b.cc.UpdateState(balancer.State{ConnectivityState: connectivity.TransientFailure,
			Picker: errPicker{status.Errorf(codes.Unavailable, "rostergrpc: %s: %v", b.service, err)}})
	}
}

type queuePicker struct{}

func (queuePicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
}

type errPicker struct{ err error }

func (p errPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{}, p.err
}

// picker is immutable: the READY connections by instance ID, and the
// selector's view of every instance (grpc-go's pickers are snapshots
// too: an old one keeps picking from its own set).
type picker struct {
	service string
	view    *selector.Picker
	hashKey string // the policy's metadata key of the affinity key
	byID    map[string]balancer.SubConn
	set     *settings
	total   int
	// partial: some instances are not READY, and picks exclude them.
	partial bool
	// connecting: some instances are still connecting, so an RPC that
	// finds no READY instance waits for the next picker.
	connecting bool
}

func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	ctx := info.Ctx
	tr := triedFrom(ctx)
	q := p.set.quarantine
	// The fallback order is the selector's, as in middleware.Client: an
	// instance this RPC has not tried that the quarantine admits, then a
	// tried one it admits, then any. An instance without a READY
	// connection is never picked.
	o := selector.PickOptions{
		Key:   p.key(ctx),
		Route: routeFrom(ctx),
		Tried: func(in *registry.Instance) bool { return tr.has(in.ID) },
		Avoid: func(in *registry.Instance) bool { return !mwhook.Admit(q, p.service, in.ID, p.total) },
	}
	if p.partial {
		o.Exclude = p.notReady
	}
	in, done, err := p.view.Pick(ctx, o)
	if err != nil {
		if p.connecting && errors.Is(err, selector.ErrAllExcluded) {
			return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
		}
		return balancer.PickResult{}, status.Errorf(codes.Unavailable, "rostergrpc: %s: %v", p.service, err)
	}
	sc, ok := p.byID[in.ID]
	if !ok { // Exclude keeps the others out: not reached
		done.Done(context.Canceled, 0)
		return balancer.PickResult{}, status.Errorf(codes.Internal, "rostergrpc: %s: picked %s, which has no connection", p.service, in.ID)
	}
	a := attempt{ctx: ctx, p: p, id: in.ID, zone: in.Zone, region: in.Region, done: done, start: time.Now()}
	if tr != nil && tr.begin(a) {
		return balancer.PickResult{SubConn: sc, Done: tr.doneFn}, nil
	}
	return balancer.PickResult{SubConn: sc, Done: func(di balancer.DoneInfo) { a.finish(tr, di) }}, nil
}

// attempt is one picked attempt, until its Done.
type attempt struct {
	ctx    context.Context
	p      *picker
	id     string
	zone   string
	region string
	done   selector.Done
	start  time.Time
}

// finish feeds the attempt's outcome to the selector, the quarantine and
// the RPC's tried set.
func (a attempt) finish(tr *tried, di balancer.DoneInfo) {
	if a.p == nil {
		return // no attempt in flight: not reached
	}
	err := di.Err
	if status.Code(err) == codes.Canceled {
		err = context.Canceled // the selector leaves latency alone then
	}
	a.done.Done(err, time.Since(a.start))
	c := a.p.set.classify(a.ctx, di.Err)
	out := mwhook.OutcomeIn(a.p.set.quarantine, a.p.service, a.id, a.zone, a.region, int(c), a.p.total)
	tr.attempted(a.id, di.Err != nil, out)
}

// notReady is the pick's Exclude: the instance has no READY connection.
func (p *picker) notReady(in *registry.Instance) bool {
	_, ok := p.byID[in.ID]
	return !ok
}

// key is the RPC's affinity key: WithKey's, else the metadata key the
// policy names (hash_key), else x-roster-hash-key.
func (p *picker) key(ctx context.Context) string {
	if p.hashKey != "" {
		if _, ok := ctx.Value(keyCtx{}).(string); !ok {
			if k := firstValue(ctx, p.hashKey); k != "" {
				return k
			}
		}
	}
	return keyFrom(ctx)
}
