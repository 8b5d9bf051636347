package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/roster-go/roster/registry"
)

func init() {
	// Appended here rather than listed in checks.go: a check of its own
	// file, run in the parallel group (Run and Names do not depend on the
	// position).
	checks = append(checks, check{name: "TenantIsolation", run: tenantIsolation,
		needs: "Tenants", needsOK: has1[Tenants]})
}

// tenants are the two registries of each tenant and the names they use.
type tenantPair struct {
	a, a2, b   *registry.Registry // a2: a second client of tenant a, the observer
	svcA, svcB string             // owned by a and b
	shared     string             // registered by both; "" unless TenantsShareNames
}

// tenantIsolation: two tenants never see or touch each other's instances
// — in Lookup, Watch and Services — and tenant b cannot remove tenant a's
// instance by its ID. Tenant a's second client sees a's instances, so the
// check cannot pass by seeing nothing at all.
func tenantIsolation(t TB, s *suite) {
	p := s.openTenants(t)
	la := s.register(t, p.a, s.inst(p.svcA))
	s.register(t, p.b, s.inst(p.svcB))
	var sharedA *registry.Lease
	if p.shared != "" {
		sharedA = s.register(t, p.a, s.inst(p.shared))
		s.register(t, p.b, s.inst(p.shared))
	}
	wb := s.watch(t, p.b, p.svcA)
	eventually(t, s.cfg.Propagation, "tenant a's other client sees a's instance", func() (bool, string) {
		got, err := lookupIDs(t, p.a2, p.svcA)
		return err == nil && sortedEqual(got, []string{la.Instance().ID}), fmt.Sprint(got, err)
	})
	if sharedA != nil {
		eventually(t, s.cfg.Propagation, "tenant a sees only its own instance of a name both use", func() (bool, string) {
			got, err := lookupIDs(t, p.a2, p.shared)
			return err == nil && sortedEqual(got, []string{sharedA.Instance().ID}), fmt.Sprint(got, err)
		})
	}
	checkUnseen(t, s, p, wb)
	checkUntouchable(t, s, p, la.Instance())
	if sharedA != nil {
		checkUntouchable(t, s, p, sharedA.Instance())
	}
}

func (s *suite) openTenants(t TB) tenantPair {
	h := s.h.(Tenants)
	open := func(tenant string) *registry.Registry {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		r, err := s.wrap(h.MakeTenantDriver(ctx, tenant))
		if err != nil {
			t.Fatalf("Tenants.MakeTenantDriver(%s): %v", tenant, err)
		}
		t.Cleanup(func() { _ = r.Close() })
		return r
	}
	base := service("iso")
	p := tenantPair{a: open("tenanta"), a2: open("tenanta"), b: open("tenantb"),
		svcA: "tenanta-" + base, svcB: "tenantb-" + base}
	if h.TenantsShareNames() {
		p.shared = base
	}
	return p
}

// checkUnseen: b's lookup, watch and service list show nothing of a's,
// and a's show nothing of b's.
func checkUnseen(t TB, s *suite, p tenantPair, wb *registry.Watcher) {
	t.Helper()
	if got, err := lookupIDs(t, p.b, p.svcA); err != nil || len(got) != 0 {
		t.Errorf("tenant b looks up tenant a's service: %v, %v; want nothing", got, err)
	}
	if got, err := lookupIDs(t, p.a2, p.svcB); err != nil || len(got) != 0 {
		t.Errorf("tenant a looks up tenant b's service: %v, %v; want nothing", got, err)
	}
	for _, c := range []struct {
		tenant     string
		r          *registry.Registry
		own, other string
	}{{"a", p.a2, p.svcA, p.svcB}, {"b", p.b, p.svcB, p.svcA}} {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		names, err := c.r.Services(ctx)
		cancel()
		if err != nil || slices.Contains(names, c.other) || !slices.Contains(names, c.own) {
			t.Errorf("tenant %s's Services() = %v, %v; want its own %s and not %s", c.tenant, names, err, c.own, c.other)
		}
	}
	// Tenant b watches tenant a's service, which holds an instance: what
	// the watch delivers within the propagation bound must be empty.
	deadline := time.Now().Add(s.cfg.Propagation)
	for left := time.Until(deadline); left > 0; left = time.Until(deadline) {
		sn, err := next(t, wb, left)
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if len(sn.Instances) != 0 {
			t.Errorf("tenant b's watch of tenant a's service delivered %v", ids(sn))
			break
		}
	}
}

// checkUntouchable: tenant b registering an instance with the ID of a's,
// then deregistering it, leaves a's instance in place. Where tenants
// split one catalog, b may not register in a's service at all.
func checkUntouchable(t TB, s *suite, p tenantPair, victim registry.Instance) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	impostor := registry.Instance{ID: victim.ID, Service: victim.Service, Address: addr()}
	l, err := p.b.Register(ctx, impostor, registry.WithTTL(s.cfg.TTL))
	switch {
	case err == nil:
		if derr := l.Deregister(ctx); derr != nil {
			t.Errorf("tenant b deregistering its own %s: %v", victim.ID, derr)
		}
	case !errors.Is(err, registry.ErrInvalid):
		t.Errorf("tenant b registering %s in %s = %v; want success in its own namespace, or ErrInvalid (not permitted)", victim.ID, victim.Service, err)
	}
	// A negative: a's instance must stay, unchanged, for as long as b's
	// deregistration could take to propagate.
	deadline := time.Now().Add(s.cfg.Propagation)
	for time.Now().Before(deadline) {
		sn, err := p.a2.Lookup(ctx, victim.Service)
		in, ok := sn.Find(victim.ID)
		if err != nil || !ok || in.Address != victim.Address {
			t.Fatalf("tenant b's register and deregister of ID %s touched tenant a's instance: %v, %v", victim.ID, sn.Instances, err)
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			t.Fatalf("%v", ctx.Err())
		}
	}
}
