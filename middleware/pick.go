package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/roster-go/roster/internal/mwhook"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

func init() {
	mwhook.Pick = func(c any, ctx context.Context, service string, o selector.PickOptions) (mwhook.Pending, error) {
		return c.(*Client).pick(ctx, service, o)
	}
	mwhook.Report = func(ctx context.Context, p mwhook.Pending, class int, latency time.Duration) {
		report(ctx, p, Class(class), latency)
	}
	mwhook.Admit = func(q any, service, id string, total int) bool {
		return q.(*Quarantine).admit(service, id, total)
	}
	mwhook.Outcome = func(q any, service, id string, class int, total int) {
		q.(*Quarantine).report(service, id, Class(class), total)
	}
}

// pick picks an instance of service for a call that runs outside the
// Client (roster agent's picks). o.Key, o.Exclude, o.Tried and
// o.Endpoint are the caller's (an empty Endpoint: the call's, as in Do);
// the quarantine is the Avoid.
func (c *Client) pick(ctx context.Context, service string, o selector.PickOptions) (mwhook.Pending, error) {
	var begin time.Time
	if c.tel.callsOn(ctx) {
		begin = time.Now()
	}
	s, err := c.service(ctx, service)
	if err != nil {
		c.called(ctx, service, begin, nil, err)
		return mwhook.Pending{}, err
	}
	stale, err := s.usable(c.cfg.maxStale)
	if err != nil {
		c.called(ctx, service, begin, nil, err)
		return mwhook.Pending{}, err
	}
	total := s.sel.Len()
	if o.Endpoint == "" {
		o.Endpoint = c.endpointOf(ctx)
	}
	o.Avoid = func(in *registry.Instance) bool { return !c.q.admit(service, in.ID, total) }
	in, done, err := s.sel.Pick(ctx, o)
	if err != nil {
		err = fmt.Errorf("%s: %w", service, err)
		c.called(ctx, service, begin, nil, err)
		return mwhook.Pending{}, err
	}
	c.tel.pick(ctx, service, in.Zone, in.ID)
	return mwhook.Pending{Instance: in, Stale: stale, Total: total, Client: c, Service: service, Done: done}, nil
}

var errReported = errors.New("middleware: reported failure")

// report feeds a pick's outcome and latency to the selector, the
// quarantine and the metrics, as an attempt through Do does. The pick
// is a whole call to the metrics too: its caller does not retry
// through the Client.
func report(ctx context.Context, p mwhook.Pending, class Class, latency time.Duration) {
	c, _ := p.Client.(*Client)
	if c == nil {
		return
	}
	var err error
	switch class {
	case Business, Retryable, Fatal:
		err = errReported
	case Abort:
		err = context.Canceled
	}
	p.Done.Done(err, latency)
	if class != Success {
		c.tel.failure(ctx, p.Service, p.Instance.Zone, p.Instance.ID, class)
	}
	c.tel.call(ctx, p.Service, p.Endpoint, outcomeOf(class), latency)
	c.q.reportIn(p.Service, p.Instance.ID, p.Instance.Zone, p.Instance.Region, class, p.Total)
}
