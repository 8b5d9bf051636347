package conformance

import (
	"context"
	"slices"
	"time"

	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// The operator's actions (registry.Override): each is seen by a watcher
// in another process within the propagation bound, and the owner's
// heartbeats never undo it. A backend that keeps no records skips them.
var overrideChecks = []check{
	{name: "OverrideDrainSurvivesHeartbeats", run: overrideDrain},
	{name: "OverrideWeight", run: overrideWeight},
	{name: "OverrideMaintenanceThenRestore", run: overrideMaintenance},
	{name: "OverrideDeregisterZombieForGood", run: overrideDeregisterZombie},
}

func init() { checks = append(checks, overrideChecks...) }

// setOverride sets o on r and lifts it at cleanup: overrides have no TTL.
func setOverride(t TB, r *registry.Registry, o registry.Override) {
	t.Helper()
	records(t, r)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.ClearOverride(ctx, o.Service, o.Target())
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var err error
	if o.Deregistered {
		err = r.Deregister(ctx, o)
	} else {
		err = r.SetOverride(ctx, o)
	}
	if err != nil {
		t.Fatalf("%s %s/%s: %v", o.Action(), o.Service, o.Target(), err)
	}
}

func clearOverride(t TB, r *registry.Registry, svc, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := r.ClearOverride(ctx, svc, id); err != nil {
		t.Fatalf("ClearOverride(%s/%s): %v", svc, id, err)
	}
}

func weightIs(id string, w uint32) func(registry.Snapshot) bool {
	return func(s registry.Snapshot) bool { in, ok := s.Find(id); return ok && in.Weight == w }
}

// holds checks, for d, that every Lookup of svc on r satisfies ok.
func holds(t TB, r *registry.Registry, svc string, d time.Duration, what string, ok func(registry.Snapshot) bool) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		s, err := r.Lookup(ctx, svc)
		cancel()
		if err == nil && !ok(s) {
			t.Fatalf("%s: broken after the owner's heartbeats: %s", what, describe(&s))
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-t.Context().Done():
			return
		}
	}
}

func overrideDrain(t TB, s *suite) {
	r, obs, svc := s.pair(t, "ovdrain")
	op := s.open(t)
	records(t, op)
	l, w, _ := s.registerWatched(t, r, obs, svc)
	id := l.Instance().ID
	setOverride(t, op, registry.Override{Service: svc, ID: id, Drain: true, Reason: "conformance"})
	waitWatch(t, w, s.cfg.Propagation, "the drained instance at weight 0, still registered", weightIs(id, 0))
	// Two TTLs of the owner's heartbeats, and one write of its own weight:
	// the drain holds.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	err := l.SetWeight(ctx, registry.DefaultWeight)
	cancel()
	if err != nil {
		t.Fatalf("owner's SetWeight: %v", err)
	}
	holds(t, obs, svc, 2*l.TTL(), "the drain (weight 0, instance listed)", weightIs(id, 0))
	clearOverride(t, op, svc, id)
	waitWatch(t, w, s.cfg.Propagation, "the instance back at its own weight", weightIs(id, registry.DefaultWeight))
}

func overrideWeight(t TB, s *suite) {
	r, obs, svc := s.pair(t, "ovweight")
	l, w, _ := s.registerWatched(t, r, obs, svc)
	id := l.Instance().ID
	n := 7
	setOverride(t, r, registry.Override{Service: svc, ID: id, Weight: &n})
	waitWatch(t, w, s.cfg.Propagation, "weight 7", weightIs(id, 7))
	holds(t, obs, svc, 2*l.TTL(), "weight 7", weightIs(id, 7))
}

func overrideMaintenance(t TB, s *suite) {
	r, obs, svc := s.pair(t, "ovmaint")
	op := s.open(t)
	records(t, op)
	l, w, before := s.registerWatched(t, r, obs, svc)
	other := s.register(t, r, s.inst(svc))
	id := l.Instance().ID
	waitWatch(t, w, s.cfg.Propagation, "both instances", func(sn registry.Snapshot) bool { return len(sn.Instances) == 2 })
	setOverride(t, op, registry.Override{Service: svc, ID: id, Maintenance: true})
	out := func(sn registry.Snapshot) bool { return !has(sn, id) && has(sn, other.Instance().ID) }
	waitWatch(t, w, s.cfg.Propagation, "the instance in maintenance left out", out)
	holds(t, obs, svc, 2*l.TTL(), "the maintenance", out)
	clearOverride(t, op, svc, id)
	want, _ := before.Find(id)
	waitWatch(t, w, s.cfg.Propagation, "the instance back as before", func(sn registry.Snapshot) bool {
		in, ok := sn.Find(id)
		return ok && in.Equal(want)
	})
}

func overrideDeregisterZombie(t TB, s *suite) {
	r, obs, svc := s.pair(t, "ovzombie")
	op := s.open(t)
	records(t, op)
	ttl := max(MaxRecordTTL, s.cfg.TTL)
	l := s.register(t, r, s.inst(svc), registry.WithTTL(ttl))
	w := s.watch(t, obs, svc)
	id := l.Instance().ID
	waitWatch(t, w, s.cfg.Propagation, "the instance", func(sn registry.Snapshot) bool { return has(sn, id) })
	l.Abandon() // the owner is gone; its record lives on for ttl
	setOverride(t, op, registry.Override{Service: svc, ID: id, Maintenance: true, Deregistered: true})
	waitWatch(t, w, s.cfg.Propagation, "the zombie gone", func(sn registry.Snapshot) bool { return !has(sn, id) })
	var drv driver.Driver
	obs.As(&drv)
	gone := func() (bool, string) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		raw, err := drv.List(ctx, svc)
		present := slices.ContainsFunc(raw.Instances, func(in registry.Instance) bool { return in.ID == id })
		return err == nil && !present, describe(&raw)
	}
	eventually(t, s.cfg.Propagation, "the zombie's record gone from the backend", gone)
	holds(t, obs, svc, 2*s.cfg.TTL, "the zombie gone", func(sn registry.Snapshot) bool { return !has(sn, id) })
	if ok, detail := gone(); !ok {
		t.Fatalf("the zombie's record came back in the backend: %s", detail)
	}
}
