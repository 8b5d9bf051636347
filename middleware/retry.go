package middleware

import (
	"cmp"
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
	// The retry budget: retries, and the hedges of a Hedge inside this
	// Retry, stay below BudgetRatio of the calls in the last 10 s, or
	// BudgetMinPerSecond per second if that is more (defaults 0.2 and 3,
	// as Envoy and failsafe-go), so an outage does not multiply load.
	// A negative value is none: both negative, nothing is retried.
	BudgetRatio        float64
	BudgetMinPerSecond float64
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
	c.BudgetRatio = budgetDefault(c.BudgetRatio, 0.2)
	c.BudgetMinPerSecond = budgetDefault(c.BudgetMinPerSecond, 3)
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
//
// A call that is not idempotent (WithIdempotent, Idempotent, a policy's
// retry.idempotent) is retried only where it cannot have reached the
// instance: its pick failed, or its connection was refused (a dial
// error). A service's policy (WithPolicy) replaces cfg's MaxAttempts and
// budget for its calls, and may narrow the errors retried (retry_on).
func Retry(cfg RetryConfig) Middleware {
	base := cfg.withDefaults()
	own := newBudget(base.BudgetRatio, base.BudgetMinPerSecond)
	return func(next Handler) Handler {
		return func(ctx context.Context, req *Request) error {
			attempts, b, on := base.MaxAttempts, own, onRetryable
			if sp := req.pol; sp != nil && sp.retry != nil {
				// What the service's policy sets: attempts, budget, classes.
				rp := sp.retry
				attempts = cmp.Or(rp.attempts, attempts)
				if rp.b != nil {
					b = rp.b
				}
				on = cmp.Or(rp.on, on)
			}
			b.call(req.Start)
			outer := req.budget
			req.budget = b // a Hedge inside takes its tokens from b
			defer func() { req.budget = outer }()
			for attempt := 1; ; attempt++ {
				req.Attempt = attempt
				err := next(ctx, req)
				if err == nil {
					return nil
				}
				class := req.Classify(ctx, err)
				if attempt >= attempts || !on.allows(class, err) ||
					errors.Is(err, selector.ErrNoInstances) || !req.mayRetry(err) {
					return err
				}
				if !b.tryRetry(time.Now()) {
					req.tel.budgetExhausted(ctx, req.Service)
					return errors.Join(err, ErrBudgetExhausted)
				}
				d := rand.N(backoff.Exp(base.BaseBackoff, attempt-1, base.MaxBackoff)) // full jitter; Exp > 0
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
				req.markTried()
				req.Reason = reason(class, err)
				req.tel.retry(ctx, req.Service, req.Reason)
				if base.OnRetry != nil {
					base.OnRetry(req, err)
				}
			}
		}
	}
}

func reason(c Class, err error) string {
	switch {
	case isConnectionError(err):
		return "connection"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return c.String()
}

// orDefault returns v, or def when v is not positive: a config field left
// at zero (or set below it) takes its documented default.
// budgetDefault is def for 0 and 0 for a negative v.
func budgetDefault(v, def float64) float64 {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

func orDefault[T int | float64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}
