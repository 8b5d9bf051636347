package middleware

import (
	"context"
	"time"

	"github.com/roster-go/roster/internal/mwhook"
	"github.com/roster-go/roster/selector"
)

// SkipClock moves the clock that staleness is measured on forward by d,
// for the rest of the test binary's life.
func SkipClock(d time.Duration) { clockSkip.Add(int64(d)) }

// ClientState is the JSON form of the debug page.
type ClientState = clientState

// WithFirstSnapshotTimeout bounds the first call's wait for a snapshot.
func WithFirstSnapshotTimeout(d time.Duration) Option { return withFirstSnapshotTimeout(d) }

// Admit, Report and Forget expose the quarantine's pick-path calls.
func (q *Quarantine) Admit(service, id string, total int) bool { return q.admit(service, id, total) }

func (q *Quarantine) Report(service, id string, c Class, total int) { q.report(service, id, c, total) }

func (q *Quarantine) Forget(service string, keep func(id string) bool) { q.forget(service, keep) }

// NewThrottle returns a throttle's middleware and its reject probability.
func NewThrottle(cfg ThrottleConfig) (Middleware, func(service string, now time.Time) float64) {
	t := newThrottle(cfg)
	return t.middleware(), t.rejectProbability
}

// IsConnectionError is isConnectionError.
func IsConnectionError(err error) bool { return isConnectionError(err) }

// Pick is the bare pick roster agent serves.
func (c *Client) Pick(ctx context.Context, service string, o selector.PickOptions) (mwhook.Pending, error) {
	return c.pick(ctx, service, o)
}

// Report reports a Pick's outcome.
func Report(ctx context.Context, p mwhook.Pending, class Class, latency time.Duration) {
	report(ctx, p, class, latency)
}

// WithServiceIdle replaces the 10 minutes a service may go uncalled
// before the client stops following it; 0 or less: sweeps only by Sweep.
func WithServiceIdle(d time.Duration) Option { return withServiceIdle(d) }

// Sweep runs one idle sweep, as the client does every idle/2.
func (c *Client) Sweep() { c.sweep() }

// Followed is how many services the client follows.
func (c *Client) Followed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.services)
}
