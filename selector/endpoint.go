package selector

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// endpoint is the state of one instance that outlives pickers: it is kept
// for as long as the instance (by ID) stays in the snapshots. It fills one
// cache line so that counters of different instances do not share one.
type endpoint struct {
	inflight gauge         // requests in flight, for at most the in-flight bound
	cost     atomic.Uint64 // peak-EWMA latency in ns, as float64 bits
	stamp    atomic.Int64  // monotonic ns of the last cost update
	warmFrom atomic.Int64  // monotonic ns its slow start began; 0 = not warming
	_        [24]byte
}

// shared is the state of a Selector that Done and picks need.
type shared struct {
	perTau  float64      // 1 ÷ the peak-EWMA time constant in ns (a product is cheaper than a quotient)
	keep    float64      // 1 − observeGrain/τ ≤ the decay within observeGrain (see settled)
	bounded bool         // count the in-flight total for bounded loads
	ewma    bool         // Done updates the latency estimate
	clock   *coarseClock // &coarse, or a test's clock
	shift   uint8        // an in-flight epoch is 2^shift ns (see gauge)
	total   gauge        // requests in flight over all instances
	// warmEnd is when the last slow start in progress ends (monotonic
	// ns), 0 when none is: a pick checks ramps only while it is set.
	warmEnd atomic.Int64
	slow    slowStart
}

var epoch = time.Now()

// observeGrain: see observe.
const observeGrain = int64(time.Millisecond)

// monotonic returns monotonic nanoseconds since the process started.
func monotonic() int64 { return int64(time.Since(epoch)) }

// observe folds one latency sample into ep's peak EWMA (Finagle's
// PeakEwma). The estimate decays toward 0 while no sample arrives (Finagle
// and tower decay it on every load() call; here picks only read it, so the
// decay since the last sample is applied now): a sample above the decayed
// estimate replaces it at once, a lower one is averaged in with weight
// 1 − e^(−Δt/τ). The time comes from the coarse clock: the decay needs it
// only to a small fraction of τ.
//
// A sample below the estimate within observeGrain of the estimate's last
// update is dropped, so that an instance answering thousands of calls a
// second writes its estimate (a cache line every core's Done would
// bounce) once per grain rather than per call. The weight of a sample is
// 1 − e^(−Δt/τ) ≈ Δt/τ, proportional to the time since the last update,
// so one sample per millisecond moves the estimate down as fast as all of
// them would; peaks and failures are always taken at once.
func (sh *shared) observe(ep *endpoint, latency time.Duration, failed bool, now int64) {
	rtt := float64(max(latency, 0))
	for {
		old := ep.cost.Load()
		cost := math.Float64frombits(old)
		if failed {
			rtt = max(rtt, 2*cost)
		}
		stamp := ep.stamp.Load()
		w := decay(float64(max(now-stamp, 0)) * sh.perTau)
		cost *= w // the estimate now: decayed since its last sample
		next := rtt
		if rtt <= cost {
			if now-stamp < observeGrain {
				return
			}
			// old·w + rtt·(1 − w), and cost is already old·w: weighting
			// it by w again made the old estimate count w² and recovery
			// from a peak about twice as fast as τ says.
			next = cost + rtt*(1-w)
		}
		if ep.cost.CompareAndSwap(old, math.Float64bits(next)) {
			ep.stamp.Store(now)
			return
		}
	}
}

// settled reports whether observe would drop a successful call's
// latency: the estimate was updated within observeGrain and the latency
// is below it. keep (1 − observeGrain/τ) is a lower bound of the decay
// over less than observeGrain, so settled implies observe's own test
// without computing the decay.
func (ep *endpoint) settled(latency time.Duration, now int64, keep float64) bool {
	return now-ep.stamp.Load() < observeGrain && float64(latency) <= math.Float64frombits(ep.cost.Load())*keep
}

// penalty is the load of an instance with no latency sample yet but with
// requests outstanding: it is tried once, then avoided until its first
// answer (Finagle).
const penalty = float64(math.MaxInt64 >> 16)

// load returns ep's peak-EWMA cost × (in-flight × inv + 1), decayed to
// now as if a zero-latency sample had just been observed, so that an
// instance that was slow and then left idle recovers. inv is the mean
// weight ÷ the instance's weight: an instance of twice the weight carries
// twice the requests in flight at the same load.
//
// It does not branch on the instance's state (an estimate or none, a
// stamp from this tick or an older one): P2C's candidates are random, so
// such a branch would be mispredicted about as often as not.
func (sh *shared) load(ep *endpoint, now int64, inv float64) float64 {
	bits := ep.cost.Load()
	inflight := ep.inflight.load(sh.epoch(now))
	pending := float64(inflight)
	age := float64(max(now-ep.stamp.Load(), 0))
	l := math.Float64bits(math.Float64frombits(bits) * roughDecay(age*sh.perTau) * (pending*inv + 1))
	// No estimate yet: 0 when idle, else the penalty plus the requests
	// in flight.
	none := math.Float64bits((penalty + pending) * float64(min(max(inflight, 0), 1)))
	if bits == 0 {
		l = none
	}
	return math.Float64frombits(l)
}

// decay returns e^(−x) for x ≥ 0. Between frequent calls x is tiny and a
// Taylor polynomial (error < x⁴/24 < 3·10⁻⁹) replaces math.Exp.
func decay(x float64) float64 {
	if x < 1.0/64 {
		return 1 + x*(x*(0.5-x*(1.0/6))-1)
	}
	return expNeg(x)
}

// roughDecay is decay to within 1.3·10⁻⁴ (1 − x for x < 1/64), for
// comparing loads: the polynomial's three more products lie on the
// critical path of a pick, and a load is only ever compared with another.
func roughDecay(x float64) float64 {
	if x < 1.0/64 {
		return 1 - x
	}
	return expNeg(x)
}

// expNeg is e^(−x), out of line so that decay is inlined.
//
//go:noinline
func expNeg(x float64) float64 { return math.Exp(-x) }

func mul64(a, b uint64) (hi, lo uint64) { return bits.Mul64(a, b) }
