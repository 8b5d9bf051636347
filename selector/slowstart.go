package selector

import (
	"fmt"
	"math"
	"time"

	"github.com/roster-go/roster/registry"
)

// SlowStart ramps the share of an instance that is new to the service, or
// back from quarantine (Selector.Rewarm), over a window, as Envoy's
// slow_start_config and dubbo's warm-up do: a process that has just
// started (cold caches, connection pools, JIT) gets a fraction of its
// weight that grows from MinWeightPercent to 100 % over Window:
//
//	fraction = max(MinWeightPercent/100, (elapsed/Window)^(1/Aggression))
//
// It applies to every strategy: the instance a strategy proposes is
// taken with probability fraction, else the strategy is asked again (up
// to 4 times), so a warming instance's share is its share times fraction.
// For ConsistentHash and Maglev the draw is the key's own, so a key sticks
// to the instance from the moment it is admitted.
//
// "New" means new to the service: instances in the first snapshot a
// Selector sees with any instance in it are not ramped (a client that
// starts does not slow-start a whole running service), nor those given to
// Baseline; an instance that appears after it, or drops out and comes
// back, is.
type SlowStart struct {
	// Window is the length of the ramp; 0 disables slow start.
	Window time.Duration
	// Aggression shapes the ramp: 1 is linear, > 1 rises faster at first,
	// < 1 slower (Envoy's aggression). 0 means 1.
	Aggression float64
	// MinWeightPercent is the smallest fraction, in percent, a warming
	// instance gets (Envoy: 10). 0 means 10.
	MinWeightPercent float64
}

// defaultSlowStart is used when New gets no WithSlowStart: a 30 s linear
// ramp from 10 %. It costs a pick one atomic load while no instance is
// warming, and a read of the coarse clock plus one random draw while one
// is.
var defaultSlowStart = SlowStart{Window: 30 * time.Second, Aggression: 1, MinWeightPercent: 10}

// WithSlowStart sets the slow start of new instances (default
// defaultSlowStart); SlowStart{} turns it off.
func WithSlowStart(s SlowStart) Option { return func(c *config) { c.slow = s } }

// maxWarmTries bounds how often a pick asks the strategy again because a
// warming instance was not admitted.
const maxWarmTries = 4

// slowStart is SlowStart prepared for picks.
type slowStart struct {
	window   int64 // ns, 0 = off
	exponent float64
	min      float64
}

func (s SlowStart) validate() (slowStart, error) {
	if s.Window < 0 || s.Aggression < 0 || s.MinWeightPercent < 0 || s.MinWeightPercent > 100 ||
		math.IsNaN(s.Aggression) || math.IsInf(s.Aggression, 0) || math.IsNaN(s.MinWeightPercent) {
		return slowStart{}, fmt.Errorf("%w: slow start %+v (want Window ≥ 0, Aggression ≥ 0, MinWeightPercent in [0, 100])",
			errInvalidOption, s)
	}
	agg := s.Aggression
	if agg == 0 {
		agg = 1
	}
	minPct := s.MinWeightPercent
	if minPct == 0 {
		minPct = 10
	}
	return slowStart{window: int64(s.Window), exponent: 1 / agg, min: minPct / 100}, nil
}

// fraction returns the share of its weight an instance warming since
// from (0: not warming) gets at now.
func (s *slowStart) fraction(from, now int64) float64 {
	if from == 0 || s.window == 0 {
		return 1
	}
	elapsed := now - from
	if elapsed >= s.window {
		return 1
	}
	x := float64(max(elapsed, 0)) / float64(s.window)
	if s.exponent != 1 {
		x = math.Pow(x, s.exponent)
	}
	return max(x, s.min)
}

// startWarm begins the ramp of ep now.
func (sh *shared) startWarm(ep *endpoint) {
	if sh.slow.window == 0 {
		return
	}
	now := max(sh.clock.read(), 1) // 0 means "not warming"
	ep.warmFrom.Store(now)
	end := now + sh.slow.window
	for {
		cur := sh.warmEnd.Load()
		if cur >= end || sh.warmEnd.CompareAndSwap(cur, end) {
			return
		}
	}
}

// warm admits the instance i the strategy proposed with probability its
// slow-start fraction, else asks the strategy again; called only while
// some instance is warming.
func (p *Picker) warm(i int, h uint64, keyed bool) int {
	now := p.sh.clock.read()
	if end := p.sh.warmEnd.Load(); now >= end {
		p.sh.warmEnd.CompareAndSwap(end, 0)
		return i
	}
	for attempt := 1; ; attempt++ {
		f := p.sh.slow.fraction(p.eps[i].warmFrom.Load(), now)
		if f >= 1 || attempt > maxWarmTries {
			return i
		}
		u := p.rnd.next()
		if keyed {
			// The key's own draw for this instance: a key admitted at
			// fraction f stays admitted as f grows.
			u = rehash(h^uint64(i)*0x9e3779b97f4a7c15, 7)
		}
		if float64(u>>11) < f*(1<<53) {
			return i
		}
		i = p.algo.pick(h, keyed, attempt)
	}
}

// Baseline tells the selector which instances the service had when this
// client started, for a caller that learns them before it can pick from
// them: the gRPC balancer feeds the selector the instances whose
// connection is ready, one at a time, and without a baseline all but the
// first would be slow-started at every client start. Instances of the
// baseline are never slow-started on arrival (Rewarm still ramps them).
// Only the first call with instances counts.
func (s *Selector) Baseline(snap registry.Snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.baseline != nil || len(snap.Instances) == 0 {
		return
	}
	s.baseline = make(map[string]bool, len(snap.Instances))
	for i := range snap.Instances {
		s.baseline[snap.Instances[i].ID] = true
	}
}

// isNew reports whether an instance the selector has no state for is new
// to the service; s.mu is held.
func (s *Selector) isNew(id string) bool { return s.seen && !s.baseline[id] }

// Rewarm restarts the slow start of the instance with the given ID, as
// for an instance new to the service: middleware's quarantine calls it
// when it readmits an instance, so that one that was failing gets its
// traffic back gradually. It is a no-op for an unknown ID or when slow
// start is off.
func (s *Selector) Rewarm(id string) {
	s.mu.Lock()
	ep, sh := s.eps[id], s.sh
	s.mu.Unlock()
	if ep != nil {
		sh.startWarm(ep)
	}
}
