package middleware

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// ErrThrottled is the error of a call that adaptive throttling rejected
// locally, without sending it: the service has been refusing most calls.
var ErrThrottled = errors.New("middleware: call rejected locally by adaptive throttling")

// ThrottleConfig tunes adaptive client-side throttling. Zero fields take
// the defaults.
type ThrottleConfig struct {
	// K is how many requests the client sends per request the service
	// accepts before it starts rejecting locally (default 2: throttling
	// starts once more than half the calls fail). Lower is more
	// aggressive; the Google SRE book suggests 2.
	K float64
	// Window over which requests and accepts are counted (default 10s,
	// go-zero's; the book uses 2 minutes). Recovery takes a few windows:
	// rejected calls count as requests, so the rejection probability
	// falls only as accepted calls fill the window.
	Window time.Duration
	// MaxRejectProbability caps the rejection probability (default 0.9,
	// Envoy's admission control uses 0.8), so that a tenth of the calls
	// still reach a service that is down and notice when it is back:
	// rejections then stop within about 2 windows, where the uncapped
	// formula takes longer the more calls are made.
	MaxRejectProbability float64
	// MinRequests: with fewer calls in the window nothing is rejected, so
	// a quiet client is never throttled by a few failures (default 20).
	MinRequests int
}

func (c ThrottleConfig) withDefaults() ThrottleConfig {
	c.K = orDefault(c.K, 2)
	c.Window = orDefault(c.Window, 10*time.Second)
	if c.MaxRejectProbability <= 0 || c.MaxRejectProbability > 1 {
		c.MaxRejectProbability = 0.9
	}
	c.MinRequests = orDefault(c.MinRequests, 20)
	return c
}

// Throttle returns adaptive client-side throttling (Google SRE book,
// chapter 21, "Handling Overload"), per service: over the window it counts the
// calls the client made (requests, including those it rejected) and those
// the service accepted (Success or Business), and rejects a new call with
// probability max(0, (requests − K·accepts) / (requests + 1)), at most
// MaxRejectProbability — in fact it rejects exactly that share, carrying
// the fraction from call to call rather than tossing a coin. A healthy
// service is never throttled. One that refuses most calls gets a trickle,
// enough to notice when it is back. Rejected calls fail with an error
// matching ErrThrottled. Safe for concurrent use, and lock-free.
//
// Place it outside Retry, so that it counts calls, not attempts: a call
// that a retry saves is accepted. A call that fails on an instance the
// quarantine (inside) has ejected is not counted: the quarantine already
// took that instance out, and its failures, a failing zone's say, must
// not throttle the calls that now go to healthy instances. The default chain has one with
// ThrottleConfig{}.
func Throttle(cfg ThrottleConfig) Middleware { return newThrottle(cfg).middleware() }

type throttle struct {
	cfg      ThrottleConfig
	services sync.Map // service → *throttled
}

func newThrottle(cfg ThrottleConfig) *throttle { return &throttle{cfg: cfg.withDefaults()} }

type throttled struct {
	w        window
	lastFail atomic.Int64  // when a call last failed (unix ns): a fast path for healthy services
	owed     atomic.Uint64 // float64 bits: the fraction of a rejection carried to the next call
	err      error         // the rejection, built once
}

func (t *throttle) service(name string) *throttled {
	if s, ok := t.services.Load(name); ok {
		return s.(*throttled)
	}
	s := &throttled{err: rejectionError(name, ErrThrottled)}
	s.w.init(t.cfg.Window)
	v, _ := t.services.LoadOrStore(name, s)
	return v.(*throttled)
}

// rejectProbability returns the probability with which the next call to
// service made at now would be rejected.
func (t *throttle) rejectProbability(service string, now time.Time) float64 {
	return t.service(service).probability(now.UnixNano(), t.cfg)
}

func (s *throttled) probability(now int64, cfg ThrottleConfig) float64 {
	if now-s.lastFail.Load() >= int64(cfg.Window) {
		return 0 // no failure in the window: nothing to sum
	}
	requests, failures := s.w.sum(now)
	if requests < int64(cfg.MinRequests) {
		return 0
	}
	accepts := float64(requests - failures)
	p := (float64(requests) - cfg.K*accepts) / float64(requests+1)
	return min(max(0, p), cfg.MaxRejectProbability)
}

func (t *throttle) middleware() Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, req *Request) error {
			s := t.service(req.Service)
			now := req.Start.UnixNano()
			if p := s.probability(now, t.cfg); p > 0 && s.reject(p) {
				s.failed(now) // a local rejection is a request not accepted
				req.tel.rejected(ctx, req.Service, rejectThrottled)
				return s.err
			}
			err := next(ctx, req)
			if req.contained {
				return err // the quarantine took the failing instance out
			}
			if counted, failed := outcome(ctx, req, err); failed && counted {
				s.failed(now)
			} else if counted {
				s.w.add(now, false)
			}
			return err
		}
	}
}

// failed counts a request not accepted at now.
func (s *throttled) failed(now int64) {
	s.w.add(now, true)
	for { // keep the latest: a call that started long ago may end last
		last := s.lastFail.Load()
		if last >= now || s.lastFail.CompareAndSwap(last, now) {
			return
		}
	}
}

// reject reports whether to reject a call when a share p must be: it
// carries the fraction from call to call (error diffusion) rather than
// toss a coin, for the book's rate without its variance. Only throttled
// services get here, so the CAS loop is off the healthy path.
func (s *throttled) reject(p float64) bool {
	for {
		old := s.owed.Load()
		owed := math.Float64frombits(old) + p
		rejected := owed >= 1
		if rejected {
			owed--
		}
		if s.owed.CompareAndSwap(old, math.Float64bits(owed)) {
			return rejected
		}
	}
}

// outcome tells throttling whether a call counts and
// whether it failed: Success and Business are accepted, Retryable and
// Fatal failed. An Abort counts as a failure only when the caller's
// deadline passed (a service that hangs), not when the caller cancelled;
// a call rejected locally (by a throttle) does not count.
func outcome(ctx context.Context, req *Request, err error) (counted, failed bool) {
	if err == nil {
		return true, false
	}
	if isRejection(err) {
		return false, false
	}
	switch req.Classify(ctx, err) {
	case Success, Business:
		return true, false
	case Retryable, Fatal:
		return true, true
	}
	return errors.Is(ctx.Err(), context.DeadlineExceeded), true
}

// rejection is a call refused locally. It is classified Abort, so that
// Retry does not retry it and nothing counts it against an instance.
type rejection struct {
	service string
	reason  error
}

func (r *rejection) Error() string { return r.service + ": " + r.reason.Error() }
func (r *rejection) Unwrap() error { return r.reason }

func rejectionError(service string, reason error) error {
	return &classified{&rejection{service, reason}, Abort}
}

func isRejection(err error) bool {
	c, ok := err.(*classified)
	if !ok {
		return false
	}
	_, ok = c.error.(*rejection)
	return ok
}

// Rejection reasons, the values of the roster.rejection.reason attribute.
const rejectThrottled = "throttled"

// window counts requests and failures over a sliding window of
// windowBuckets buckets, lock-free. A bucket is reused when its epoch
// passes: counts racing with the reset may be lost, which only blurs the
// estimate by a call or two.
type window struct {
	width  int64 // bucket width in ns
	bucket [windowBuckets]windowBucket
}

const windowBuckets = 10

type windowBucket struct {
	epoch    atomic.Int64 // now / width when the bucket was last reset
	requests atomic.Int64
	failures atomic.Int64
	_        [40]byte // keep buckets on their own cache lines
}

func (w *window) init(d time.Duration) { w.width = max(int64(d)/windowBuckets, 1) }

func (w *window) add(now int64, failed bool) {
	epoch := now / w.width
	b := &w.bucket[epoch%windowBuckets]
	old := b.epoch.Load()
	if old > epoch {
		return // a call that started more than a window ago: too late to count
	}
	if old != epoch && b.epoch.CompareAndSwap(old, epoch) {
		b.requests.Store(0)
		b.failures.Store(0)
	}
	b.requests.Add(1)
	if failed {
		b.failures.Add(1)
	}
}

func (w *window) sum(now int64) (requests, failures int64) {
	epoch := now / w.width
	for i := range w.bucket {
		b := &w.bucket[i]
		if e := b.epoch.Load(); epoch-e < windowBuckets && e <= epoch {
			requests += b.requests.Load()
			failures += b.failures.Load()
		}
	}
	return requests, failures
}

func (w *window) reset() {
	for i := range w.bucket {
		w.bucket[i].epoch.Store(-1)
		w.bucket[i].requests.Store(0)
		w.bucket[i].failures.Store(0)
	}
}
