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
