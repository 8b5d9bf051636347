package selector

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/roster-go/roster/registry"
)

// A Route narrows one pick to the instances that match every non-empty
// field: routing chosen per call (a header that pins a version, a
// request for the local zone), where filters (WithFilters) are chosen per
// Selector. Set it in PickOptions.Route or in the call's context
// (WithRoute); PickOptions wins. The zero Route matches every instance.
//
// A Route is strict: when no instance matches, Pick returns
// ErrNoInstances rather than send the call elsewhere (a pinned version
// that is not deployed fails loudly). The instances a Route selects are
// picked with the Selector's strategy and share its per-instance state;
// the prepared picker of each Route is cached with the snapshot (up to
// 64 Routes per snapshot; more are prepared per pick), so a routed pick
// allocates nothing once its Route has been seen.
type Route struct {
	Version   string // Instance.Version equals it
	Zone      string // Instance.Zone equals it
	Tag       string // Instance.Tags contains it
	MetaKey   string // with MetaValue: Instance.Metadata[MetaKey] equals MetaValue
	MetaValue string
}

// clone copies r's strings, so that a cached Route does not keep the
// caller's (nor make the compiler move PickOptions to the heap).
func (r *Route) clone() Route {
	return Route{strings.Clone(r.Version), strings.Clone(r.Zone), strings.Clone(r.Tag),
		strings.Clone(r.MetaKey), strings.Clone(r.MetaValue)}
}

// zero reports whether r routes nothing (matches every instance),
// without copying r (a copy of five strings costs a
// tenth of a pick).
func (r *Route) zero() bool {
	// Lengths, not r == Route{}: five string compares cost a tenth of a pick too.
	return len(r.Version)|len(r.Zone)|len(r.Tag)|len(r.MetaKey)|len(r.MetaValue) == 0
}

func (r *Route) match(in *registry.Instance) bool {
	if r.Version != "" && in.Version != r.Version || r.Zone != "" && in.Zone != r.Zone {
		return false
	}
	if r.Tag != "" && !hasTag(in.Tags, r.Tag) {
		return false
	}
	if r.MetaKey != "" && in.Metadata[r.MetaKey] != r.MetaValue {
		return false
	}
	return true
}

func hasTag(tags []string, t string) bool {
	for _, x := range tags {
		if x == t {
			return true
		}
	}
	return false
}

type routeCtx struct{}

// WithRoute returns a context whose picks are routed by r (see Route);
// contrib/rosterhttp and contrib/rostergrpc set it from the X-Roster-Version header
// and x-roster-version metadata.
func WithRoute(ctx context.Context, r Route) context.Context {
	routesInContext.Store(true)
	return context.WithValue(ctx, routeCtx{}, r)
}

// routesInContext is set once WithRoute has been called in the process:
// until then a pick does not look for a Route in its context (a
// context.Value walk costs up to a tenth of a pick).
var routesInContext atomic.Bool

// routeFrom returns the Route WithRoute put in ctx.
func routeFrom(ctx context.Context) (Route, bool) {
	r, ok := ctx.Value(routeCtx{}).(Route)
	return r, ok
}

// Split sends Percent of the calls that carry no Route to the instances
// Route matches (a canary), and the others to the rest: WithSplit(Split{
// Route: Route{Version: "2.0"}, Percent: 5}). A call with a
// PickOptions.Key is placed by a hash of the key, so a user stays on the
// same side of the split while Percent does not change (and, as Percent
// grows, only moves to the canary); a call without a key is placed at
// random. When either side has no instance, every call goes to the other.
//
// A split by weight needs no Split: register the canary instances with
// weights that give them their share.
type Split struct {
	Route   Route
	Percent float64 // in [0, 100]
}

// WithSplit sets a canary split (see Split).
func WithSplit(s Split) Option { return func(c *config) { c.split = &s } }

func (s *Split) validate() error {
	if s == nil {
		return nil
	}
	if !(s.Percent >= 0 && s.Percent <= 100) || s.Route.zero() {
		return fmt.Errorf("%w: split of %v%% to route %+v (want a Route and Percent in [0, 100])", errInvalidOption, s.Percent, s.Route)
	}
	return nil
}

// maxRoutes bounds the Routes whose pickers a snapshot caches.
const maxRoutes = 64

// routeCache holds the pickers of the Routes seen since the snapshot:
// copy-on-write, so a lookup is one atomic load and a map read.
type routeCache struct {
	mu    sync.Mutex
	m     atomic.Pointer[map[Route]*Picker]
	names atomic.Pointer[[]served] // the pickers of endpoint names (serving)
}

// served is the picker of the instances that serve one endpoint name.
type served struct {
	name string
	p    *Picker
}

// maxNames bounds the endpoint names whose pickers a snapshot caches. A
// process asks for a few (http, grpc), so a scan beats a map.
const maxNames = 16

func newRouteCache() *routeCache { return &routeCache{} }

// mayRoute reports, cheaply and inline, whether a pick with o may be
// routed: the common pick (no Route anywhere, no split) skips routed.
func (p *Picker) mayRoute(o *PickOptions) bool {
	return p.canary != nil || !o.Route.zero() || routesInContext.Load()
}

// routed returns the picker a pick with o and ctx uses: o.Route's, the
// context's Route's, the split's side, or p itself.
func (p *Picker) routed(ctx context.Context, o *PickOptions) *Picker {
	if !o.Route.zero() {
		return p.route(&o.Route)
	}
	if ctx != nil && routesInContext.Load() {
		if r, ok := ctx.Value(routeCtx{}).(Route); ok && !r.zero() {
			return p.route(&r)
		}
	}
	if p.canary != nil {
		return p.side(o)
	}
	return p
}

// side places a call on one side of the split.
func (p *Picker) side(o *PickOptions) *Picker {
	var u uint64
	if o.Key != "" {
		u = rehash(xxhash.Sum64String(o.Key), 0x5eed) // not the ring's position
	} else {
		u = p.rnd.next()
	}
	if float64(u>>11) < p.cfg.split.Percent/100*(1<<53) {
		return p.canary
	}
	return p.rest
}

// route returns the prepared picker of r, from the cache or built now.
func (p *Picker) route(r *Route) *Picker {
	if p.routes == nil {
		return &Picker{sh: p.sh, cfg: p.cfg} // no snapshot yet, or already a route's picker
	}
	if m := p.routes.m.Load(); m != nil {
		if q, ok := (*m)[*r]; ok {
			return q
		}
	}
	c := p.routes
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if q, ok := (*old)[*r]; ok {
			return q
		}
	}
	q := p.subset(r.match)
	if old != nil && len(*old) >= maxRoutes {
		return q
	}
	m := make(map[Route]*Picker, 1+len(ptrMap(old)))
	for k, v := range ptrMap(old) {
		m[k] = v
	}
	m[r.clone()] = q
	c.m.Store(&m)
	return q
}

func ptrMap(m *map[Route]*Picker) map[Route]*Picker {
	if m == nil {
		return nil
	}
	return *m
}

// subset prepares a picker over the instances of p that keep accepts,
// sharing their per-instance state.
func (p *Picker) subset(keep func(*registry.Instance) bool) *Picker {
	return p.subsetOf(func(in *registry.Instance) (registry.Instance, bool) { return *in, keep(in) })
}

// subsetOf prepares a picker over the instances of p that f accepts, as
// f returns them, sharing their per-instance state.
func (p *Picker) subsetOf(f func(*registry.Instance) (registry.Instance, bool)) *Picker {
	var insts []registry.Instance
	eps := map[string]*endpoint{}
	for _, set := range []struct {
		in  []registry.Instance
		eps []*endpoint
	}{{p.insts, p.eps}, {p.spare, p.spareEps}} {
		for i := range set.in {
			if in, ok := f(&set.in[i]); ok {
				insts = append(insts, in)
				eps[in.ID] = set.eps[i]
			}
		}
	}
	return assembleWith(p.cfg, p.sh, p.snap, insts, func(in *registry.Instance) *endpoint { return eps[in.ID] }, nil)
}

// serving returns the picker of the instances that serve the endpoint
// called name, each with that endpoint's address in Address: from the
// cache, or prepared now. It routes and splits as p does.
func (p *Picker) serving(name string) *Picker {
	c := p.routes
	if c == nil {
		return p // not a selector's own picker: it has no endpoints to choose
	}
	if l := c.names.Load(); l != nil {
		for _, s := range *l {
			if s.name == name {
				return s.p
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var old []served
	if l := c.names.Load(); l != nil {
		old = *l
	}
	for _, s := range old {
		if s.name == name {
			return s.p
		}
	}
	q := p.subsetOf(func(in *registry.Instance) (registry.Instance, bool) {
		e, ok := in.Endpoint(name)
		out := *in
		out.Address = e.Address
		return out, ok
	})
	q.root(p.sel)
	if p.tiered && q.canary == nil && len(q.insts) > 0 {
		p.sel.tierServing(q)
	}
	if len(old) >= maxNames {
		return q
	}
	l := append(old[:len(old):len(old)], served{strings.Clone(name), q}) // a new array: readers keep theirs
	c.names.Store(&l)
	return q
}

// splitRoutes prepares the two sides of the selector's split, if any.
func (p *Picker) splitRoutes() {
	sp := p.cfg.split
	if sp == nil {
		return
	}
	canary := p.subset(sp.Route.match)
	rest := p.subset(func(in *registry.Instance) bool { return !sp.Route.match(in) })
	if canary.size() > 0 && rest.size() > 0 && !math.IsNaN(sp.Percent) {
		p.canary, p.rest = canary, rest
	}
}
