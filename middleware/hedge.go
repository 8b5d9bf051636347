package middleware

import (
	"context"
	"sync"
	"time"

	"github.com/roster-go/roster/registry"
)

// PickObserver is implemented by Excluders that want to know which
// instance an attempt picked, as req.Instance (Hedge uses it to keep its
// two branches on different instances).
type PickObserver interface {
	Picked(req *Request)
}

// HedgeConfig tunes Hedge.
type HedgeConfig struct {
	// Delay before the second attempt starts, if the first has not
	// finished. Set it near the call's p95 latency (The Tail at Scale).
	Delay time.Duration
	// Budget bounds hedges together with retries: share the Retry's
	// Budget (default: a budget of its own, 20% of calls, min 3/s).
	Budget *Budget
}

// Hedge starts a second attempt on another instance when the first has
// not finished after Delay, and returns the first success (cancelling the
// other attempt), or the last failure. Each hedge takes a token from the
// budget, so hedging stops when it would multiply load. Off unless added
// to the chain; place it inside Retry and outside Quarantine:
//
//	WithMiddleware(Retry(rc), Hedge(hc), c.Quarantine().Middleware())
func Hedge(cfg HedgeConfig) Middleware {
	if cfg.Budget == nil {
		cfg.Budget = NewBudget(0.2, 3)
	}
	return func(next Handler) Handler {
		return func(ctx context.Context, req *Request) error {
			if cfg.Delay <= 0 {
				return next(ctx, req)
			}
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			set := &hedgeSet{}
			type result struct {
				err error
				r   *Request
			}
			results := make(chan result, 2)
			launch := func(r *Request) {
				r.PushExcluder(set)
				go func() { results <- result{next(ctx, r), r} }()
			}
			primary := req.clone()
			launch(primary)
			timer := time.NewTimer(cfg.Delay)
			defer timer.Stop()
			running := 1
			var last result
			for running > 0 {
				select {
				case <-timer.C:
					if cfg.Budget.TryRetry(time.Now()) {
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
					// The first failed before the delay: hedge at once.
					if running == 0 && timer.Stop() && cfg.Budget.TryRetry(time.Now()) {
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

// hedgeSet keeps the branches of one hedged attempt on distinct instances.
type hedgeSet struct {
	mu  sync.Mutex
	ids []string
}

func (s *hedgeSet) Excluded(_ *Request, in *registry.Instance) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range s.ids {
		if id == in.ID {
			return true
		}
	}
	return false
}

func (s *hedgeSet) Picked(req *Request) {
	s.mu.Lock()
	s.ids = append(s.ids, req.Instance.ID)
	s.mu.Unlock()
}
