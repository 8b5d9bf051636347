package etcd

import (
	"errors"
	"fmt"
	"testing"

	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// Registrations with one TTL share one lease: deregistering one keeps the
// others' keys; losing the lease makes every heartbeat report
// ErrNotFound, and registering again grants one new lease for all.
func TestSharedLease(t *testing.T) {
	c := startServer(t)
	d := newTestDriver(t, c, 0)
	ctx := t.Context()
	regs := make([]driver.Registration, 5)
	for i := range regs {
		regs[i] = register(t, d, "shared", fmt.Sprintf("i%d", i))
	}
	if g := d.LeaseGrants(); g != 1 {
		t.Fatalf("%d leases granted for 5 registrations with one TTL, want 1", g)
	}
	if err := regs[0].Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	for i, r := range regs[1:] {
		if err := r.Heartbeat(ctx); err != nil {
			t.Fatalf("heartbeat %d after another deregistered: %v", i+1, err)
		}
	}
	if s, _ := d.List(ctx, "shared"); len(s.Instances) != 4 {
		t.Fatalf("after one deregistration: %v", ids(s))
	}
	lease := regs[1].(*registration).current()
	if _, err := d.cli.Revoke(ctx, lease.id); err != nil {
		t.Fatal(err)
	}
	for i, r := range regs[1:] {
		if err := r.Heartbeat(ctx); !errors.Is(err, registry.ErrNotFound) {
			t.Fatalf("heartbeat %d on a revoked lease = %v, want ErrNotFound", i+1, err)
		}
		regs[i+1] = register(t, d, "shared", fmt.Sprintf("i%d", i+1)) // as the lease engine does
	}
	if g := d.LeaseGrants(); g != 2 {
		t.Fatalf("%d leases granted after one was lost, want 2", g)
	}
	for i, r := range regs[1:] {
		if err := r.Heartbeat(ctx); err != nil {
			t.Fatalf("heartbeat %d on the new lease: %v", i+1, err)
		}
	}
	if s, _ := d.List(ctx, "shared"); len(s.Instances) != 4 {
		t.Fatalf("after the lease was replaced: %v", ids(s))
	}
	for _, r := range regs[1:] {
		if err := r.Deregister(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(d.leases.byTTL); n != 0 {
		t.Fatalf("%d leases held after every registration left", n)
	}
}
