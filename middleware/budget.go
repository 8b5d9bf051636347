package middleware

import (
	"sync/atomic"
	"time"
)

// Budget bounds retries (and hedges) to a share of recent calls, so that
// an outage does not multiply the load on a struggling service. It counts
// calls and retries in a sliding window of one-second buckets and allows a
// retry while retries < max(Ratio × calls, MinPerSecond × window).
// It is lock-free; the zero value is not usable, use NewBudget.
type Budget struct {
	ratio  float64
	minPer float64
	window int64
	bucket [budgetBuckets]budgetBucket
}

const budgetBuckets = 10 // one-second buckets: a 10 s window

type budgetBucket struct {
	sec     atomic.Int64
	calls   atomic.Int64
	retries atomic.Int64
	_       [40]byte // keep buckets on their own cache lines
}

// NewBudget returns a budget allowing retries up to ratio of calls in the
// last 10 seconds, and at least minPerSecond retries per second whatever
// the call rate (so a quiet client can still retry). Envoy and failsafe-go
// default to 20% and 3.
func NewBudget(ratio float64, minPerSecond float64) *Budget {
	return &Budget{ratio: ratio, minPer: minPerSecond, window: budgetBuckets}
}

func (b *Budget) slot(now int64) *budgetBucket {
	sec := now / int64(time.Second)
	s := &b.bucket[sec%budgetBuckets]
	if old := s.sec.Load(); old != sec && s.sec.CompareAndSwap(old, sec) {
		s.calls.Store(0)
		s.retries.Store(0)
	}
	return s
}

// Call records one call (first attempts only) made at now.
func (b *Budget) Call(now time.Time) { b.slot(now.UnixNano()).calls.Add(1) }

// TryRetry reserves one retry at now if the budget allows it.
func (b *Budget) TryRetry(now time.Time) bool {
	return b.tryRetry(now.UnixNano())
}

func (b *Budget) tryRetry(now int64) bool {
	cur := b.slot(now)
	sec := now / int64(time.Second)
	var calls, retries int64
	for i := range b.bucket {
		s := &b.bucket[i]
		if sec-s.sec.Load() < b.window {
			calls += s.calls.Load()
			retries += s.retries.Load()
		}
	}
	allowed := max(b.ratio*float64(calls), b.minPer*float64(b.window))
	if float64(retries)+1 > allowed {
		return false
	}
	cur.retries.Add(1)
	return true
}
