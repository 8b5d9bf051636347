package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// PickOptions qualify a Client.Pick.
type PickOptions struct {
	// Key is the affinity key for consistent-hash strategies.
	Key string
	// Exclude, if set, is a hard routing filter (a version, a zone): Pick
	// never returns an instance it rejects, and fails with
	// selector.ErrAllExcluded when it rejects them all.
	Exclude func(*registry.Instance) bool
}

// Pending is one attempt that Client.Pick picked and whose call runs
// outside the Client: in another process that reports back, as the
// clients of roster agent do. Call Report exactly once.
type Pending struct {
	Instance registry.Instance
	Stale    bool // picked from a stale snapshot
	Total    int  // instances the service had at pick time

	c       *Client
	service string
	done    selector.Done
}

// Pick picks an instance of service for one call that the caller runs
// itself, with the same state as Do: the stale-aware cache, the selector
// and the client's quarantine (ejected instances are avoided, with the
// fallback order of selector.PickOptions). It does not run the
// middleware chain, since there is no call to wrap: retries are the
// caller's. Pick records the pick metric; Pending.Report records the rest.
func (c *Client) Pick(ctx context.Context, service string, o PickOptions) (Pending, error) {
	s, err := c.service(ctx, service)
	if err != nil {
		return Pending{}, err
	}
	stale, err := s.usable(c.cfg.maxStale)
	if err != nil {
		return Pending{}, err
	}
	total := s.sel.Len()
	avoid := func(in *registry.Instance) bool { return !c.q.Admit(service, in.ID, total) }
	in, done, err := s.sel.Pick(ctx, selector.PickOptions{Key: o.Key, Exclude: o.Exclude, Avoid: avoid})
	if err != nil {
		return Pending{}, fmt.Errorf("%s: %w", service, err)
	}
	c.tel.pick(ctx, service, in.ID)
	return Pending{Instance: in, Stale: stale, Total: total, c: c, service: service, done: done}, nil
}

// errReported stands for a failure the caller reported, for the
// selector's latency estimate.
var errReported = errors.New("middleware: reported failure")

// Report feeds the outcome of a Pending's call back, as an attempt
// through the Client's chain does: the selector's in-flight count and
// latency estimate (latency as the caller measured it), the failure
// metric, and the quarantine. Abort (the caller gave up) leaves the
// latency estimate and the quarantine alone; Business is a failed call to
// the latency estimate, as in Do, but not to the quarantine.
func (p Pending) Report(ctx context.Context, class Class, latency time.Duration) {
	if p.c == nil {
		return
	}
	var err error
	switch class {
	case Business, Retryable, Fatal:
		err = errReported
	case Abort:
		err = context.Canceled
	}
	p.done.Done(err, latency)
	if class != Success {
		p.c.tel.failure(ctx, p.service, p.Instance.ID, class)
	}
	p.c.q.Report(p.service, p.Instance.ID, class, p.Total)
}
