// Package mwhook lets the module's own packages reach the parts of
// middleware that users never need: the bare pick roster agent serves,
// and the quarantine that contrib/rostergrpc's balancer shares. Package
// middleware sets the hooks when it loads. A class is a middleware.Class.
package mwhook

import (
	"context"
	"time"

	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// Pending is one pick whose call runs outside the Client: in another
// process that reports back, as the clients of roster agent do. Report
// it exactly once.
type Pending struct {
	Instance registry.Instance
	Stale    bool // picked from a stale snapshot
	Total    int  // instances the service had at pick time

	Client  any // the *middleware.Client
	Service string
	Done    selector.Done
	// Endpoint is the name of the endpoint called when the instance
	// announces it, else "" (the primary). It labels the call metrics.
	Endpoint string
}

var (
	// Pick picks an instance of service with the Client c, as an attempt
	// of Client.Do does, without running a call. o.Tried and o.Avoid are
	// the Client's.
	Pick func(c any, ctx context.Context, service string, o selector.PickOptions) (Pending, error)
	// Report feeds a Pending's outcome to its selector, quarantine and
	// metrics, as an attempt through Client.Do does.
	Report func(ctx context.Context, p Pending, class int, latency time.Duration)
	// Admit reports whether the *middleware.Quarantine q lets an instance
	// take a call now; total is the number of instances of the service.
	Admit func(q any, service, id string, total int) bool
	// Outcome counts an attempt's outcome in the quarantine q.
	Outcome func(q any, service, id string, class int, total int)
)

// The hooks of contrib/rostergrpc's balancer and interceptors, which run
// Client.Do's protections around calls the Client does not make.
var (
	// OutcomeIn is Outcome for an instance of zone and region ("" unknown:
	// a zone or region failing on its own may then be ejected past the cap). It reports
	// whether the quarantine now holds the instance out: the failure is
	// contained, and a throttle must not count it.
	OutcomeIn func(q any, service, id, zone, region string, class int, total int) (out bool)
	// WatchUsable makes the quarantine q call f when it ejects an
	// instance (usable false) and when the ejection ends or the instance
	// is readmitted (true), as it tells a Client's selectors. f must not
	// block.
	WatchUsable func(q any, f func(service, id string, usable bool))
	// NewThrottle returns the adaptive throttling of a Client's default
	// chain, tuned by cfg, a middleware.ThrottleConfig.
	NewThrottle func(cfg any) any
	// Throttle reports whether the throttle t lets a call to service
	// start at now: nil, or the rejection, an error matching
	// middleware.ErrThrottled (the rejection counts as a failure).
	Throttle func(t any, service string, now time.Time) error
	// Throttled counts in t the outcome of a call to service that started
	// at start, of class; deadline says whether the caller's deadline
	// passed (an Abort then counts as a failure). A contained failure
	// must not be counted at all.
	Throttled func(t any, service string, start time.Time, class int, deadline bool)
)
