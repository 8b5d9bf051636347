package middleware

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/roster-go/roster/policy"
	"github.com/roster-go/roster/registry"
)

// WithStoredPolicies says whether the client follows the policies stored
// in its registry (package policy: Put, or `roster policy set`), on by
// default. A stored policy applies to its service as SetPolicy would,
// within the watch's delay of being written, and keeps the per-instance
// state. Deleting it brings back the policy given in code, if any; the
// latest change wins. A stored record that is not a valid policy is
// ignored and logged once: the service keeps its last good policy. A
// backend that keeps no records (DNS, Kubernetes) has nothing to follow.
func WithStoredPolicies(on bool) Option { return func(c *clientConfig) { c.noStored = !on } }

// storedPolicies follows the stored policies of a client's registry.
type storedPolicies struct {
	cancel  context.CancelFunc
	done    chan struct{}
	applied map[string]string // service → the version applied
	logged  map[string]string // service → the bad version already logged
}

// followStored starts following the stored policies, if the backend
// keeps records.
func (c *Client) followStored() {
	if _, err := c.reg.Records(); err != nil {
		return // no record store: nothing stored to follow
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := policy.Watch(ctx, c.reg, "")
	if err != nil {
		cancel()
		slog.Default().Warn("roster: stored policies not followed", "err", err)
		return
	}
	st := &storedPolicies{cancel: cancel, done: make(chan struct{}),
		applied: map[string]string{}, logged: map[string]string{}}
	c.stored = st
	first := make(chan struct{})
	go func() {
		defer close(st.done)
		defer w.Close()
		for i := 0; ; i++ {
			if i == 1 {
				close(first)
			}
			set, err := w.Next(ctx)
			if err != nil && !errors.Is(err, registry.ErrUnavailable) {
				return // closed
			}
			if err != nil {
				continue // stale: keep what is applied
			}
			c.applyStored(set)
		}
	}()
	// The policies stored now apply from the first call on, unless the
	// registry is slow to answer: then they apply when it does.
	t := time.NewTimer(firstStoredWait)
	defer t.Stop()
	select {
	case <-first:
	case <-st.done:
	case <-t.C:
	}
}

// firstStoredWait bounds how long NewClient waits for the stored
// policies.
const firstStoredWait = time.Second

// stop ends the following and waits for it; st may be nil.
func (st *storedPolicies) stop() {
	if st == nil {
		return
	}
	st.cancel()
	<-st.done
}

// applyStored applies a new set of stored policies.
func (c *Client) applyStored(set []policy.Stored) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	st := c.stored
	seen := map[string]bool{}
	for _, s := range set {
		seen[s.Service] = true
		if s.Err != nil {
			if st.logged[s.Service] != s.Version {
				st.logged[s.Service] = s.Version
				slog.Default().Warn("roster: stored policy rejected; the service keeps its last good policy",
					"service", s.Service, "version", s.Version, "err", s.Err)
			}
			continue
		}
		if st.applied[s.Service] == s.Version {
			continue
		}
		p := s.Policy
		if err := c.setPolicy(s.Service, &p); err != nil {
			if st.logged[s.Service] != s.Version {
				st.logged[s.Service] = s.Version
				slog.Default().Warn("roster: stored policy not applied; the service keeps its last good policy",
					"service", s.Service, "version", s.Version, "err", err)
			}
			continue
		}
		st.applied[s.Service] = s.Version
	}
	for name := range st.applied {
		if seen[name] {
			continue
		}
		// Deleted: back to the policy given in code, or none.
		var p *policy.Policy
		if cp, ok := c.code[name]; ok {
			p = &cp
		}
		if err := c.setPolicy(name, p); err != nil {
			slog.Default().Warn("roster: policy not restored after its stored one was deleted", "service", name, "err", err)
		}
		delete(st.applied, name)
	}
}
