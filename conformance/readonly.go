package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/roster-go/roster/registry"
)

// readOnlyReason is the skip message of every check a read-only backend
// cannot run.
const readOnlyReason = "n/a: read-only: the check registers through the Registry (leases, heartbeats, " +
	"deregistration), which a read-only backend cannot do; its instances come from the server's own API"

// readOnlyChecks are the checks that run on a read-only backend, by the
// name of the check they stand for: the same contract, with instances
// published through the server's own API instead of registered. Checks
// that register nothing run as they are.
var readOnlyChecks = map[string]func(TB, *suite, ReadOnly){
	"RoundTripEveryField":       roRoundTrip,
	"InvalidInputRejected":      roRegisterRejected,
	"UnknownServiceIsEmpty":     func(t TB, s *suite, _ ReadOnly) { unknownServiceEmpty(t, s) },
	"WatchCloseUnblocksNext":    func(t TB, s *suite, _ ReadOnly) { watchCloseUnblocks(t, s) },
	"WatchInitialSnapshot":      roWatchInitial,
	"WatchInitialEmpty":         roWatchInitialEmpty,
	"WatchAddUpdateRemove":      roWatchAddUpdateRemove,
	"WatchLastInstanceRemoval":  roWatchLastRemoval,
	"WatchSeveralChangesAtOnce": roWatchSeveral,
	"WatchIgnoresOtherServices": roWatchOtherServices,
	"LookupFromWatchCache":      roLookupFromCache,
	"Endpoints":                 roEndpoints,
	"UndialableRecordNotServed": roUndialableNotServed,
}

func (s *suite) runReadOnly(t TB, c check, ro ReadOnly) {
	run, ok := readOnlyChecks[c.name]
	if !ok {
		t.Skipf("%s", readOnlyReason)
	}
	run(t, s, ro)
}

// publish publishes in through ro and unpublishes it when the check ends.
func publish(t TB, ro ReadOnly, in registry.Instance) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	id, err := ro.Publish(ctx, in)
	if err != nil {
		t.Fatalf("Harness.Publish(%s at %s): %v", in.Service, in.Address, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ro.Unpublish(ctx, in)
	})
	return id
}

func unpublish(t TB, ro ReadOnly, in registry.Instance) {
	t.Helper()
	if err := ro.Unpublish(t.Context(), in); err != nil {
		t.Fatalf("Harness.Unpublish(%s at %s): %v", in.Service, in.Address, err)
	}
}

// roRoundTrip: what a read-only backend carries — address and weight —
// reaches Lookup as published.
func roRoundTrip(t TB, s *suite, ro ReadOnly) {
	r := s.open(t)
	svc := service("rt")
	in := s.inst(svc)
	in.Weight = 37
	id := publish(t, ro, in)
	eventually(t, s.cfg.Propagation, "published instance visible", func() (bool, string) {
		snap, err := r.Lookup(t.Context(), svc)
		if err != nil || len(snap.Instances) != 1 {
			return false, fmt.Sprint(ids(snap), err)
		}
		got := snap.Instances[0]
		return got.ID == id && got.Address == in.Address && got.Weight == in.Weight && got.Service == svc,
			fmt.Sprintf("got %+v, want ID %s at %s weight %d", got, id, in.Address, in.Weight)
	})
}

// roRegisterRejected: Register on a read-only backend is invalid input,
// says so, and leaves nothing behind.
func roRegisterRejected(t TB, s *suite, _ ReadOnly) {
	r := s.open(t)
	svc := service("ro")
	_, err := r.Register(t.Context(), s.inst(svc))
	if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("Register on a read-only backend = %v, want ErrInvalid saying read-only", err)
	}
	if ids, err := lookupIDs(t, r, svc); err != nil || len(ids) != 0 {
		t.Fatalf("after a refused Register: %v, %v", ids, err)
	}
}

func roWatchInitial(t TB, s *suite, ro ReadOnly) {
	r := s.open(t)
	svc := service("winit")
	var want []string
	for range 3 {
		want = append(want, publish(t, ro, s.inst(svc)))
	}
	s.waitCount(t, r, svc, 3, "published")
	w := s.watch(t, s.observer(t), svc)
	sn, err := next(t, w, s.cfg.Propagation)
	if err != nil {
		t.Fatalf("first Next: %v", err)
	}
	if !sortedEqual(ids(sn), want) || sn.Service != svc || sn.Stale || sn.At.IsZero() {
		t.Fatalf("first Next = %s (service %q), want the full current set %v", describe(&sn), sn.Service, want)
	}
}

func roWatchInitialEmpty(t TB, s *suite, ro ReadOnly) {
	svc := service("wempty")
	w := s.watch(t, s.observer(t), svc)
	sn, err := next(t, w, s.cfg.Propagation)
	if err != nil || len(sn.Instances) != 0 {
		t.Fatalf("first Next on a service with no instances = %v, %v; want an empty snapshot", ids(sn), err)
	}
	id := publish(t, ro, s.inst(svc))
	waitWatch(t, w, s.cfg.Propagation, "first instance", func(sn registry.Snapshot) bool { return has(sn, id) })
}

func roWatchAddUpdateRemove(t TB, s *suite, ro ReadOnly) {
	svc := service("waur")
	w := s.watch(t, s.observer(t), svc)
	if _, err := next(t, w, s.cfg.Propagation); err != nil {
		t.Fatal(err)
	}
	a, b := s.inst(svc), s.inst(svc)
	a.Weight, b.Weight = 10, 10
	ida, idb := publish(t, ro, a), publish(t, ro, b)
	waitWatch(t, w, s.cfg.Propagation, "two additions", func(sn registry.Snapshot) bool { return has(sn, ida) && has(sn, idb) })
	a.Weight = 20
	publish(t, ro, a)
	waitWatch(t, w, s.cfg.Propagation, "weight update", func(sn registry.Snapshot) bool {
		i, ok := sn.Find(ida)
		return ok && i.Weight == 20
	})
	unpublish(t, ro, b)
	waitWatch(t, w, s.cfg.Propagation, "removal", func(sn registry.Snapshot) bool { return has(sn, ida) && !has(sn, idb) })
}

// roWatchSeveral: several instances published at once, then withdrawn
// at once, reach the watcher as the exact state.
func roWatchSeveral(t TB, s *suite, ro ReadOnly) {
	svc := service("wmany")
	keep := publish(t, ro, s.inst(svc))
	w := s.watch(t, s.observer(t), svc)
	const n = 10
	ins := make([]registry.Instance, n)
	want := []string{keep}
	for i := range ins {
		ins[i] = s.inst(svc)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = ro.Unpublish(ctx, ins[i])
		})
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, in := range ins {
		wg.Go(func() {
			id, err := ro.Publish(t.Context(), in)
			if err != nil {
				t.Errorf("Harness.Publish(%s): %v", in.Address, err)
			}
			mu.Lock()
			want = append(want, id)
			mu.Unlock()
		})
	}
	wg.Wait()
	exactly := func(want []string) func(registry.Snapshot) bool {
		return func(sn registry.Snapshot) bool { return sortedEqual(ids(sn), want) }
	}
	waitWatch(t, w, 2*s.cfg.Propagation, fmt.Sprintf("%d published at once", n), exactly(want))
	for _, in := range ins {
		wg.Go(func() {
			if err := ro.Unpublish(t.Context(), in); err != nil {
				t.Errorf("Harness.Unpublish(%s): %v", in.Address, err)
			}
		})
	}
	wg.Wait()
	waitWatch(t, w, 2*s.cfg.Propagation, fmt.Sprintf("%d withdrawn at once", n), exactly([]string{keep}))
}

func roWatchLastRemoval(t TB, s *suite, ro ReadOnly) {
	svc := service("wlast")
	in := s.inst(svc)
	id := publish(t, ro, in)
	w := s.watch(t, s.observer(t), svc)
	waitWatch(t, w, s.cfg.Propagation, "the only instance", func(sn registry.Snapshot) bool { return has(sn, id) })
	unpublish(t, ro, in)
	sn := waitWatch(t, w, s.cfg.Propagation, "removal of the last instance (an empty snapshot)",
		func(sn registry.Snapshot) bool { return len(sn.Instances) == 0 })
	if sn.Instances == nil {
		t.Errorf("empty snapshot has a nil list; want an explicit empty one")
	}
}

func roWatchOtherServices(t TB, s *suite, ro ReadOnly) {
	svc, other := service("wquiet"), service("wnoisy")
	id := publish(t, ro, s.inst(svc))
	w := s.watch(t, s.observer(t), svc)
	waitWatch(t, w, s.cfg.Propagation, "instance", func(sn registry.Snapshot) bool { return has(sn, id) })
	for range 5 {
		publish(t, ro, s.inst(other))
	}
	ctx, cancel := context.WithTimeout(t.Context(), s.cfg.Propagation)
	defer cancel()
	if sn, err := w.Next(ctx); err == nil {
		t.Fatalf("churn on another service delivered %s to a watcher of %s", describe(&sn), svc)
	}
}

func roLookupFromCache(t TB, s *suite, ro ReadOnly) {
	r := s.open(t)
	svc := service("cache")
	id := publish(t, ro, s.inst(svc))
	w := s.watch(t, r, svc)
	waitWatch(t, w, s.cfg.Propagation, "instance", func(sn registry.Snapshot) bool { return has(sn, id) })
	a, errA := r.Lookup(t.Context(), svc)
	b, errB := r.Lookup(t.Context(), svc)
	if errA != nil || errB != nil || len(a.Instances) != 1 || len(b.Instances) != 1 || &a.Instances[0] != &b.Instances[0] {
		t.Fatalf("Lookup with a live watch did not answer from the cache (%v, %v)", errA, errB)
	}
}
