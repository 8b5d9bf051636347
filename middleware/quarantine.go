package middleware

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roster-go/roster/internal/backoff"
)

// QuarantineConfig tunes local outlier ejection. Zero fields take the
// defaults, which follow Envoy and gRPC's outlier detection (gRFC A50) and
// Finagle's failure accrual; see docs/middleware.md.
type QuarantineConfig struct {
	// ConsecutiveFailures ejects an instance after this many failures in a
	// row (default 5).
	ConsecutiveFailures int
	// BaseEjection is the first ejection time; the n-th ejection lasts
	// n × BaseEjection (default 30s), capped at MaxEjection (default 300s),
	// plus up to 10% jitter so ejected instances do not return together.
	BaseEjection time.Duration
	MaxEjection  time.Duration
	// MaxEjectedPercent caps the share of a service's instances ejected at
	// once (default 10), but one instance can always be ejected. A zone
	// failing on its own may go further: see zoneMayGo and
	// docs/middleware.md.
	MaxEjectedPercent int
	// PanicThreshold: when fewer than this percent of the instances are
	// admitted, quarantine is ignored rather than failing calls (default
	// 50; Envoy's healthy_panic_threshold). Negative disables panic mode.
	PanicThreshold int
	// ProbeTimeout: after an ejection ends, one probe call is admitted; if
	// it has not reported within ProbeTimeout another is (default 10s).
	ProbeTimeout time.Duration

	// Ejection by success rate (Envoy's outlier_detection success_rate),
	// on by default: every SuccessRateInterval (default 10s), among the instances
	// with at least SuccessRateRequestVolume calls in it (default 100),
	// those whose success rate is below mean − SuccessRateStdevFactor ×
	// stdev (default 1.9) are ejected, when at least
	// SuccessRateMinimumHosts instances (default 5) had that volume.
	// Ejection time, probing, MaxEjectedPercent and panic mode are the
	// same as above. A negative SuccessRateMinimumHosts turns it off.
	SuccessRateInterval      time.Duration
	SuccessRateMinimumHosts  int
	SuccessRateRequestVolume int
	SuccessRateStdevFactor   float64
}

func (c QuarantineConfig) withDefaults() QuarantineConfig {
	c.ConsecutiveFailures = orDefault(c.ConsecutiveFailures, 5)
	c.BaseEjection = orDefault(c.BaseEjection, 30*time.Second)
	if c.MaxEjection < c.BaseEjection {
		c.MaxEjection = max(300*time.Second, c.BaseEjection)
	}
	c.MaxEjectedPercent = orDefault(c.MaxEjectedPercent, 10)
	if c.PanicThreshold == 0 {
		c.PanicThreshold = 50
	}
	c.ProbeTimeout = orDefault(c.ProbeTimeout, 10*time.Second)
	c.SuccessRateInterval = orDefault(c.SuccessRateInterval, 10*time.Second)
	if c.SuccessRateMinimumHosts == 0 {
		c.SuccessRateMinimumHosts = 5
	}
	c.SuccessRateRequestVolume = orDefault(c.SuccessRateRequestVolume, 100)
	c.SuccessRateStdevFactor = orDefault(c.SuccessRateStdevFactor, 1.9)
	return c
}

// Quarantine keeps, per service and instance, the local evidence that an
// instance keeps failing, and takes it out of rotation for a while
// instead of asking the registry again on every failure. Safe for
// concurrent use; the pick path takes no lock.
type Quarantine struct {
	cfg      QuarantineConfig
	now      func() time.Time
	services sync.Map // service → *quarantined
	onChange func(service, id string, ejected bool)
	onEject  func(service, reason string)
	// onUsable tells the selectors whether an instance can take calls,
	// for their locality shares: false at an ejection, true when it ends
	// (its probe may go) and at readmission.
	onUsable func(service, id string, usable bool)
}

// NewQuarantine returns a quarantine with cfg (zero fields: defaults).
func NewQuarantine(cfg QuarantineConfig) *Quarantine {
	return &Quarantine{cfg: cfg.withDefaults(), now: time.Now}
}

type quarantined struct {
	mu       sync.Mutex // guards ejections (rare), not the counters
	hosts    sync.Map   // instance ID → *host
	ejected  atomic.Int32
	nextEval atomic.Int64 // next success-rate evaluation (unix ns); 0 = not started
}

type host struct {
	zone        string // the instance's zone, "" if unknown; set at creation
	region      string // the instance's region, "" if unknown; likewise
	consecutive atomic.Int32
	until       atomic.Int64 // ejected until (unix ns); 0 = admitted
	probeAt     atomic.Int64 // when the current probe was admitted
	times       int32        // ejections so far; guarded by quarantined.mu
	lastEnd     int64        // when the last ejection ended; guarded by mu
	calls       atomic.Int64 // calls and failures this success-rate interval
	failures    atomic.Int64
}

func (q *Quarantine) service(name string) *quarantined {
	if s, ok := q.services.Load(name); ok {
		return s.(*quarantined)
	}
	s, _ := q.services.LoadOrStore(name, &quarantined{})
	return s.(*quarantined)
}

// admit reports whether the instance may take a call now. total is the
// number of instances the service has, for panic mode. After an ejection
// ends, admit lets exactly one probe call through; its outcome (report)
// readmits the instance or ejects it again for longer.
func (q *Quarantine) admit(service, id string, total int) bool {
	sv, ok := q.services.Load(service)
	if !ok {
		return true
	}
	s := sv.(*quarantined)
	hv, ok := s.hosts.Load(id)
	if !ok {
		return true
	}
	h := hv.(*host)
	until := h.until.Load()
	if until == 0 {
		return true
	}
	if q.panicking(s, total) {
		return true
	}
	now := q.now().UnixNano()
	if now < until {
		return false
	}
	// Ejection over: admit one probe at a time.
	p := h.probeAt.Load()
	if p != 0 && now-p < int64(q.cfg.ProbeTimeout) {
		return false
	}
	return h.probeAt.CompareAndSwap(p, now)
}

func (q *Quarantine) panicking(s *quarantined, total int) bool {
	if q.cfg.PanicThreshold < 0 || total <= 0 {
		return false
	}
	admitted := total - int(s.ejected.Load())
	return admitted*100 < q.cfg.PanicThreshold*total
}

// report records an attempt's outcome for an instance of unknown zone.
func (q *Quarantine) report(service, id string, c Class, total int) {
	q.reportIn(service, id, "", "", c, total)
}

// reportIn records an attempt's outcome for an instance of zone and
// region. Only Retryable and Fatal count as failures; Business and Abort
// are ignored; Success resets. An instance's zone and region are kept
// from its first report, for the ejection cap.
func (q *Quarantine) reportIn(service, id, zone, region string, c Class, total int) {
	failed := c == Retryable || c == Fatal
	if c != Success && !failed {
		return
	}
	s, h := q.lookup(service, id)
	if h == nil {
		if !failed && !q.bySuccessRate() && zone == "" {
			return // a success with nothing to reset, nor a zone to learn
		}
		s = q.service(service)
		h = s.host(id, zone, region)
	}
	if failed {
		n := h.consecutive.Add(1)
		until := h.until.Load()
		probing := until != 0 && q.now().UnixNano() >= until
		if probing || (until == 0 && int(n) >= q.cfg.ConsecutiveFailures) {
			q.eject(service, s, id, h, total, ejectConsecutive)
		}
	} else {
		if h.consecutive.Load() != 0 { // a load keeps the line shared on the common path
			h.consecutive.Store(0)
		}
		if h.until.Load() != 0 {
			q.readmit(service, s, id, h)
		}
	}
	// Last, so that an ejection by success rate is not undone at once by
	// the success that triggered the evaluation.
	if q.bySuccessRate() {
		q.countOutcome(service, s, h, failed, total)
	}
}

// eject takes the instance out of rotation (again, longer, if it was
// probing); reason is for the ejection metric.
func (q *Quarantine) eject(service string, s *quarantined, id string, h *host, total int, reason string) {
	s.mu.Lock()
	now := q.now().UnixNano()
	wasEjected := h.until.Load() != 0
	if !wasEjected {
		limit := max(1, total*q.cfg.MaxEjectedPercent/100)
		if int(s.ejected.Load()) >= limit && !q.zoneMayGo(s, h, total) {
			s.mu.Unlock()
			return // over the cap: count but do not eject
		}
		if h.lastEnd != 0 && now-h.lastEnd > int64(q.cfg.MaxEjection) {
			h.times = 0 // healthy for long enough: start over at base
		}
	}
	h.times++
	d := min(backoff.Mul(q.cfg.BaseEjection, int64(h.times)), q.cfg.MaxEjection)
	d = backoff.Add(d, rand.N(d/10+1))
	until := int64(backoff.Add(time.Duration(now), d))
	h.until.Store(until)
	h.probeAt.Store(0)
	if !wasEjected {
		s.ejected.Add(1)
	}
	s.mu.Unlock()
	if q.onUsable != nil {
		q.onUsable(service, id, false)
		// When this ejection ends its probe must be able to go: the
		// selectors count the instance back in. A later ejection moved
		// until, and set its own timer.
		time.AfterFunc(d, func() {
			if h.until.Load() == until {
				q.onUsable(service, id, true)
			}
		})
	}
	if !wasEjected && q.onChange != nil {
		q.onChange(service, id, true)
	}
	if !wasEjected && q.onEject != nil {
		q.onEject(service, reason)
	}
}

func (q *Quarantine) readmit(service string, s *quarantined, id string, h *host) {
	s.mu.Lock()
	if h.until.Load() == 0 {
		s.mu.Unlock()
		return
	}
	h.until.Store(0)
	h.probeAt.Store(0)
	h.lastEnd = q.now().UnixNano()
	s.ejected.Add(-1)
	s.mu.Unlock()
	if q.onUsable != nil {
		q.onUsable(service, id, true)
	}
	if q.onChange != nil {
		q.onChange(service, id, false)
	}
}

// zoneMayGo reports whether h may be ejected although the service is at
// its MaxEjectedPercent cap; s.mu is held. The cap guards against a
// failure the client cannot place: its own network, or a bad release
// everywhere, where ejecting more only moves the load. A zone failing on
// its own is placed, and so is a region. So h may go when its zone is
// known, every instance ejected so far is in that zone (or, when h's
// region is known, in that region), an admitted instance elsewhere has
// no failure streak, and the admitted instances left are at least the
// panic threshold's share (50% when panic mode is off). Two failing
// instances of four then go when the other zone's two are healthy; a
// zone of three among four does not, and panic mode is never reached
// this way.
func (q *Quarantine) zoneMayGo(s *quarantined, h *host, total int) bool {
	if h.zone == "" {
		return false
	}
	threshold := q.cfg.PanicThreshold
	if threshold < 0 {
		threshold = 50
	}
	if (total-int(s.ejected.Load())-1)*100 < threshold*total {
		return false
	}
	return placed(s, func(o *host) bool { return o.zone == h.zone }) ||
		h.region != "" && placed(s, func(o *host) bool { return o.region == h.region })
}

// placed reports whether every ejected instance of s is one that in
// accepts, and an admitted instance of known zone outside it has no
// failure streak; s.mu is held.
func placed(s *quarantined, in func(*host) bool) bool {
	confined, healthy := true, false
	s.hosts.Range(func(_, v any) bool {
		o := v.(*host)
		if o.until.Load() != 0 {
			confined = in(o)
			return confined
		}
		if o.zone != "" && !in(o) && o.consecutive.Load() == 0 {
			healthy = true
		}
		return true
	})
	return confined && healthy
}

// isOut reports whether the quarantine holds an instance out now (ejected,
// probing included).
func (q *Quarantine) isOut(service, id string) bool {
	_, h := q.lookup(service, id)
	return h != nil && h.until.Load() != 0
}

// Ejected returns the IDs of a service's instances currently out of
// rotation (ejected and not yet probing).
func (q *Quarantine) Ejected(service string) []string {
	sv, ok := q.services.Load(service)
	if !ok {
		return nil
	}
	now := q.now().UnixNano()
	var out []string
	sv.(*quarantined).hosts.Range(func(k, v any) bool {
		if u := v.(*host).until.Load(); u != 0 && now < u {
			out = append(out, k.(string))
		}
		return true
	})
	return out
}

// forget drops the state of instances that left the service, so that a
// new instance reusing an ID starts clean and memory stays bounded.
// drop forgets everything about service, which nobody calls any more.
func (q *Quarantine) drop(service string) { q.services.Delete(service) }

func (q *Quarantine) forget(service string, keep func(id string) bool) {
	sv, ok := q.services.Load(service)
	if !ok {
		return
	}
	s := sv.(*quarantined)
	s.hosts.Range(func(k, v any) bool {
		if !keep(k.(string)) {
			s.mu.Lock()
			if v.(*host).until.Load() != 0 {
				s.ejected.Add(-1)
			}
			s.hosts.Delete(k)
			s.mu.Unlock()
		}
		return true
	})
}
