package middleware

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/roster-go/roster/policy"
	"github.com/roster-go/roster/selector"
)

// WithPolicy sets the traffic policy of one service (see package
// policy): its strategy, filter, split and locality zone for picks, its
// retries, hedging and timeouts for calls. Fields the policy leaves out
// keep the client's configuration. NewClient fails on an invalid policy.
// Call WithPolicy once per service; SetPolicy changes one at run time.
func WithPolicy(service string, p policy.Policy) Option {
	return func(c *clientConfig) {
		if c.policies == nil {
			c.policies = map[string]policy.Policy{}
		}
		c.policies[service] = p
	}
}

// WithIdempotent says whether the client's calls may run twice (default
// true: a Call is user code the client cannot inspect, and most are
// reads). With false, a failed call is retried only where it cannot
// have reached the instance: its pick failed, or its connection was
// refused (contrib/rosterhttp's rule for a POST). A service's policy
// (retry.idempotent) and a call's context (Idempotent) override it.
func WithIdempotent(ok bool) Option { return func(c *clientConfig) { c.notIdempotent = !ok } }

type idempotentCtx struct{}

// idempotentInContext is set once Idempotent has been called in the
// process: until then a call does not look for it in its context.
var idempotentInContext atomic.Bool

// Idempotent returns a context whose calls are taken as idempotent (ok)
// or not, whatever the client and the service's policy say. A call that
// is not is retried only where it cannot have reached the instance, and
// never hedged.
func Idempotent(ctx context.Context, ok bool) context.Context {
	idempotentInContext.Store(true)
	return context.WithValue(ctx, idempotentCtx{}, ok)
}

// servicePolicy is a service's policy prepared for calls: what the
// chain reads per call, computed once per policy change.
type servicePolicy struct {
	p          policy.Policy
	selOpts    []selector.Option // the client's, then the policy's
	retry      *retryPolicy      // nil: the chain's Retry decides alone
	hedge      time.Duration     // 0: no hedge
	timeout    time.Duration
	perTry     time.Duration
	idempotent int8 // 0: not said, 1 yes, -1 no
}

// retryPolicy replaces what a policy sets of a Retry's configuration for
// the calls of one service; a zero field keeps the Retry's.
type retryPolicy struct {
	attempts int
	ratio    float64
	b        *budget // nil: the Retry's
	on       retryOn
}

type retryOn uint8

const (
	onConnection retryOn = 1 << iota
	onTimeout
	onRetryable
)

// allows reports whether a failure of class c with err may be retried.
func (o retryOn) allows(c Class, err error) bool {
	if c != Retryable {
		return false
	}
	if o&onRetryable != 0 {
		return true
	}
	switch reason(c, err) {
	case "connection":
		return o&onConnection != 0
	case "timeout":
		return o&onTimeout != 0
	}
	return false
}

// compilePolicy prepares p on top of the client's configuration; old,
// if any, is the service's previous one, whose retry budget is kept while
// its ratio does not change.
func (c *Client) compilePolicy(p policy.Policy, old *servicePolicy) (*servicePolicy, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	// The defaults written out (Default, WithDefaults) are no change.
	if p.Outlier != nil && *p.WithDefaults().Outlier != *policy.Default().Outlier {
		return nil, &policy.FieldError{Field: "outlier",
			Reason: "per-service outlier settings are not applied by middleware.Client yet; set them client-wide with WithQuarantine"}
	}
	opts, err := p.SelectorOptions()
	if err != nil {
		return nil, err
	}
	sp := &servicePolicy{p: p, selOpts: slices.Concat(c.cfg.selOpts, opts), timeout: time.Duration(p.Timeout)}
	// The client's options and the policy's together: a strategy the
	// policy sets with a bounded load the client set, say.
	if _, err := selector.New(sp.selOpts...); err != nil {
		return nil, fmt.Errorf("policy: with the client's selector options: %w", err)
	}
	if h := p.Hedge; h != nil {
		sp.hedge = time.Duration(h.Delay)
	}
	if r := p.Retry; r != nil {
		sp.perTry = time.Duration(r.PerTryTimeout)
		if r.Idempotent != nil {
			sp.idempotent = map[bool]int8{true: 1, false: -1}[*r.Idempotent]
		}
		rp := &retryPolicy{attempts: r.Attempts, ratio: r.BudgetRatio}
		for _, on := range r.RetryOn {
			rp.on |= map[string]retryOn{policy.RetryOnConnection: onConnection,
				policy.RetryOnTimeout: onTimeout, policy.RetryOnRetryable: onRetryable}[on]
		}
		switch {
		case rp.ratio == 0: // the Retry's budget
		case old != nil && old.retry != nil && old.retry.ratio == rp.ratio:
			rp.b = old.retry.b // the budget's window of calls carries over
		default:
			rp.b = newBudget(rp.ratio, RetryConfig{}.withDefaults().BudgetMinPerSecond)
		}
		sp.retry = rp
	}
	return sp, nil
}

// SetPolicy sets or replaces the traffic policy of a service while the
// client runs. The service's selector is reconfigured in place
// (selector.Reconfigure): latency estimates, requests in flight and slow
// starts carry over, as do the quarantine's ejections and the throttle's
// window, which are the client's. Calls in flight finish under the old
// policy; calls that start after SetPolicy returns use the new one.
//
// An invalid policy is a *policy.FieldError and changes nothing. So is a
// policy that changes the locality zone of a service already called: a
// selector's zone is fixed (give the policy before the first call, with
// WithPolicy or SetPolicy).
func (c *Client) SetPolicy(service string, p policy.Policy) error {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if err := c.setPolicy(service, &p); err != nil {
		return err
	}
	c.code[service] = p
	return nil
}

// setPolicy installs p, or the client's own configuration when p is nil,
// as the policy of service; c.pmu held.
func (c *Client) setPolicy(service string, p *policy.Policy) error {
	c.mu.Lock()
	s := c.services[service]
	old := c.policyOf(service)
	c.mu.Unlock()
	var sp *servicePolicy
	opts := c.cfg.selOpts
	if p != nil {
		var err error
		if sp, err = c.compilePolicy(*p, old); err != nil {
			return err
		}
		opts = sp.selOpts
	}
	if s != nil {
		if err := s.sel.Reconfigure(opts...); err != nil {
			return &policy.FieldError{Field: "locality.zone", Reason: err.Error()}
		}
		s.pol.Store(sp)
	}
	c.mu.Lock()
	if sp == nil {
		delete(c.policies, service)
	} else {
		c.policies[service] = sp
	}
	// A service swept and followed again meanwhile was built with the
	// old policy.
	again := c.services[service]
	c.mu.Unlock()
	if again != nil && again != s {
		if err := again.sel.Reconfigure(opts...); err == nil {
			again.pol.Store(sp)
		}
	}
	return nil
}

// Policy returns the policy set for a service (WithPolicy, SetPolicy),
// and whether one is.
func (c *Client) Policy(service string) (policy.Policy, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sp := c.policyOf(service)
	if sp == nil {
		return policy.Policy{}, false
	}
	return sp.p, true
}

// policyOf returns the prepared policy of a service, or nil; c.mu held.
func (c *Client) policyOf(service string) *servicePolicy { return c.policies[service] }

// idempotentCall reports whether a call with ctx may run twice.
func (c *Client) idempotentCall(ctx context.Context, sp *servicePolicy) bool {
	if idempotentInContext.Load() {
		if ok, set := ctx.Value(idempotentCtx{}).(bool); set {
			return ok
		}
	}
	if sp != nil && sp.idempotent != 0 {
		return sp.idempotent > 0
	}
	return !c.cfg.notIdempotent
}

// mayRetry applies the idempotency rule to a failure Retry would retry:
// a call that is not idempotent goes again only if it cannot have reached
// the instance.
func (req *Request) mayRetry(err error) bool {
	return !req.once || !req.Picked || neverSent(err)
}

// neverSent reports a failure to connect: the call did not leave.
func neverSent(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	op, ok := errors.AsType[*net.OpError](err)
	return ok && op.Op == "dial"
}
