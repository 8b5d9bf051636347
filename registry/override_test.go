package registry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
)

func weight(n int) *int { return &n }

// rawView reads the backend's instances without overrides: a registry
// over the same server whose driver keeps no records.
func rawView(t *testing.T, srv *memory.Server) *registry.Registry {
	t.Helper()
	r := registry.New(storeless{memory.NewDriver(srv)}, registry.AllowLoopback())
	t.Cleanup(func() { r.Close() })
	return r
}

// waitSnapshot reads w until ok accepts a snapshot, or fails at the
// deadline.
func waitSnapshot(t *testing.T, w *registry.Watcher, within time.Duration, what string, ok func(registry.Snapshot) bool) registry.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	var last registry.Snapshot
	for {
		s, err := w.Next(ctx)
		if ctx.Err() != nil {
			t.Fatalf("no snapshot with %s within %v; last %+v", what, within, last.Instances)
		}
		if err == nil && ok(s) {
			return s
		}
		last = s
	}
}

func weightOf(s registry.Snapshot, id string) (uint32, bool) {
	in, ok := s.Find(id)
	return in.Weight, ok
}

func TestOverrideInvalidWritesNothing(t *testing.T) {
	r := registry.New(memory.NewDriver(memory.NewServer()))
	defer r.Close()
	ctx := t.Context()
	for _, tc := range []struct {
		o     registry.Override
		field string
	}{
		{registry.Override{Service: "Bad Name", ID: "a", Drain: true}, "service"},
		{registry.Override{Service: "api", Drain: true}, "id"},
		{registry.Override{Service: "api", ID: "a", Address: "10.0.0.1:80", Drain: true}, "address"},
		{registry.Override{Service: "api", ID: "a/b", Drain: true}, "id"},
		{registry.Override{Service: "api", ID: "-a", Drain: true}, "id"},
		{registry.Override{Service: "api", ID: strings.Repeat("a", 250), Drain: true}, "id"},
		{registry.Override{Service: "api", Address: "nowhere", Drain: true}, "address"},
		{registry.Override{Service: "api", ID: "a"}, "action"},
		{registry.Override{Service: "api", ID: "a", Drain: true, Maintenance: true}, "action"},
		{registry.Override{Service: "api", ID: "a", Weight: weight(-1)}, "weight"},
		{registry.Override{Service: "api", ID: "a", Weight: weight(65536)}, "weight"},
		{registry.Override{Service: "api", ID: "a", Drain: true, Deregistered: true}, "deregistered"},
		{registry.Override{Service: "api", ID: "a", Drain: true, Reason: "x\x1b[2Jy"}, "reason"},
		{registry.Override{Service: "api", ID: "a", Drain: true, Reason: strings.Repeat("r", 513)}, "reason"},
		{registry.Override{Service: "api", ID: "a", Drain: true, By: "\xff"}, "by"},
	} {
		err := r.SetOverride(ctx, tc.o)
		var fe *registry.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("SetOverride(%+v) = %v, want a FieldError on %q", tc.o, err, tc.field)
		}
	}
	if err := r.ClearOverride(ctx, "api", "a/b"); err == nil {
		t.Error("ClearOverride of an invalid ID succeeded")
	}
	if err := r.Deregister(ctx, registry.Override{Service: "api"}); err == nil {
		t.Error("Deregister of an empty target succeeded")
	}
	if got, err := r.Overrides(ctx, ""); err != nil || len(got) != 0 {
		t.Fatalf("Overrides after invalid input = %+v, %v; want none", got, err)
	}
}

func TestOverrideUnsupported(t *testing.T) {
	r := registry.New(storeless{memory.NewDriver(memory.NewServer())})
	defer r.Close()
	err := r.SetOverride(t.Context(), registry.Override{Service: "api", ID: "a", Drain: true})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("SetOverride without a store = %v, want errors.ErrUnsupported", err)
	}
}

// TestOverrideDrainSurvivesOwner: a drained instance is at weight 0 for
// every reader while it stays registered; its owner's heartbeats and
// weight changes do not undo the drain; restore brings back the owner's
// weight.
func TestOverrideDrainSurvivesOwner(t *testing.T) {
	srv := memory.NewServer()
	owner := registry.New(memory.NewDriver(srv))
	defer owner.Close()
	op := registry.New(memory.NewDriver(srv))
	defer op.Close()
	reader := registry.New(memory.NewDriver(srv))
	defer reader.Close()
	ctx := t.Context()
	l, err := owner.Register(ctx, registry.Instance{Service: "api", Address: "127.0.0.1:9001", Weight: 7},
		registry.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	id := l.Instance().ID
	w, err := reader.Watch(ctx, "api")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	waitSnapshot(t, w, 5*time.Second, "weight 7", func(s registry.Snapshot) bool { n, ok := weightOf(s, id); return ok && n == 7 })

	if err := op.SetOverride(ctx, registry.Override{Service: "api", ID: id, Drain: true, Reason: "disk"}); err != nil {
		t.Fatal(err)
	}
	waitSnapshot(t, w, time.Second, "weight 0", func(s registry.Snapshot) bool { n, ok := weightOf(s, id); return ok && n == 0 })

	// The owner writes its weight and heartbeats for two TTLs: readers
	// still see the drain.
	if err := l.SetWeight(ctx, 50); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * l.TTL())
	for time.Now().Before(deadline) {
		s, err := reader.Lookup(ctx, "api")
		if n, ok := weightOf(s, id); err != nil || !ok || n != 0 {
			t.Fatalf("Lookup under a drain = %+v, %v; want %s at weight 0", s.Instances, err, id)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if raw, _ := rawView(t, srv).Lookup(ctx, "api"); len(raw.Instances) != 1 || raw.Instances[0].Weight != 50 {
		t.Fatalf("the backend holds %+v; want the owner's record at weight 50, untouched", raw.Instances)
	}
	got, err := op.Overrides(ctx, "api")
	if err != nil || len(got) != 1 || !got[0].Drain || got[0].By == "" || got[0].At.IsZero() || got[0].Reason != "disk" {
		t.Fatalf("Overrides = %+v, %v; want the drain with who, when and why", got, err)
	}

	if err := op.ClearOverride(ctx, "api", id); err != nil {
		t.Fatal(err)
	}
	waitSnapshot(t, w, time.Second, "the owner's weight 50", func(s registry.Snapshot) bool { n, ok := weightOf(s, id); return ok && n == 50 })
	if got, _ := op.Overrides(ctx, "api"); len(got) != 0 {
		t.Fatalf("Overrides after restore = %+v", got)
	}
}

// TestOverrideMaintenanceByAddressSurvivesRestart: an instance in
// maintenance by address is left out by Lookup and Watch, also after its
// owner restarts with a new ID; a weight override applies its weight.
func TestOverrideMaintenanceByAddressSurvivesRestart(t *testing.T) {
	srv := memory.NewServer()
	owner := registry.New(memory.NewDriver(srv))
	defer owner.Close()
	reader := registry.New(memory.NewDriver(srv))
	defer reader.Close()
	ctx := t.Context()
	a, err := owner.Register(ctx, registry.Instance{Service: "api", Address: "127.0.0.1:9001"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := owner.Register(ctx, registry.Instance{Service: "api", Address: "127.0.0.1:9002"})
	if err != nil {
		t.Fatal(err)
	}
	if err := reader.SetOverride(ctx, registry.Override{Service: "api", Address: "127.0.0.1:9001", Maintenance: true}); err != nil {
		t.Fatal(err)
	}
	if err := reader.SetOverride(ctx, registry.Override{Service: "api", ID: b.Instance().ID, Weight: weight(3)}); err != nil {
		t.Fatal(err)
	}
	s, err := reader.Lookup(ctx, "api")
	if err != nil || len(s.Instances) != 1 || s.Instances[0].ID != b.Instance().ID || s.Instances[0].Weight != 3 {
		t.Fatalf("Lookup = %+v, %v; want only %s, at weight 3", s.Instances, err, b.Instance().ID)
	}
	w, err := reader.Watch(ctx, "api")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	first, err := w.Next(ctx)
	if err != nil || len(first.Instances) != 1 || first.Instances[0].Weight != 3 {
		t.Fatalf("first watch snapshot = %+v, %v; want the overrides applied from the start", first.Instances, err)
	}
	// The owner restarts: a new lease, a new ID, the same address.
	if err := a.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	a2, err := owner.Register(ctx, registry.Instance{Service: "api", Address: "127.0.0.1:9001"})
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := rawView(t, srv).Lookup(ctx, "api"); len(raw.Instances) != 2 {
		t.Fatalf("the backend holds %d instances, want 2", len(raw.Instances))
	}
	// A reader without a watch asks the backend: it sees the restart.
	fresh := registry.New(memory.NewDriver(srv))
	defer fresh.Close()
	s, _ = fresh.Lookup(ctx, "api")
	if _, ok := s.Find(a2.Instance().ID); ok || len(s.Instances) != 1 {
		t.Fatalf("after the restart Lookup = %+v; want the address still in maintenance", s.Instances)
	}
	if err := reader.ClearOverride(ctx, "api", "127.0.0.1:9001"); err != nil {
		t.Fatal(err)
	}
	waitSnapshot(t, w, time.Second, "the restarted instance back", func(s registry.Snapshot) bool { _, ok := s.Find(a2.Instance().ID); return ok })
}

// TestDeregisterZombieAndLiveOwner: Deregister removes a zombie's record
// for good, and keeps a live owner's instance out although its
// heartbeats write it back.
func TestDeregisterZombieAndLiveOwner(t *testing.T) {
	srv := memory.NewServer()
	owner := registry.New(memory.NewDriver(srv))
	defer owner.Close()
	op := registry.New(memory.NewDriver(srv))
	defer op.Close()
	raw := rawView(t, srv)
	ctx := t.Context()
	zombie, err := owner.Register(ctx, registry.Instance{Service: "api", Address: "127.0.0.1:9001"}, registry.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	zombie.Abandon() // the owner is gone; the record stays for its hour
	live, err := owner.Register(ctx, registry.Instance{Service: "api", Address: "127.0.0.1:9002"}, registry.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	zid, lid := zombie.Instance().ID, live.Instance().ID

	if err := op.Deregister(ctx, registry.Override{Service: "api", ID: zid, Reason: "zombie"}); err != nil {
		t.Fatal(err)
	}
	s, _ := raw.Lookup(ctx, "api")
	if _, ok := s.Find(zid); ok {
		t.Fatalf("the zombie's record is still in the backend: %+v", s.Instances)
	}

	if err := op.Deregister(ctx, registry.Override{Service: "api", ID: lid}); err != nil {
		t.Fatal(err)
	}
	// The live owner writes its instance back within a TTL…
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, _ := raw.Lookup(ctx, "api")
		if _, ok := s.Find(lid); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the live owner never wrote its instance back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// …and for two TTLs no reader sees it, nor the zombie.
	w, err := op.Watch(ctx, "api")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for end := time.Now().Add(2 * live.TTL()); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		s, err := op.Lookup(ctx, "api")
		if err != nil || len(s.Instances) != 0 {
			t.Fatalf("Lookup after deregister = %+v, %v; want nothing", s.Instances, err)
		}
	}
	if s, _ := raw.Lookup(ctx, "api"); len(s.Instances) != 1 {
		t.Fatalf("the backend holds %+v; want only the live owner's record", s.Instances)
	}
	ovs, err := op.Overrides(ctx, "api")
	if err != nil || len(ovs) != 2 || !ovs[0].Deregistered || ovs[0].Action() != "deregistered" {
		t.Fatalf("Overrides = %+v, %v; want two deregistered tombstones", ovs, err)
	}
}

// TestApplyOverridesNoneDoesNotAllocate: a registry without overrides
// pays nothing per snapshot.
func TestApplyOverridesNoneDoesNotAllocate(t *testing.T) {
	s := registry.Snapshot{Service: "api", Instances: []registry.Instance{{ID: "a", Address: "10.0.0.1:80", Weight: 1}}}
	if n := testing.AllocsPerRun(100, func() { _ = registry.ApplyOverrides(s, nil) }); n != 0 {
		t.Fatalf("applyOverrides without overrides: %v allocations, want 0", n)
	}
}

// TestOverrideKeptThroughOutage: while the backend cannot be read, a
// watch keeps applying the last overrides it read to its stale snapshot,
// and after the outage too.
func TestOverrideKeptThroughOutage(t *testing.T) {
	srv := memory.NewServer()
	owner := registry.New(memory.NewDriver(srv))
	defer owner.Close()
	rdrv := memory.NewDriver(srv)
	reader := registry.New(rdrv)
	defer reader.Close()
	ctx := t.Context()
	l, err := owner.Register(ctx, registry.Instance{Service: "api", Address: "127.0.0.1:9001"})
	if err != nil {
		t.Fatal(err)
	}
	id := l.Instance().ID
	if err := owner.SetOverride(ctx, registry.Override{Service: "api", ID: id, Drain: true}); err != nil {
		t.Fatal(err)
	}
	w, err := reader.Watch(ctx, "api")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	waitSnapshot(t, w, time.Second, "the drain", func(s registry.Snapshot) bool { n, ok := weightOf(s, id); return ok && n == 0 })
	rdrv.SetReachable(false)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := w.Next(cctx)
	if n, ok := weightOf(s, id); !s.Stale || !errors.Is(err, registry.ErrUnavailable) || !ok || n != 0 {
		t.Fatalf("Next while down = %+v, %v; want the instance, stale, still at weight 0", s, err)
	}
	rdrv.SetReachable(true)
	s = waitSnapshot(t, w, 5*time.Second, "fresh again", func(s registry.Snapshot) bool { return !s.Stale })
	if n, ok := weightOf(s, id); !ok || n != 0 {
		t.Fatalf("after the outage %+v; want the drain still applied", s.Instances)
	}
}
