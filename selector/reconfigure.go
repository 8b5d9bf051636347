package selector

import "fmt"

// Reconfigure replaces the selector's options with opts, as New(opts...)
// would set them (options not given take their defaults, not their
// previous values), and rebuilds the picker from the current snapshot.
// The new Picker is published atomically: a pick sees the old
// configuration or the new one, never a mix, and never waits.
//
// Per-instance state is kept: requests in flight, latency estimates and
// slow starts in progress carry over to the instances of the new
// configuration, so a slow instance is still avoided the moment after a
// strategy, filter or split change, and a canary raised from 5 % to 50 %
// keeps its ramp. Calls picked before Reconfigure report their outcome
// (Done) to the same state.
//
// The locality options (WithLocality, WithRegion, WithOverprovisioning,
// WithPanicThreshold) and WithInflightBound describe the process rather
// than the traffic and cannot change. Reconfigure keeps
// New's values when opts do not give them, and fails when opts give
// others. On any error (an unknown strategy, an out-of-range option, a
// fixed option changed) the error wraps registry.ErrInvalid and the
// selector keeps its configuration.
func (s *Selector) Reconfigure(opts ...Option) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := defaultConfig()
	// What New fixed (and the tests' hooks) carries over.
	c.zone, c.region, c.inflightBound = s.cfg.zone, s.cfg.region, s.cfg.inflightBound
	c.overprovision, c.panicPct = s.cfg.overprovision, s.cfg.panicPct
	c.rng, c.clock, c.decay = s.cfg.rng, s.cfg.clock, s.cfg.decay
	for _, o := range opts {
		o(&c)
	}
	if err := c.validate(); err != nil {
		return err
	}
	slow, err := c.slow.validate()
	if err != nil {
		return err
	}
	if c.zone != s.cfg.zone || c.region != s.cfg.region {
		return fmt.Errorf("%w: locality zone %q, region %q: the selector was built for zone %q, region %q, which cannot change (build a new Selector)",
			errInvalidOption, c.zone, c.region, s.cfg.zone, s.cfg.region)
	}
	if c.overprovision != s.cfg.overprovision || c.panicPct != s.cfg.panicPct {
		return fmt.Errorf("%w: locality overprovisioning %v, panic threshold %d: the selector was built with %v, %d, which cannot change (build a new Selector)",
			errInvalidOption, c.overprovision, c.panicPct, s.cfg.overprovision, s.cfg.panicPct)
	}
	if c.inflightBound != s.cfg.inflightBound {
		return fmt.Errorf("%w: in-flight bound %v: the selector was built with %v, which cannot change (build a new Selector)",
			errInvalidOption, c.inflightBound, s.cfg.inflightBound)
	}
	// A new generation of shared state: the flags Done reads (EWMA,
	// bounded loads) belong to the configuration, and picks made under
	// the old one finish on the old one. The clock, the in-flight epochs
	// and the slow starts in progress are the same.
	sh := newShared(&c, slow, s.sh.clock)
	sh.warmEnd.Store(s.sh.warmEnd.Load())
	s.live, s.sh = &c, sh
	if s.prev == nil {
		s.cur.Store(&Picker{sh: sh, cfg: &c})
		return nil
	}
	p := s.build(s.prev.snap)
	s.prev = p
	s.cur.Store(p)
	return nil
}
