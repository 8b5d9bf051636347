package selector

import (
	"math"

	"github.com/roster-go/roster/registry"
)

// Defaults of the locality tiers (WithLocality), Envoy's.
const (
	// defaultOverprovisioning is the factor by which a tier's usable
	// fraction is scaled before it sheds traffic, as Envoy's
	// overprovisioning_factor: a tier with u of its instances usable
	// takes min(1, 1.4 × u) of the calls still its own, so the local
	// zone keeps all of them until more than about 29% of it is
	// unusable.
	defaultOverprovisioning = 1.4
	// defaultPanicThreshold is the usable percentage under which a tier
	// is in panic while the tiers together are short (Envoy's
	// healthy_panic_threshold): its picks then ignore PickOptions.Avoid.
	defaultPanicThreshold = 50
)

// Locality tiers, in order of preference.
const (
	tierZone   = iota // the caller's zone
	tierRegion        // the caller's region, other zones
	tierRest          // everywhere else
	numTiers
)

// WithLocality makes zone the caller's local tier: picks prefer the
// instances of zone, then (WithRegion) those of the caller's region,
// then any other, and traffic spills from a tier in proportion to how
// much of it is unusable, as Envoy's locality-weighted priority load
// balancing does. An instance is unusable while it drains (weight 0) or
// while SetUsable says so (the middleware's quarantine marks the
// instances it ejects). With h = min(1, 1.4 × usable fraction) for each
// tier, the zone takes h(zone) of the calls, the region min(h(region),
// what is left), the rest what is left after that. When the healths add
// up to less than one, they are scaled up to one; when nothing is usable
// anywhere, every call goes to the first tier with instances. While the
// healths add up to less than one, a tier whose usable share is under
// the panic threshold (50%, WithPanicThreshold) is in panic: its picks
// ignore PickOptions.Avoid, as Envoy's panic mode ignores health. A pick
// whose tier rejects every instance (PickOptions.Avoid, Tried) tries the
// next tiers before it relaxes a soft option. An empty zone turns
// locality off.
//
// The tiers are computed at Update and SetUsable, never in Pick: a
// tiered pick draws one random number more than a plain one.
//
// Locality applies to plain picks and to picks for a named endpoint
// (PickOptions.Endpoint). A routed pick (Route, WithRoute) or a selector
// with a split (WithSplit) chooses among its own instances without
// tiers.
func WithLocality(zone string) Option { return func(c *config) { c.zone = zone } }

// WithRegion names the caller's region, for WithLocality: the instances
// of region (registry.Instance.Region) outside the caller's zone are the
// second tier, taking the traffic the zone sheds before any other
// region. Without it there are two tiers, the zone and the rest.
func WithRegion(region string) Option { return func(c *config) { c.region = region } }

// WithOverprovisioning sets the factor of the locality tiers' health
// (default 1.4, Envoy's); 1 spills as soon as one local instance is
// unusable. It must be from 1 to 100.
func WithOverprovisioning(f float64) Option { return func(c *config) { c.overprovision = f } }

// WithPanicThreshold sets the usable percentage under which a locality
// tier is in panic (default 50, Envoy's); 0 turns panic off. It must be
// from 0 to 100. middleware.Client passes its quarantine's threshold
// unless told otherwise.
func WithPanicThreshold(percent int) Option { return func(c *config) { c.panicPct = percent } }

// tierOf returns the tier of in for a caller in zone and region.
func tierOf(in *registry.Instance, zone, region string) int {
	switch {
	case in.Zone == zone:
		return tierZone
	case region != "" && in.Region == region:
		return tierRegion
	}
	return tierRest
}

// tiers splits insts by tier.
func tiers(insts []registry.Instance, zone, region string) (out [numTiers][]registry.Instance) {
	for _, in := range insts {
		t := tierOf(&in, zone, region)
		out[t] = append(out[t], in)
	}
	return out
}

// usable returns the usable fraction of a tier's instances.
func usable(p *Picker, unusable map[string]bool) float64 {
	n := len(p.insts) + len(p.spare)
	if n == 0 {
		return 0
	}
	u := 0
	for i := range p.insts {
		if p.insts[i].Weight > 0 && !unusable[p.insts[i].ID] {
			u++
		}
	}
	return float64(u) / float64(n)
}

// loads computes the share of plain picks each tier of p gets, Envoy's
// priority load: each tier takes its health, min(1, factor × usable
// fraction), of what the tiers before it left, the healths scaled to one
// when they add up to less. It sets p.cum and p.panic.
func (c *config) loads(p *Picker, unusable map[string]bool) {
	var frac, health, load [numTiers]float64
	total := 0.0
	first := -1
	for i, t := range p.tiers {
		if t == nil {
			continue
		}
		if first < 0 {
			first = i
		}
		frac[i] = usable(t, unusable)
		health[i] = min(1, c.overprovision*frac[i])
		total += health[i]
	}
	p.panic = 0
	if first < 0 {
		p.cum = [2]uint64{math.MaxUint64, math.MaxUint64}
		return
	}
	if total == 0 {
		load[first] = 1 // nothing usable anywhere: the first tier takes it all
	} else {
		norm, left := min(1, total), 1.0
		for i := range health {
			load[i] = min(left, health[i]/norm)
			left -= load[i]
		}
	}
	if total < 1 {
		for i, t := range p.tiers {
			if t != nil && frac[i]*100 < float64(c.panicPct) {
				p.panic |= 1 << i
			}
		}
	}
	p.cum[0] = fixed(load[0])
	p.cum[1] = fixed(load[0] + load[1])
}

// fixed returns share (0 to 1) of 2^64, math.MaxUint64 for all of it.
func fixed(share float64) uint64 {
	if share >= 1-1e-12 { // float sums short of one by rounding are one
		return math.MaxUint64
	}
	return uint64(share * (1 << 64))
}

// LocalShare returns the share of plain picks that go to the caller's
// zone (WithLocality): 1 without locality.
func (s *Selector) LocalShare() float64 {
	z, _, _ := s.TierShares()
	return z
}

// TierShares returns the shares of plain picks that go to the caller's
// zone, to the rest of its region (WithRegion) and to everywhere else
// (WithLocality). They add up to one; without locality zone is 1.
func (s *Selector) TierShares() (zone, region, rest float64) {
	p := s.cur.Load()
	if !p.tiered {
		return 1, 0, 0
	}
	share := func(c uint64) float64 {
		if c == math.MaxUint64 {
			return 1
		}
		return float64(c) / (1 << 64)
	}
	a, b := share(p.cum[0]), share(p.cum[1])
	return a, b - a, 1 - b
}

// SetUsable tells the selector whether an instance can take calls now,
// for the usable share of its locality tier (WithLocality). The
// middleware's quarantine calls it when it ejects an instance and when
// the ejection ends. Pick may still return an unusable instance: it only
// shifts the tiers' shares. Without WithLocality it does nothing. The
// change republishes the current Picker with the new shares; nothing is
// rebuilt.
func (s *Selector) SetUsable(id string, usable bool) {
	if s.cfg.zone == "" {
		return // no tiers: nothing to share out
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unusable[id] == !usable {
		return
	}
	if usable {
		delete(s.unusable, id)
	} else {
		if s.unusable == nil {
			s.unusable = map[string]bool{}
		}
		s.unusable[id] = true
	}
	if s.prev == nil || !s.prev.tiered {
		return
	}
	np := *s.prev
	s.cfg.loads(&np, s.unusable)
	// The endpoints' and routes' pickers are prepared again on their
	// next pick, the endpoints' with the new shares.
	np.routes = newRouteCache()
	s.prev = &np
	s.cur.Store(&np)
}

// tierServing gives q, the picker of one endpoint name (serving), the
// locality tiers and shares of its selector's own picker.
func (s *Selector) tierServing(q *Picker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := make([]registry.Instance, 0, len(q.insts)+len(q.spare))
	eps := make(map[string]*endpoint, cap(all))
	for i := range q.insts {
		all = append(all, q.insts[i])
		eps[q.insts[i].ID] = q.eps[i]
	}
	for i := range q.spare {
		all = append(all, q.spare[i])
		eps[q.spare[i].ID] = q.spareEps[i]
	}
	s.tier(q, all, func(in *registry.Instance) *endpoint { return eps[in.ID] })
}

// pickTiered picks across the locality tiers: the tier the draw gives
// first, then the others in order, relaxing a soft option only when no
// tier has an instance without it.
func (p *Picker) pickTiered(o *PickOptions, h uint64, keyed bool) (*Picker, *registry.Instance, *endpoint) {
	first := tierZone
	if p.cum[0] != math.MaxUint64 {
		r := p.rnd.next()
		switch {
		case r < p.cum[0]:
		case p.cum[1] == math.MaxUint64 || r < p.cum[1]:
			first = tierRegion
		default:
			first = tierRest
		}
	}
	var calm *PickOptions // o for a tier in panic: health ignored
	if p.panic != 0 {
		c := *o
		c.Avoid = nil
		calm = &c
	}
	for s := untried; s <= anyOne; s++ {
		if s != untried && !o.relaxes(s) {
			continue
		}
		for n := -1; n < numTiers; n++ {
			i := n
			if n < 0 {
				i = first
			} else if n == first {
				continue
			}
			t := p.tiers[i]
			if t == nil || len(t.insts) == 0 {
				continue
			}
			to := o
			if p.panic&(1<<i) != 0 {
				to = calm
			}
			if inst, ep := t.pickAt(h, keyed, to, s); inst != nil {
				return t, inst, ep
			}
		}
	}
	return p, nil, nil
}

// pickAt returns the strategy's choice if o accepts it at step s, else
// another instance o accepts, else nil.
func (p *Picker) pickAt(h uint64, keyed bool, o *PickOptions, s step) (*registry.Instance, *endpoint) {
	i := p.algo.pick(h, keyed, 0)
	if p.sh.warmEnd.Load() != 0 {
		i = p.warm(i, h, keyed)
	}
	if !o.rejects(&p.insts[i], s) {
		return &p.insts[i], p.eps[i]
	}
	return p.pickExcluding(h, keyed, o, s)
}
