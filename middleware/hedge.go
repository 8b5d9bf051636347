package middleware

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// pickObserver is implemented by excluders that want to know which
// instance an attempt picked, as req.Instance (Hedge uses it to keep its
// two branches on different instances).
type pickObserver interface {
	picked(req *Request)
}

// HedgeConfig tunes Hedge.
type HedgeConfig struct {
	// Delay before the second attempt starts, if the first has not
	// finished. Set it near the call's p95 latency (The Tail at Scale).
	Delay time.Duration
}

// Hedge starts a second attempt on another instance when the first has
// not finished after Delay, or at once when it failed with a Retryable
// error before that, and returns the first success, or the last failure.
// Each hedge takes a token from the retry budget of the Retry outside it
// (alone, from a budget of its own with RetryConfig's defaults), so
// hedging stops when it would multiply load. Off unless added to the
// chain. Place it inside Retry and outside Quarantine:
//
//	WithQuarantine(q), WithMiddleware(Retry(rc), Hedge(hc), q.Middleware())
//
// Under Hedge the Call may run twice at once, so it must be safe for
// concurrent use, and calls that must not run twice go through NoHedge.
// When Hedge returns it cancels the context of both attempts, the
// winner's included, and does not wait for the loser: as net.Dialer does
// with the losers of its Happy Eyeballs race, a losing call may still be
// returning, and must release what it got by itself. Nothing the call
// hands out may depend on its context once it has returned; a response
// body needs a lifetime of its own (contrib/rosterhttp gives it one).
//
// A service's policy (WithPolicy: hedge.delay) replaces Delay for its
// calls, so the default chain, which holds a Hedge with no Delay, hedges
// the services whose policy asks for it. A call that is not idempotent
// (Idempotent, WithIdempotent) is never hedged.
func Hedge(cfg HedgeConfig) Middleware {
	own := newBudget(0.2, 3)
	return func(next Handler) Handler {
		return func(ctx context.Context, req *Request) error {
			delay := cfg.Delay
			if req.pol != nil && req.pol.hedge > 0 {
				delay = req.pol.hedge
			}
			if delay <= 0 || req.once || ctx.Value(noHedgeKey{}) != nil {
				return next(ctx, req)
			}
			b := req.budget
			if b == nil {
				b = own
				b.call(req.Start)
			}
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			set := &hedgeSet{}
			results := make(chan hedgeResult, 2)
			launch := func(r *Request) {
				r.pushExcluder(set)
				go func() { results <- hedgeResult{next(ctx, r), r} }()
			}
			primary := req.clone()
			launch(primary)
			timer := time.NewTimer(delay)
			defer timer.Stop()
			running := 1
			var last hedgeResult
			for running > 0 {
				select {
				case <-timer.C:
					if b.tryRetry(time.Now()) {
						h := req.clone()
						h.Reason = "hedge"
						req.tel.retry(ctx, req.Service, "hedge")
						launch(h)
						running++
					}
				case res := <-results:
					running--
					last = res
					if res.err == nil {
						req.adopt(res.r)
						return nil // the deferred cancel stops the other attempt
					}
					// The first failed before the delay, in a way another
					// instance may not: hedge at once. Other failures are
					// final, as they are to Retry.
					if running == 0 && hedgeable(ctx, res) && timer.Stop() && b.tryRetry(time.Now()) {
						h := req.clone()
						h.Reason = "hedge"
						h.tried = append(h.tried, res.r.Instance.ID)
						req.tel.retry(ctx, req.Service, "hedge")
						launch(h)
						running++
					}
				}
			}
			req.adopt(last.r)
			return last.err
		}
	}
}

type hedgeResult struct {
	err error
	r   *Request
}

// hedgeable reports whether a failure is one another instance may not
// have, as Retry decides.
func hedgeable(ctx context.Context, res hedgeResult) bool {
	return res.r.Classify(ctx, res.err) == Retryable && !errors.Is(res.err, selector.ErrNoInstances)
}

type noHedgeKey struct{}

// NoHedge returns a context under which Hedge runs a call's attempts one at
// a time: for calls that must not be in flight twice, such as a request
// that is not idempotent.
func NoHedge(ctx context.Context) context.Context {
	return context.WithValue(ctx, noHedgeKey{}, true)
}

// hedgeSet keeps the branches of one hedged attempt on distinct instances.
type hedgeSet struct {
	mu  sync.Mutex
	ids []string
}

func (s *hedgeSet) excluded(_ *Request, in *registry.Instance) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range s.ids {
		if id == in.ID {
			return true
		}
	}
	return false
}

func (s *hedgeSet) picked(req *Request) {
	s.mu.Lock()
	s.ids = append(s.ids, req.Instance.ID)
	s.mu.Unlock()
}
