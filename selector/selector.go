package selector

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/roster-go/roster/registry"
)

// Errors returned by Pick; test them with errors.Is. New, Start and
// ParseStrategy return errors that wrap registry.ErrInvalid.
var (
	// ErrNoInstances: the selector holds no instance to pick from (no
	// snapshot yet, an empty snapshot, or filters that removed every
	// instance).
	ErrNoInstances = errors.New("selector: no instances")
	// ErrAllExcluded: there are instances, but PickOptions.Exclude
	// rejected every one of them, draining ones included. It is distinct
	// from ErrNoInstances so that the caller can choose: a retry loop
	// stops (it has tried everything), a quarantine layer may pick again
	// without its exclusions (panic mode) rather than fail the call.
	ErrAllExcluded = errors.New("selector: every instance is excluded")
	// errUnknownStrategy: New or ParseStrategy got a name that is not a
	// Strategy.
	errUnknownStrategy = fmt.Errorf("%w: selector: unknown strategy", registry.ErrInvalid)
	// errInvalidOption: an option value is out of range.
	errInvalidOption = fmt.Errorf("%w: selector: invalid option", registry.ErrInvalid)
	// errStarted: Start was called twice.
	errStarted = fmt.Errorf("%w: selector: already started", registry.ErrInvalid)
)

// maxEffort is how many times Pick asks the strategy again when the
// instance it proposes is excluded, before it scans (Finagle uses 5).
const maxEffort = 5

// Selector picks one instance of a service per call.
//
// It holds an immutable, prepared Picker (weights, tables, rings are
// computed in Update, never in Pick) behind an atomic pointer: Pick only
// reads it, so picks never wait for an Update and never take a lock.
// Per-instance state (requests in flight, latency EWMA) lives outside the
// picker and survives Updates for instances that stay.
//
// A Selector is safe for concurrent use. The zero value is not usable;
// call New.
type Selector struct {
	// cfg is the configuration New built; its locality zone never
	// changes. live is the current one (Reconfigure replaces it), under
	// mu. Pickers carry the configuration they were built with, so that
	// picks never read either.
	cfg  config
	live *config
	sh   *shared                // the current generation's, under mu
	cur  atomic.Pointer[Picker] // never nil after New

	mu   sync.Mutex           // serialises Update
	eps  map[string]*endpoint // by instance ID; owned by mu
	prev *Picker              // last built picker, under mu
	seen bool                 // a snapshot with instances was built, under mu
	// baseline: the IDs the service had at start (Baseline), under mu
	baseline map[string]bool
	unusable map[string]bool // SetUsable's, by instance ID, under mu

	run struct {
		sync.Mutex
		started bool
		closed  bool
		cancel  context.CancelFunc
		done    chan struct{}
		err     error
	}
}

// New returns a Selector with no instances; feed it with Update or
// Start. It fails on an unknown strategy or an out-of-range option.
func New(opts ...Option) (*Selector, error) {
	c := defaultConfig()
	for _, o := range opts {
		o(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	slow, err := c.slow.validate()
	if err != nil {
		return nil, err
	}
	s := &Selector{cfg: c, eps: map[string]*endpoint{}}
	live := c
	s.live = &live
	clock := &coarse
	if c.clock != nil {
		clock = &coarseClock{fake: c.clock}
	}
	s.sh = newShared(&c, slow, clock)
	s.cur.Store(&Picker{sh: s.sh, cfg: s.live}) // empty: Pick says ErrNoInstances
	return s, nil
}

// newShared returns the state Done and picks need for configuration c.
func newShared(c *config, slow slowStart, clock *coarseClock) *shared {
	return &shared{
		perTau:  1 / float64(c.decay),
		keep:    1 - float64(observeGrain)/float64(c.decay),
		bounded: c.bound > 0,
		ewma:    c.strategy == P2CEWMA,
		clock:   clock,
		shift:   inflightShift(c.inflightBound),
		slow:    slow,
	}
}

// PickOptions qualify one pick. The zero value is a plain pick. Passing
// PickOptions does not allocate; nor do predicates that do not escape the
// caller (closures over its locals, method values).
//
// Predicates must be fast and must not modify or retain the instance.
// Pick asks them in the order Exclude, Tried, Avoid, each only about an
// instance the ones before accepted, so an instance Avoid accepts is the
// instance Pick returns. A predicate whose acceptance has a side effect
// (a quarantine admitting its one probe call) belongs in Avoid.
type PickOptions struct {
	// Key is the request's affinity key (a user or session ID) for
	// ConsistentHash and Maglev: equal keys go to the same instance while
	// the instance set does not change. Other strategies ignore it. An
	// empty Key picks at random.
	Key string
	// Exclude, if set, rejects instances outright: Pick never returns one
	// it rejects, and returns ErrAllExcluded when it rejects them all.
	// When the strategy proposes a rejected instance, Pick asks it again
	// (up to 5 times), then takes the first acceptable instance in a
	// scan, then a draining one.
	Exclude func(*registry.Instance) bool
	// Tried and Avoid are soft: Pick honours them while it can and
	// relaxes them rather than fail. Tried marks the instances earlier
	// attempts of the same call used; Avoid the ones the caller would
	// rather not use now (quarantined, or taken by a parallel hedge).
	// Pick takes the first step of this order that leaves an instance
	// (the fallback policy of middleware.Client and contrib/rostergrpc alike):
	//
	//  1. neither Tried nor Avoid: an untried, admitted instance;
	//  2. not Avoid: one this call tried, but admitted;
	//  3. any instance.
	//
	// Exclude holds in every step, and within a step draining instances
	// come last. A tried instance goes before an avoided one because one
	// failure of this call is weaker evidence than a quarantine's several
	// in a row, and a quarantine already re-admits its instances one
	// probe at a time.
	Tried func(*registry.Instance) bool
	Avoid func(*registry.Instance) bool
	// Route narrows this pick to the instances it matches (see Route);
	// when it is zero, the context's Route (WithRoute) applies, and when
	// that is absent too, the selector's Split (WithSplit).
	Route Route
	// Endpoint names the port the call is for, such as "grpc" (see
	// registry.Instance.Endpoint); empty is the primary, Address. Pick
	// then chooses among the instances that serve it, and the Instance
	// it returns has that endpoint's address in Address. Route and Split
	// apply within those instances.
	Endpoint string
}

// plain reports whether o neither routes nor filters: a pick with it
// needs neither Picker.routed nor the fallback order.
func (o *PickOptions) plain() bool {
	// Lengths in one test, as in Route.zero: the common pick pays one.
	return o.Exclude == nil && o.Tried == nil && o.Avoid == nil &&
		len(o.Endpoint)|len(o.Route.Version)|len(o.Route.Zone)|len(o.Route.Tag)|len(o.Route.MetaKey)|len(o.Route.MetaValue) == 0
}

// step is a step of the fallback order of PickOptions.
type step int

const (
	untried  step = iota // rejects Exclude, Tried and Avoid
	admitted             // rejects Exclude and Avoid
	anyOne               // rejects Exclude
)

// rejects reports whether o rejects in at step s.
func (o *PickOptions) rejects(in *registry.Instance, s step) bool {
	if o.Exclude != nil && o.Exclude(in) {
		return true
	}
	if s == untried && o.Tried != nil && o.Tried(in) {
		return true
	}
	return s <= admitted && o.Avoid != nil && o.Avoid(in)
}

// relaxes reports whether step s accepts more than the step before it.
func (o *PickOptions) relaxes(s step) bool {
	switch s {
	case admitted:
		return o.Tried != nil
	case anyOne:
		return o.Avoid != nil
	}
	return true
}

// Done reports the outcome of a picked call. It is a small value, not a
// closure: returning and calling it allocates nothing. Call Done exactly
// once per successful Pick; the zero Done (from a failed Pick) ignores it.
type Done struct {
	ep     *endpoint
	sh     *shared
	picked int64 // the coarse clock at pick time
	// epochs are the in-flight epochs the pick was counted in: ep's in
	// the high half, the selector's total's in the low one. One field,
	// not two: a struct of more than four fields is not kept in
	// registers, and every caller's copy of Done went through memory
	// (a round-robin pick took twice as long).
	epochs uint64
}

// Done feeds the call's outcome back: it ends the in-flight count that
// LeastRequest, P2CEWMA and bounded loads use and updates the instance's
// latency estimate for P2CEWMA. latency is the call's duration as the
// caller measured it. A failed call counts as at least twice the current
// estimate, so that an instance failing fast does not attract traffic;
// context.Canceled (a hedge that lost, a caller that gave up) leaves the
// estimate alone.
func (d Done) Done(err error, latency time.Duration) {
	if d.ep == nil {
		return
	}
	d.release()
	if d.sh.ewma {
		now := d.sh.clock.read()
		if err != nil || !d.ep.settled(latency, now, d.sh.keep) {
			d.observe(err, latency, now)
		}
	}
}

// observe feeds a call's latency to the peak EWMA at now. Done and
// Finish call it only when the estimate may change (see settled).
func (d Done) observe(err error, latency time.Duration, now int64) {
	if err != nil && errors.Is(err, context.Canceled) {
		return
	}
	d.sh.observe(d.ep, latency, err != nil, now)
}

// Finish is Done with the latency measured for the caller: the time from
// the pick to now on the selector's coarse clock (a process-wide atomic
// a goroutine refreshes every millisecond while picks happen), so the
// caller reads no clock at all. Latencies are quantised to the
// millisecond but unbiased, and the peak-EWMA averages them; a caller
// that times its calls precisely anyway can call Done instead.
func (d Done) Finish(err error) {
	if d.ep == nil {
		return
	}
	d.release()
	if d.sh.ewma {
		now := d.sh.clock.read()
		latency := time.Duration(now - d.picked)
		if err != nil || !d.ep.settled(latency, now, d.sh.keep) {
			d.observe(err, latency, now)
		}
	}
}

// release ends the call's count of requests in flight.
func (d Done) release() {
	d.ep.inflight.done(uint32(d.epochs >> 32))
	if d.sh.bounded {
		d.sh.total.done(uint32(d.epochs))
	}
}

// Pick picks from the selector's current Picker: see Picker.Pick. It
// never blocks and allocates nothing.
func (s *Selector) Pick(ctx context.Context, o PickOptions) (registry.Instance, Done, error) {
	// Small enough to be inlined: the Instance is copied once, straight
	// into the caller's variable (or not at all when the caller drops
	// it), and o is passed by reference. Copying a 120-byte result
	// through a callee costs as much as a round-robin pick.
	inst, d, err := s.pick(ctx, &o)
	return *inst, d, err
}

// pick picks from the current Picker.
func (s *Selector) pick(ctx context.Context, o *PickOptions) (*registry.Instance, Done, error) {
	return s.cur.Load().pick(ctx, o)
}

// Picker returns the selector's current Picker: the immutable view built
// by the latest Update. Hold it to keep picking from that one set while
// the selector moves on, as a gRPC balancer's picker does. It is never
// nil; before the first Update it has no instances.
func (s *Selector) Picker() *Picker { return s.cur.Load() }

// Pick returns one instance and the Done to call when the call ends. It
// never blocks and allocates nothing. It returns ErrNoInstances when there
// is nothing to pick from, and ErrAllExcluded when o.Exclude rejects every
// instance; o.Tried and o.Avoid are relaxed in the order PickOptions
// states rather than fail. Instances of weight 0 (draining) are picked
// only when no other instance is left. The returned Instance shares its
// Tags and Metadata with the snapshot: do not modify them.
//
// The Route of o, else of ctx (WithRoute), else the selector's Split,
// narrows the instances the pick chooses from.
func (p *Picker) Pick(ctx context.Context, o PickOptions) (registry.Instance, Done, error) {
	inst, d, err := p.pick(ctx, &o)
	return *inst, d, err
}

// none is what pick returns with an error: the zero Instance, which the
// callers copy (never modify).
var none registry.Instance

// pick is Pick without the copy of the Instance, which its inlined
// callers make once. With an error it returns &none and the zero Done.
//
// The common pick — no split on the picker, no Route, Exclude, Tried or
// Avoid in o, no Route in any context, no instance warming up — takes
// the direct path: the strategy's choice is the answer. Each of those
// tests is a load of a flag the pick would read anyway; what they
// guard is in pickSlow.
func (p *Picker) pick(ctx context.Context, o *PickOptions) (*registry.Instance, Done, error) {
	var inst *registry.Instance
	var ep *endpoint
	if p.direct && o.plain() && !routesInContext.Load() && p.sh.warmEnd.Load() == 0 {
		var h uint64
		keyed := false
		if p.keyed && o.Key != "" {
			h, keyed = xxhash.Sum64String(o.Key), true
		}
		i := p.algo.pick(h, keyed, 0)
		inst, ep = &p.insts[i], p.eps[i]
	} else {
		var err error
		if p, inst, ep, err = p.pickSlow(ctx, o); err != nil {
			return &none, Done{}, err
		}
	}
	if !p.track {
		return inst, Done{}, nil
	}
	now := p.sh.clock.read()
	g := p.sh.epoch(now)
	d := Done{ep: ep, sh: p.sh, picked: now, epochs: uint64(ep.inflight.add(g)) << 32}
	if p.sh.bounded {
		d.epochs |= uint64(p.sh.total.add(g))
	}
	return inst, d, nil
}

// pickSlow is pick with routing, slow start and the fallback order of
// PickOptions. It returns the picker it picked from (a route's) too.
func (p *Picker) pickSlow(ctx context.Context, o *PickOptions) (*Picker, *registry.Instance, *endpoint, error) {
	if o.Endpoint != "" && p.ports {
		p = p.serving(o.Endpoint) // with the locality tiers, if any
	}
	tiered := p.tiered
	if p.mayRoute(o) {
		r := p.routed(ctx, o)
		tiered = tiered && r == p
		p = r
	}
	if len(p.insts) == 0 {
		return p, nil, nil, ErrNoInstances
	}
	var h uint64
	keyed := false
	if p.keyed && o.Key != "" {
		h, keyed = xxhash.Sum64String(o.Key), true
	}
	if tiered {
		t, inst, ep := p.pickTiered(o, h, keyed)
		if inst == nil {
			return p, nil, nil, ErrAllExcluded
		}
		return t, inst, ep, nil
	}
	i := p.algo.pick(h, keyed, 0)
	if p.sh.warmEnd.Load() != 0 {
		i = p.warm(i, h, keyed)
	}
	inst, ep := &p.insts[i], p.eps[i]
	if (o.Exclude != nil || o.Tried != nil || o.Avoid != nil) && o.rejects(inst, untried) {
		if inst, ep = p.fallback(h, keyed, o); inst == nil {
			return p, nil, nil, ErrAllExcluded
		}
	}
	return p, inst, ep, nil
}

// fallback is the slow path of Pick: the strategy proposed an instance o
// rejects. It walks the steps of PickOptions' order, skipping those that
// would accept nothing more than the one before.
func (p *Picker) fallback(h uint64, keyed bool, o *PickOptions) (*registry.Instance, *endpoint) {
	for s := untried; s <= anyOne; s++ {
		if !o.relaxes(s) {
			continue
		}
		if inst, ep := p.pickExcluding(h, keyed, o, s); inst != nil {
			return inst, ep
		}
	}
	return nil, nil
}

// pickExcluding picks an instance o accepts at step s: the strategy asked
// again, then a scan, then the draining instances.
func (p *Picker) pickExcluding(h uint64, keyed bool, o *PickOptions, s step) (*registry.Instance, *endpoint) {
	n := len(p.insts)
	if n == 1 && !o.rejects(&p.insts[0], s) {
		// The one instance, rejected at a stricter step (a route of
		// one quarantined instance): a relaxed step takes it.
		return &p.insts[0], p.eps[0]
	}
	if n > 1 {
		for attempt := 1; attempt < maxEffort; attempt++ {
			i := p.algo.pick(h, keyed, attempt)
			if !o.rejects(&p.insts[i], s) {
				return &p.insts[i], p.eps[i]
			}
		}
		// Scan from a pseudo-random start (the key's, when there is one,
		// so that a key keeps going to the same survivor).
		start := h
		if !keyed {
			start = p.rnd.next()
		}
		for j := range n {
			i := int((start + uint64(j)) % uint64(n))
			if !o.rejects(&p.insts[i], s) {
				return &p.insts[i], p.eps[i]
			}
		}
	}
	for i := range p.spare {
		if !o.rejects(&p.spare[i], s) {
			return &p.spare[i], p.spareEps[i]
		}
	}
	return nil, nil
}

// size returns how many instances p chooses from (after filters, without
// the draining ones unless nothing else is left).
func (p *Picker) size() int { return len(p.insts) }

// Snapshot returns the snapshot the selector picks from (before filters):
// its Stale flag tells whether the registry backend is failing. It is the
// zero Snapshot before the first Update.
func (s *Selector) Snapshot() registry.Snapshot { return s.cur.Load().snap }

// Len returns how many instances Pick chooses from (after filters,
// without the draining ones unless nothing else is left).
func (s *Selector) Len() int { return s.cur.Load().size() }

// Update installs a new snapshot: it filters the instances, prepares the
// strategy's tables and publishes them atomically as a new Picker. Picks
// in progress, and holders of an older Picker, keep using theirs. A stale
// snapshot is used like a fresh one (the last known instances are still
// the best guess); an update that only flips the Stale flag does not
// rebuild anything.
func (s *Selector) Update(snap registry.Snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev := s.prev; prev != nil && prev.snap.SameInstances(snap) {
		np := *prev
		np.snap = snap
		s.prev = &np
		s.cur.Store(&np)
		return
	}
	p := s.build(snap)
	s.prev = p
	s.cur.Store(p)
}

// build prepares a picker; s.mu is held. Per-instance state is kept for
// every instance of the snapshot, before filters: an instance a filter
// lets in later (PreferZone spilling over to another zone) is not new to
// the service, and keeps its counts.
func (s *Selector) build(snap registry.Snapshot) *Picker {
	eps := make(map[string]*endpoint, len(snap.Instances))
	for i := range snap.Instances {
		id := snap.Instances[i].ID
		ep := s.eps[id]
		if ep == nil {
			ep = &endpoint{}
			if s.isNew(id) { // new to the service, not to this client
				s.sh.startWarm(ep)
			}
		}
		eps[id] = ep
	}
	s.eps = eps
	s.seen = s.seen || len(eps) > 0
	insts := snap.Instances
	for _, f := range s.live.filters {
		insts = f(insts)
	}
	stateOf := func(in *registry.Instance) *endpoint {
		ep := eps[in.ID]
		if ep == nil { // a filter that made up an instance: give it state
			ep = &endpoint{}
			eps[in.ID] = ep
		}
		return ep
	}
	p := s.assemble(snap, insts, stateOf, s.prev)
	p.root(s)
	if s.live.zone != "" && p.canary == nil && len(insts) > 0 {
		s.tier(p, insts, stateOf)
	}
	p.ports = slices.ContainsFunc(insts, func(in registry.Instance) bool { return len(in.Endpoints) > 0 })
	return p
}

// root makes p a picker that routes: it gets a cache of routes and
// endpoints, and the selector's split.
func (p *Picker) root(s *Selector) {
	p.sel = s
	p.routes = newRouteCache()
	p.splitRoutes()
	p.direct = len(p.insts) > 0 && p.canary == nil
}

// tier prepares p's locality tiers (WithLocality) and their shares, and
// forgets the usable marks of instances that left; s.mu is held.
func (s *Selector) tier(p *Picker, insts []registry.Instance, ep func(*registry.Instance) *endpoint) {
	for id := range s.unusable {
		if s.eps[id] == nil {
			delete(s.unusable, id)
		}
	}
	for i, in := range tiers(insts, s.cfg.zone, s.cfg.region) {
		if len(in) > 0 {
			p.tiers[i] = s.assemble(p.snap, in, ep, nil)
		}
	}
	p.tiered = true
	s.cfg.loads(p, s.unusable)
	p.direct = false // a pick chooses its tier first
}

// assemble prepares a picker over insts (filtered), whose state ep
// returns, with the current configuration; prev, if any, lets the ring
// reuse its points. s.mu is held.
func (s *Selector) assemble(snap registry.Snapshot, insts []registry.Instance, ep func(*registry.Instance) *endpoint, prev *Picker) *Picker {
	return assembleWith(s.live, s.sh, snap, insts, ep, prev)
}

// assembleWith is assemble with configuration c and shared state sh: a
// picker's subsets (routes, endpoints) are built at pick time, without
// s.mu, with the configuration of the picker they narrow.
func assembleWith(c *config, sh *shared, snap registry.Snapshot, insts []registry.Instance, ep func(*registry.Instance) *endpoint, prev *Picker) *Picker {
	var active, drain []registry.Instance
	if !slices.ContainsFunc(insts, func(in registry.Instance) bool { return in.Weight == 0 }) {
		active = insts // immutable: share it rather than copy
	} else {
		for _, in := range insts {
			if in.Weight > 0 {
				active = append(active, in)
			} else {
				drain = append(drain, in)
			}
		}
	}
	if len(active) == 0 {
		// Nothing but draining instances: use them, with equal weights.
		active, drain = drain, nil
	}
	p := &Picker{snap: snap, insts: active, spare: drain, rnd: rng{c.rng}, sh: sh, cfg: c}
	p.eps = make([]*endpoint, len(active))
	p.weights = make([]uint32, len(active))
	for i := range active {
		p.eps[i] = ep(&active[i])
		// Only draining instances are left: treat them as equals.
		p.weights[i] = cmp.Or(active[i].Weight, registry.DefaultWeight)
	}
	p.spareEps = make([]*endpoint, len(drain))
	for i := range drain {
		p.spareEps[i] = ep(&drain[i])
	}
	p.track = c.strategy == LeastRequest || c.strategy == P2CEWMA || c.bound > 0
	p.keyed = c.strategy == ConsistentHash || c.strategy == Maglev
	if len(active) > 0 {
		p.algo = newAlgorithm(c, p, prev)
	}
	p.direct = len(active) > 0 // build clears it when it adds a split
	return p
}

func newAlgorithm(c *config, p *Picker, prev *Picker) algorithm {
	switch c.strategy {
	case RoundRobin:
		return newRoundRobin(p)
	case WeightedRoundRobin:
		return newWeightedRoundRobin(p, c.smoothLimit)
	case Random:
		return &random{n: uint64(len(p.insts)), rnd: p.rnd}
	case WeightedRandom:
		return newAlias(p)
	case LeastRequest:
		return newLeastRequest(p, c.choices)
	case P2CEWMA:
		return newP2CEWMA(p, p.sh)
	case ConsistentHash:
		var old *ring
		if prev != nil {
			old, _ = prev.algo.(*ring)
		}
		return newRing(p, old, c.vnodes, c.bound, p.sh)
	case Maglev:
		return newMaglev(p, c.maglevSize, c.bound, p.sh)
	}
	panic(fmt.Sprintf("selector: strategy %q not validated", c.strategy))
}

// follow applies every snapshot w delivers until ctx ends or w is closed,
// and returns that error. Stale snapshots (the backend is failing) are
// applied too: the last known instances stay in use. Run it in a goroutine
// you own, or use Start.
func (s *Selector) follow(ctx context.Context, w *registry.Watcher) error {
	for {
		snap, err := w.Next(ctx)
		if err != nil && !errors.Is(err, registry.ErrUnavailable) {
			return err
		}
		s.Update(snap)
	}
}

// Start waits for w's first snapshot (bounded by ctx), applies it, and
// then follows w in a goroutine owned by the Selector until Close. When
// Start returns nil, Pick sees the service's instances. Start does not
// close w.
func (s *Selector) Start(ctx context.Context, w *registry.Watcher) error {
	s.run.Lock()
	if s.run.closed {
		s.run.Unlock()
		return fmt.Errorf("selector: start: %w", registry.ErrClosed)
	}
	if s.run.started {
		s.run.Unlock()
		return errStarted
	}
	s.run.started = true
	s.run.Unlock()
	// Not under the lock: Close must not wait for the first snapshot.
	snap, err := w.Next(ctx)
	if err != nil && !errors.Is(err, registry.ErrUnavailable) {
		s.run.Lock()
		s.run.started = false
		s.run.Unlock()
		return err
	}
	s.Update(snap)
	s.run.Lock()
	defer s.run.Unlock()
	if s.run.closed { // Close ran while we waited
		return fmt.Errorf("selector: start: %w", registry.ErrClosed)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.run.cancel, s.run.done = cancel, done
	go func() {
		defer close(done)
		err := s.follow(rctx, w)
		if rctx.Err() == nil {
			s.run.Lock()
			s.run.err = err
			s.run.Unlock()
		}
	}()
	return nil
}

// Close stops the goroutine started by Start and waits for it; a Start
// after (or racing with) Close fails with an error wrapping
// registry.ErrClosed. Close returns the error that ended following early
// (a closed watcher), if any. The selector keeps answering Pick from its
// last snapshot, and Update still works.
func (s *Selector) Close() error {
	s.run.Lock()
	s.run.closed = true
	cancel, done := s.run.cancel, s.run.done
	s.run.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	<-done
	s.run.Lock()
	defer s.run.Unlock()
	err := s.run.err
	s.run.err = nil
	return err
}

// Picker is one immutable, prepared view of a Selector's instances: what
// one Update built from one snapshot (filters applied, draining instances
// set aside, the strategy's tables computed). It never changes: a
// Selector publishes a new Picker on every Update, and whoever holds an
// older one keeps picking from that older set (grpc-go's pickers work the
// same way). The per-instance state its Done values feed (requests in
// flight, latency) belongs to the Selector and is shared with later
// Pickers for the instances they keep.
//
// A Picker is safe for concurrent use. Get one from Selector.Picker; the
// zero Picker has no instances.
type Picker struct {
	// What every pick reads comes first (two cache lines).
	insts  []registry.Instance // candidates: weight > 0, or all draining
	eps    []*endpoint         // state of insts[i]
	algo   algorithm
	sh     *shared // the selector's, for Done
	canary *Picker // WithSplit: the split's instances, and
	track  bool    // count requests in flight
	keyed  bool    // the algorithm uses PickOptions.Key
	direct bool    // instances and no split: a plain pick is the strategy's
	ports  bool    // an instance names endpoints: PickOptions.Endpoint narrows

	rest     *Picker // the others; nil without a split
	rnd      rng
	weights  []uint32            // weight of insts[i], > 0
	spare    []registry.Instance // draining, used when every candidate is excluded
	spareEps []*endpoint
	sel      *Selector
	routes   *routeCache // per-call routes' pickers; nil in a route's picker
	snap     registry.Snapshot
	// WithLocality: the tiers' instances (zone, region, rest; nil when
	// a tier has none), the cumulative shares of picks of the first two
	// (of 2^64; math.MaxUint64 is all), and which tiers are in panic.
	tiers  [numTiers]*Picker
	cum    [2]uint64
	tiered bool
	panic  uint8
	cfg    *config // the configuration it was built with
}

// algorithm is a strategy's prepared table. pick returns an index into
// Picker.insts; attempt > 0 asks for another candidate because the
// previous one was rejected.
type algorithm interface {
	pick(key uint64, keyed bool, attempt int) int
}

// randSource is a deterministic generator for tests and simulations.
type randSource interface{ Uint64() uint64 }

// rng draws from the runtime's per-thread generator (no shared state,
// scales across cores) unless a source was injected.
type rng struct{ src randSource }

func (r rng) next() uint64 {
	if r.src != nil {
		return r.src.Uint64()
	}
	return rand.Uint64()
}

// key is the hash a keyed strategy picks by: the caller's key, else a
// random one; a retry (attempt > 0) rehashes it to land elsewhere.
func (r rng) key(key uint64, keyed bool, attempt int) uint64 {
	if !keyed {
		key = r.next()
	}
	if attempt > 0 {
		key = rehash(key, attempt)
	}
	return key
}

// below returns a number in [0, n) (Lemire's multiply-shift; the bias is
// below 2^-32 for the sizes used here).
func (r rng) below(n uint64) uint64 {
	hi, _ := mul64(r.next(), n)
	return hi
}

// pair returns two distinct numbers in [0, n), n ≥ 2, from one random
// draw: a from its high half, b from its low half (multiply-shift on 32
// bits; the bias is below n·2^-32, negligible for any service size).
// One draw instead of two is a tenth of a P2C pick.
func (r rng) pair(n uint64) (a, b uint64) {
	x := r.next()
	a = (x >> 32) * n >> 32
	b = (x & 0xffffffff) * (n - 1) >> 32
	if b >= a {
		b++
	}
	return a, b
}
