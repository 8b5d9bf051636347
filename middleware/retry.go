package middleware

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/roster-go/roster/internal/backoff"
	"github.com/roster-go/roster/selector"
)

// RetryConfig tunes Retry. Zero fields take the defaults.
type RetryConfig struct {
	// MaxAttempts, first attempt included (default 3; gRPC caps at 5).
	MaxAttempts int
	// Backoff before retry n is uniform in [0, min(MaxBackoff,
	// BaseBackoff·2^(n-1))) — "full jitter" (defaults 25ms and 250ms, as
	// Envoy's router).
	BaseBackoff time.Duration
	MaxBackoff  time.Duration
	// Budget bounds retries to a share of calls (default 20% with at least
	// 3 per second). Share one Budget between clients of one dependency
	// to bound them together.
	Budget *Budget
	// OnRetry, if set, is called before each retry with the error that
	// caused it.
	OnRetry func(req *Request, err error)
}

func (c RetryConfig) withDefaults() RetryConfig {
	c.MaxAttempts = orDefault(c.MaxAttempts, 3)
	c.BaseBackoff = orDefault(c.BaseBackoff, 25*time.Millisecond)
	if c.MaxBackoff < c.BaseBackoff {
		c.MaxBackoff = max(250*time.Millisecond, c.BaseBackoff)
	}
	if c.Budget == nil {
		c.Budget = NewBudget(0.2, 3)
	}
	return c
}

// ErrBudgetExhausted is joined to the last error when the retry budget
// refused a retry.
var ErrBudgetExhausted = errors.New("middleware: retry budget exhausted")

// Retry runs failed attempts again, each on an instance this call has not
// tried yet (a tried one only when no other is left), within the caller's
// deadline, with full-jitter exponential backoff and a retry budget. Only
// errors the classifier calls Retryable are retried; the caller's
// cancellation never is.
func Retry(cfg RetryConfig) Middleware {
	cfg = cfg.withDefaults()
	return func(next Handler) Handler {
		return func(ctx context.Context, req *Request) error {
			cfg.Budget.Call(req.Start)
			for attempt := 1; ; attempt++ {
				req.Attempt = attempt
				err := next(ctx, req)
				if err == nil {
					return nil
				}
				class := req.Classify(ctx, err)
				if attempt >= cfg.MaxAttempts || class != Retryable ||
					errors.Is(err, selector.ErrNoInstances) {
					return err
				}
				if !cfg.Budget.TryRetry(time.Now()) {
					req.tel.budgetExhausted(ctx, req.Service)
					return errors.Join(err, ErrBudgetExhausted)
				}
				d := rand.N(backoff.Exp(cfg.BaseBackoff, attempt-1, cfg.MaxBackoff)) // full jitter; Exp > 0
				if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
					return err // no time left for another attempt
				}
				if d > 0 {
					t := time.NewTimer(d)
					select {
					case <-ctx.Done():
						t.Stop()
						return errors.Join(err, ctx.Err()) // cut short by the caller
					case <-t.C:
					}
				}
				req.MarkTried()
				req.Reason = reason(class, err)
				req.tel.retry(ctx, req.Service, req.Reason)
				if cfg.OnRetry != nil {
					cfg.OnRetry(req, err)
				}
			}
		}
	}
}

func reason(c Class, err error) string {
	switch {
	case IsConnectionError(err):
		return "connection"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return c.String()
}

// orDefault returns v, or def when v is not positive: a config field left
// at zero (or set below it) takes its documented default.
func orDefault[T int | float64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}
