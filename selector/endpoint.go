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
	_        [40]byte
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

// monotonic returns monotonic nanoseconds since the process started.
func monotonic() int64 { return int64(time.Since(epoch)) }

// observe folds one latency sample into ep's peak EWMA (Finagle's
// PeakEwma). The estimate decays toward 0 while no sample arrives (Finagle
// and tower decay it on every load() call; here picks only read it, so the
// decay since the last sample is applied now): a sample above the decayed
// estimate replaces it at once, a lower one is averaged in with weight
// 1 − e^(−Δt/τ).
func (sh *shared) observe(ep *endpoint, latency time.Duration, failed bool) {
	now := sh.now()
	sh.clock.Store(now)
	rtt := float64(max(latency, 0))
	for {
		old := ep.cost.Load()
		cost := math.Float64frombits(old)
		if failed {
			rtt = max(rtt, 2*cost)
		}
		dt := float64(now - ep.stamp.Load())
		w := math.Exp(-max(dt, 0) / sh.tau)
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
	if dt := float64(now - ep.stamp.Load()); dt > 0 {
		cost *= math.Exp(-dt / sh.tau)
	}
	return cost * (pending + 1)
}

func mul64(a, b uint64) (hi, lo uint64) { return bits.Mul64(a, b) }
