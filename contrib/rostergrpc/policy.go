package rostergrpc

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/connectivity"

	"github.com/roster-go/roster/policy"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// WithPolicy sets the traffic policy of one service (see package
// policy). Its strategy, filter, split, locality zone and hash key drive
// the service's balancer: they apply to every pick. Its retry.attempts
// goes into the default service config of a channel NewClient makes for
// the service, so it is fixed per channel. Its hedging, timeouts and
// outlier settings are middleware.Client's and do not apply here. A
// policy stored in the registry for the service replaces it while it is
// stored (WithStoredPolicies). NewClient fails on an invalid policy.
func WithPolicy(service string, p policy.Policy) Option {
	return func(c *dialConfig) {
		if c.policies == nil {
			c.policies = map[string]policy.Policy{}
		}
		c.policies[service] = p
	}
}

// WithStoredPolicies says whether the channels follow the policies
// stored in the registry (policy.Put, or `roster policy set`), on by
// default, with the semantics of middleware.WithStoredPolicies: a stored
// policy applies to its service's balancer within the watch's delay,
// keeping the per-instance state; deleting it brings back WithPolicy's,
// if any; a stored record that is not a valid policy is ignored and
// logged once. A running channel's retry attempts do not follow: they
// are in its service config, read once by NewClient.
func WithStoredPolicies(on bool) Option { return func(c *dialConfig) { c.noStored = !on } }

// policies holds the policies of a dial's services: the code's and the
// stored ones, which win while they are stored.
type policies struct {
	reg      *registry.Registry
	noStored bool
	code     map[string]policy.Policy

	mu      sync.Mutex
	stored  map[string]policy.Policy // service → the stored policy applied
	version map[string]string        // service → its version
	logged  map[string]string        // service → the bad version already logged
	cancel  context.CancelFunc       // the follower, while balancers run
}

func newPolicies(reg *registry.Registry, code map[string]policy.Policy, noStored bool) *policies {
	return &policies{reg: reg, noStored: noStored, code: code,
		stored: map[string]policy.Policy{}, version: map[string]string{}, logged: map[string]string{}}
}

// of returns the policy of service, and whether it has one.
func (ps *policies) of(service string) (policy.Policy, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p, ok := ps.stored[service]; ok {
		return p, true
	}
	p, ok := ps.code[service]
	return p, ok
}

// readStored reads the stored policy of one service before a channel is
// made, so it applies from the first RPC on; a slow registry is waited
// for up to firstStoredWait, then the follower catches up.
func (ps *policies) readStored(service string) {
	if ps.noStored || ps.reg == nil {
		return
	}
	if _, err := ps.reg.Records(); err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), firstStoredWait)
	defer cancel()
	s, err := policy.Get(ctx, ps.reg, service)
	if err != nil || s.Err != nil {
		return
	}
	ps.mu.Lock()
	ps.stored[service], ps.version[service] = s.Policy, s.Version
	ps.mu.Unlock()
}

// firstStoredWait bounds how long NewClient waits for a stored policy,
// as middleware.NewClient does.
const firstStoredWait = time.Second

// start follows the stored policies while the dial has balancers,
// calling changed for each service whose policy changes.
func (ps *policies) start(changed func(service string)) {
	if ps.noStored || ps.reg == nil {
		return
	}
	if _, err := ps.reg.Records(); err != nil {
		return // no record store: nothing stored to follow
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := policy.Watch(ctx, ps.reg, "")
	if err != nil {
		cancel()
		slog.Default().Warn("rostergrpc: stored policies not followed", "err", err)
		return
	}
	ps.cancel = cancel
	go func() {
		defer w.Close()
		for {
			set, err := w.Next(ctx)
			if err != nil && !errors.Is(err, registry.ErrUnavailable) {
				return // closed
			}
			if err != nil {
				continue // stale: keep what is applied
			}
			for _, s := range ps.apply(set) {
				changed(s)
			}
		}
	}()
}

// stop ends the following; it does not wait, since the follower may be
// waiting for the balancer that calls stop.
func (ps *policies) stop() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.cancel != nil {
		ps.cancel()
		ps.cancel = nil
	}
}

// apply records a new set of stored policies and returns the services
// whose policy changed.
func (ps *policies) apply(set []policy.Stored) []string {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var changed []string
	seen := map[string]bool{}
	for _, s := range set {
		seen[s.Service] = true
		if s.Err != nil {
			if ps.logged[s.Service] != s.Version {
				ps.logged[s.Service] = s.Version
				slog.Default().Warn("rostergrpc: stored policy rejected; the service keeps its last good policy",
					"service", s.Service, "version", s.Version, "err", s.Err)
			}
			continue
		}
		if ps.version[s.Service] == s.Version {
			continue
		}
		ps.stored[s.Service], ps.version[s.Service] = s.Policy, s.Version
		changed = append(changed, s.Service)
	}
	for name := range ps.version {
		if !seen[name] {
			// Deleted: back to the policy given in code, or none.
			delete(ps.stored, name)
			delete(ps.version, name)
			changed = append(changed, name)
		}
	}
	return changed
}

// rejected logs once that a policy could not be applied to a running
// selector (a changed locality zone).
func (ps *policies) rejected(service string, err error) {
	ps.mu.Lock()
	v := ps.version[service]
	again := ps.logged[service] == v && v != ""
	ps.logged[service] = v
	ps.mu.Unlock()
	if !again {
		slog.Default().Warn("rostergrpc: policy not applied; the service keeps its last good policy",
			"service", service, "version", v, "err", err)
	}
}

// selectorOptions returns the options of service's selector: the dial's,
// the balancer config's strategy, then the policy's, which win; and the
// policy's hash key.
func (s *settings) selectorOptions(service string, strategy selector.Strategy) ([]selector.Option, string, error) {
	opts := slices.Clip(s.selOpts)
	if strategy != "" {
		opts = append(opts, selector.WithStrategy(strategy))
	}
	if s.policies == nil {
		return opts, "", nil
	}
	p, ok := s.policies.of(service)
	if !ok {
		return opts, "", nil
	}
	po, err := p.SelectorOptions()
	if err != nil {
		return nil, "", err
	}
	return append(opts, po...), p.HashKey, nil
}

// policyChanged reconfigures the selectors of service in place.
func (s *settings) policyChanged(service string) {
	for _, b := range s.list() {
		if err := b.reconfigure(service); err != nil {
			s.policies.rejected(service, err)
		}
	}
}

// reconfigure applies the current policy of service to b's selector,
// keeping its per-instance state, and publishes a picker.
func (b *rosterBalancer) reconfigure(service string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.sel == nil || b.service != service {
		return nil
	}
	opts, key, err := b.set.selectorOptions(service, b.strategy)
	if err != nil {
		return err
	}
	if err := b.sel.Reconfigure(opts...); err != nil {
		return err
	}
	b.hashKey = key
	if b.state == connectivity.Ready {
		b.publish()
	}
	return nil
}
