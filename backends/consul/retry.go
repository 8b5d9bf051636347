package consul

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/roster-go/roster/internal/backoff"
	"github.com/roster-go/roster/registry/driver"
)

// retryPolicy spaces the attempts of a write. It is short because what it
// retries is an agent busy for an instant (429 past its connection limit,
// a 5xx) or restarting, while a lease waits on the outcome.
var retryPolicy = backoff.Policy{Base: 50 * time.Millisecond, Max: time.Second}

// writeKind says how a write is retried and queued.
type writeKind int

const (
	plainWrite writeKind = iota // register, update: retried within the driver's timeout
	renewal                     // heartbeat: the same, past the bulk gate (see renew)
	removal                     // deregister: retried until the caller's context ends
)

// write runs req, an idempotent write, until it succeeds, fails for good
// or its time is up. Its time is the caller's context, and for all but a
// removal also the driver's timeout from the start of the first attempt.
func (d *Driver) write(ctx context.Context, op string, kind writeKind, req func(context.Context) error) error {
	run, persist := d.call, kind == removal
	if kind == renewal {
		run = d.renew
	}
	var giveUp time.Time
	var last error // the last failure the agent itself reported
	for attempt := 0; ; attempt++ {
		start, err := run(ctx, req)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil && last != nil {
			// The caller's time ran out during a retry: what the agent said
			// before (a 429, a 5xx) explains more than the deadline alone.
			return errors.Join(d.wrap(context.WithoutCancel(ctx), op, last), ctx.Err())
		}
		if !retryable(err) || ctx.Err() != nil {
			return d.wrap(ctx, op, err)
		}
		last = err
		if attempt == 0 && !persist {
			giveUp = start.Add(d.o.Timeout)
		}
		delay := retryPolicy.Delay(attempt)
		next := time.Now().Add(delay)
		if dl, ok := ctx.Deadline(); (ok && next.After(dl)) || (!persist && next.After(giveUp)) {
			return d.wrap(ctx, op, err) // the last error says more than a deadline would
		}
		if perr := d.pause(ctx, delay); perr != nil {
			return errors.Join(d.wrap(context.WithoutCancel(ctx), op, err), perr)
		}
	}
}

// pause waits delay, unless ctx ends or the driver closes first.
func (d *Driver) pause(ctx context.Context, delay time.Duration) error {
	return sleep(ctx, delay, d.life.Done())
}

// sleep waits delay, unless ctx ends (ctx.Err()) or closed, if not nil,
// is closed first (driver.ErrClosed).
func sleep(ctx context.Context, delay time.Duration, closed <-chan struct{}) error {
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-closed:
		return driver.ErrClosed
	}
}

// retryable tells the failures worth another attempt: the agent answered
// 429 (too many connections from this address) or 5xx — except the 500
// that means a lost check — or could not be reached: refused, reset,
// timed out, or the 429 that Consul writes before reading the request,
// which the HTTP client sees as a broken connection. A certificate the
// client rejects will not change by retrying.
func retryable(err error) bool {
	if errors.Is(err, driver.ErrClosed) {
		return false
	}
	var se api.StatusError
	if errors.As(err, &se) {
		return (se.Code == http.StatusTooManyRequests || se.Code >= 500) && !lostCheck(se)
	}
	var cve *tls.CertificateVerificationError
	var rhe tls.RecordHeaderError
	if errors.As(err, &cve) || errors.As(err, &rhe) {
		return false
	}
	var ue *url.Error
	return errors.As(err, &ue)
}
