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
	inflight atomic.Int64
	cost     atomic.Uint64 // peak-EWMA latency in ns, as float64 bits
	stamp    atomic.Int64  // monotonic ns of the last cost update
	dones    atomic.Uint32 // counts Done calls, to refresh the clock now and then
	_        [36]byte
}

// shared is the state of a Selector that Done needs.
type shared struct {
	tau     float64 // peak-EWMA time constant, ns
	bounded bool    // count the in-flight total for bounded loads
	ewma    bool    // Done updates the latency estimate
	now     func() int64
	// clock is the time of the last Done, read by picks instead of the
	// clock itself (time.Now costs more than a whole pick on some VMs).
	clock atomic.Int64
	total atomic.Int64 // requests in flight over all instances
}

var epoch = time.Now()

// clockGrain is how stale the shared clock may get before Done updates it.
const clockGrain = int64(time.Millisecond)

// monotonic returns monotonic nanoseconds since the process started.
func monotonic() int64 { return int64(time.Since(epoch)) }

// observe folds one latency sample into ep's peak EWMA (Finagle's
// PeakEwma). The estimate decays toward 0 while no sample arrives (Finagle
// and tower decay it on every load() call; here picks only read it, so the
// decay since the last sample is applied now): a sample above the decayed
// estimate replaces it at once, a lower one is averaged in with weight
// 1 − e^(−Δt/τ).
//
// The decay needs the time only to a fraction of τ, and reading the clock
// costs as much as a whole pick on some VMs (≈100 ns here). So Done reads
// it for calls of 1 ms or more (where it is < 0.01 % of the call) and for
// every 16th call of an instance; otherwise it estimates the time as the
// pick's clock + the call's latency, which is exact to within the gap
// between two completions — small exactly when calls are short and many.
func (sh *shared) observe(ep *endpoint, picked int64, latency time.Duration, failed bool) {
	clock := sh.clock.Load()
	now := max(clock, picked+int64(latency))
	if latency >= time.Millisecond || ep.dones.Add(1)&15 == 0 {
		now = sh.now()
	}
	if now > clock+clockGrain {
		// Writing the shared clock on every Done would bounce its cache
		// line between cores; a millisecond is plenty against τ.
		sh.clock.CompareAndSwap(clock, now) // losing a race is fine: the winner is as recent
	}
	rtt := float64(max(latency, 0))
	for {
		old := ep.cost.Load()
		cost := math.Float64frombits(old)
		if failed {
			rtt = max(rtt, 2*cost)
		}
		w := decay(float64(now-ep.stamp.Load()) / sh.tau)
		cost *= w
		next := rtt
		if rtt <= cost {
			next = cost*w + rtt*(1-w)
		}
		if ep.cost.CompareAndSwap(old, math.Float64bits(next)) {
			ep.stamp.Store(now)
			return
		}
	}
}

// penalty is the load of an instance with no latency sample yet but with
// requests outstanding: it is tried once, then avoided until its first
// answer (Finagle).
const penalty = float64(math.MaxInt64 >> 16)

// load returns ep's peak-EWMA cost × (in-flight + 1), decayed to now as
// if a zero-latency sample had just been observed, so that an instance
// that was slow and then left idle recovers.
func (sh *shared) load(ep *endpoint, now int64) float64 {
	cost := math.Float64frombits(ep.cost.Load())
	pending := float64(ep.inflight.Load())
	if cost == 0 {
		if pending > 0 {
			return penalty + pending
		}
		return 0
	}
	return cost * decay(float64(now-ep.stamp.Load())/sh.tau) * (pending + 1)
}

// decay returns e^(−x) for x ≥ 0 (1 for x ≤ 0). Between frequent calls x is
// tiny and a Taylor polynomial (error < x⁴/24 < 3·10⁻⁹) replaces math.Exp.
func decay(x float64) float64 {
	switch {
	case x <= 0:
		return 1
	case x < 1.0/64:
		return 1 - x*(1-x*(0.5-x/6))
	}
	return math.Exp(-x)
}

func mul64(a, b uint64) (hi, lo uint64) { return bits.Mul64(a, b) }
