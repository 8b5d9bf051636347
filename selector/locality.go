package selector

import (
	"math"

	"github.com/roster-go/roster/registry"
)

// overprovisioning is the factor by which a tier's usable share is
// scaled before it sheds traffic, as Envoy's overprovisioning_factor:
// a tier with u of its instances usable takes min(1, 1.4 × u) of the
// calls, so the local zone keeps all of them until more than about 29%
// of it is unusable.
const overprovisioning = 1.4

// WithLocality makes zone the caller's local tier: picks prefer the
// instances of zone, and traffic spills to every other instance in
// proportion to how much of the zone is usable, as Envoy's
// locality-weighted priority load balancing does. An instance is
// unusable while it drains (weight 0) or while SetUsable says so (the
// middleware's quarantine marks the instances it ejects). The local tier
// takes min(1, 1.4 × usable fraction) of the calls and the
// rest goes to the other tier. When the two tiers' shares add up to less
// than one, they are scaled up to one; when nothing is usable anywhere,
// every call goes to the local tier (panic mode: the quarantine's own
// panic threshold then decides). A pick whose preferred tier rejects
// every instance (PickOptions.Avoid, Tried) tries the other tier before
// it relaxes a soft option. An empty zone turns locality off.
//
// Locality applies to plain picks. A routed pick (Route, WithRoute) or a
// selector with a split (WithSplit) chooses among its own instances
// without tiers.
func WithLocality(zone string) Option { return func(c *config) { c.zone = zone } }

// tiers splits insts into the local zone's and the others'.
func tiers(insts []registry.Instance, zone string) (local, remote []registry.Instance) {
	for _, in := range insts {
		if in.Zone == zone {
			local = append(local, in)
		} else {
			remote = append(remote, in)
		}
	}
	return local, remote
}

// health is a tier's min(1, 1.4 × usable fraction).
func health(p *Picker, unusable map[string]bool) float64 {
	n := len(p.insts) + len(p.spare)
	if n == 0 {
		return 0
	}
	usable := 0
	for i := range p.insts {
		if p.insts[i].Weight > 0 && !unusable[p.insts[i].ID] {
			usable++
		}
	}
	return min(1, overprovisioning*float64(usable)/float64(n))
}

// localShare returns the share of plain picks p sends to its local tier,
// scaled to 2^64 (math.MaxUint64: every one).
func localShare(p *Picker, unusable map[string]bool) uint64 {
	if p.remote == nil {
		return math.MaxUint64
	}
	l, r := health(p.local, unusable), health(p.remote, unusable)
	share := l // the local tier is full: the remote one takes the rest
	if l+r == 0 {
		share = 1 // panic: everything local
	} else if l+r < 1 {
		share = l / (l + r) // normalised, as Envoy does
	}
	if share >= 1 {
		return math.MaxUint64
	}
	return uint64(share * (1 << 64))
}

// LocalShare returns the share of plain picks that go to the local tier
// (WithLocality): 1 without locality or without instances elsewhere.
func (s *Selector) LocalShare() float64 {
	p := s.cur.Load()
	if p.share == math.MaxUint64 || p.local == nil {
		return 1
	}
	return float64(p.share) / (1 << 64)
}

// SetUsable tells the selector whether an instance can take calls now,
// for the usable share of its locality tier (WithLocality). The
// middleware's quarantine calls it when it ejects an instance and when
// the ejection ends. Pick may still return an unusable instance: it only
// shifts the tiers' shares. Without WithLocality it does nothing. The change republishes the current Picker
// with the new shares; nothing is rebuilt.
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
	if s.prev == nil || s.prev.local == nil {
		return
	}
	np := *s.prev
	np.share = localShare(&np, s.unusable)
	s.prev = &np
	s.cur.Store(&np)
}

// pickTiered picks across the locality tiers: the preferred tier by the
// local share, then the other, relaxing a soft option only when neither
// has an instance without it.
func (p *Picker) pickTiered(o *PickOptions, h uint64, keyed bool) (*Picker, *registry.Instance, *endpoint) {
	first, second := p.local, p.remote
	if p.share != math.MaxUint64 && p.rnd.next() >= p.share {
		first, second = second, first
	}
	for s := untried; s <= anyOne; s++ {
		if s != untried && !o.relaxes(s) {
			continue
		}
		for _, t := range [2]*Picker{first, second} {
			if t == nil || len(t.insts) == 0 {
				continue
			}
			if inst, ep := t.pickAt(h, keyed, o, s); inst != nil {
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
