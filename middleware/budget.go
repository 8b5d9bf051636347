package middleware

import (
	"sync/atomic"
	"time"
)

// budget bounds retries (and hedges) to a share of recent calls, so that
// an outage does not multiply the load on a struggling service. It counts
// calls and retries in a sliding window of one-second buckets and allows a
// retry while retries < max(ratio × calls, minPer × window).
// It is lock-free. The zero value is not usable, use newBudget.
type budget struct {
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

// newBudget returns a budget allowing retries up to ratio of calls in the
// last 10 seconds, and at least minPerSecond retries per second whatever
// the call rate (so a quiet client can still retry). Envoy and failsafe-go
// default to 20% and 3.
func newBudget(ratio float64, minPerSecond float64) *budget {
	return &budget{ratio: ratio, minPer: minPerSecond, window: budgetBuckets}
}

func (b *budget) slot(now int64) *budgetBucket {
	sec := now / int64(time.Second)
	s := &b.bucket[sec%budgetBuckets]
	if old := s.sec.Load(); old != sec && s.sec.CompareAndSwap(old, sec) {
		s.calls.Store(0)
		s.retries.Store(0)
	}
	return s
}

// call records one call (first attempts only) made at now.
func (b *budget) call(now time.Time) { b.slot(now.UnixNano()).calls.Add(1) }

// tryRetry reserves one retry at now if the budget allows it.
func (b *budget) tryRetry(now time.Time) bool {
	return b.reserve(now.UnixNano())
}

func (b *budget) reserve(now int64) bool {
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
