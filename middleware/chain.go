package middleware

import (
	"context"
	"time"

	"github.com/roster-go/roster/registry"
)

// Call is one attempt of a call on one instance.
type Call func(ctx context.Context, in registry.Instance) error

// Handler runs a call for a Request. The innermost handler picks an
// instance and runs one attempt; middleware wraps it to add behaviour.
type Handler func(ctx context.Context, req *Request) error

// Middleware wraps a Handler. Middleware are plain values: the Client
// applies them in order, the first one outermost, and user middleware can
// stand anywhere in the list.
type Middleware func(next Handler) Handler

// Chain composes middleware around h, the first one outermost.
func Chain(h Handler, mw ...Middleware) Handler {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}

// excluder keeps instances out of the attempts of one request. Quarantine
// is one, Hedge another (pushExcluder). An excluder is advice, not a
// wall: when the excluders leave no instance, the pick falls back in the
// order of selector.PickOptions (an instance this call tried that no
// excluder rejects, then any instance) rather than fail the call.
type excluder interface {
	excluded(req *Request, in *registry.Instance) bool
}

// Request is one call as it goes through the chain. The Client reuses
// Requests: middleware must not keep a pointer to one after its handler
// returns.
type Request struct {
	Service string
	Key     string // affinity key for consistent hashing (a user ID, …)
	Call    Call
	Start   time.Time // when the call started

	// Set by the innermost handler on each attempt.
	Attempt  int               // 1 for the first attempt
	Instance registry.Instance // the instance of the latest attempt
	Picked   bool              // whether the latest attempt got an instance
	Latency  time.Duration     // duration of the latest attempt's call
	Reason   string            // why the latest attempt is a retry ("" for the first)

	// Set by the Client from the service's current state.
	Stale bool // the instances come from a stale snapshot
	Total int  // instances the service has, for panic thresholds

	classify  Classifier
	endpoint  string  // the endpoint name attempts pick for ("" the primary)
	budget    *budget // the retry budget of the innermost Retry, for Hedge
	tel       *telemetry
	svc       *service
	pol       *servicePolicy // the service's, at the call's start
	once      bool           // the call may not run twice (the zero Request may)
	contained bool           // the quarantine holds the latest attempt's instance out
	tried     []string
	triedBuf  [8]string
	excluders []excluder
	exclBuf   [4]excluder
}

func (r *Request) reset() {
	*r = Request{}
	r.tried = r.triedBuf[:0]
	r.excluders = r.exclBuf[:0]
}

// Classify classifies err with the Client's classifier.
func (r *Request) Classify(ctx context.Context, err error) Class {
	if r.classify == nil {
		return DefaultClassify(ctx, err)
	}
	return r.classify(ctx, err)
}

// hasTried reports whether an earlier attempt of this request used the
// instance.
func (r *Request) hasTried(id string) bool {
	for _, t := range r.tried {
		if t == id {
			return true
		}
	}
	return false
}

// markTried records that the latest attempt's instance should not be
// picked again for this request while others are left.
func (r *Request) markTried() {
	if r.Picked && !r.hasTried(r.Instance.ID) {
		r.tried = append(r.tried, r.Instance.ID)
	}
}

// pushExcluder adds e for the attempts run inside the current handler and
// returns a mark for popExcluders.
func (r *Request) pushExcluder(e excluder) int {
	n := len(r.excluders)
	r.excluders = append(r.excluders, e)
	return n
}

// popExcluders removes the excluders pushed since mark.
func (r *Request) popExcluders(mark int) { r.excluders = r.excluders[:mark] }

// wasTried is the pick's Tried predicate: earlier attempts used in.
func (r *Request) wasTried(in *registry.Instance) bool { return r.hasTried(in.ID) }

// avoided is the pick's Avoid predicate: an excluder rejects in.
func (r *Request) avoided(in *registry.Instance) bool {
	for _, e := range r.excluders {
		if e.excluded(r, in) {
			return true
		}
	}
	return false
}

// clone returns a copy of r that a concurrent branch can use.
func (r *Request) clone() *Request {
	c := &Request{}
	*c = *r
	c.tried = append(c.triedBuf[:0], r.tried...)
	c.excluders = append(c.exclBuf[:0], r.excluders...)
	return c
}

// adopt takes the outcome of a branch's latest attempt.
func (r *Request) adopt(b *Request) {
	r.Instance, r.Picked, r.Latency = b.Instance, b.Picked, b.Latency
}

// picked tells the excluders that observe picks which instance was taken.
func (r *Request) picked() {
	for _, e := range r.excluders {
		if o, ok := e.(pickObserver); ok {
			o.picked(r)
		}
	}
}
