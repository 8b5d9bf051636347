package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

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
	if g := d.leaseGrants(); g != 1 {
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
	renewalDue(lease) // the loss shows at the next renewal
	for i, r := range regs[1:] {
		if err := r.Heartbeat(ctx); kindOf(d, err) != driver.ErrNotFound {
			t.Fatalf("heartbeat %d on a revoked lease = %v, want ErrNotFound", i+1, err)
		}
		regs[i+1] = register(t, d, "shared", fmt.Sprintf("i%d", i+1)) // as the lease engine does
	}
	if g := d.leaseGrants(); g != 2 {
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

// rpcCount counts a driver's unary calls by method.
type rpcCount struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *rpcCount) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.mu.Lock()
	c.n[method]++
	c.mu.Unlock()
	return invoke(ctx, method, req, reply, cc, opts...)
}

// take returns the count of method and starts it again from 0.
func (c *rpcCount) take(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n[method]
	c.n[method] = 0
	return n
}

// renewalDue makes the next heartbeat on l renew it, as TTL/6 after the
// last renewal would.
func renewalDue(l *sharedLease) {
	l.renewed.Store(mono() - int64(time.Hour))
}

// Heartbeats of N registrations on one lease read no key: one look-up of
// the lease's keys per renewal tells every registration whether its key
// is still there. A key deleted, or overwritten without the lease, is
// ErrNotFound at the first heartbeat after the next renewal; a key put
// after that look-up is not.
func TestHeartbeatsReadNoKeys(t *testing.T) {
	c := startServer(t)
	rpcs := &rpcCount{n: map[string]int{}}
	d, err := New(Options{Prefix: "/t", Client: clientv3.Config{Endpoints: c.Endpoints(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(rpcs.intercept)}}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := t.Context()
	const n = 20
	regs := make([]driver.Registration, n)
	for i := range regs {
		regs[i] = register(t, d, "keys", fmt.Sprintf("i%d", i))
	}
	l := regs[0].(*registration).current()
	renewalDue(l)
	rpcs.take(rangeMethod)
	rpcs.take(ttlMethod)
	for i, r := range regs {
		if err := r.Heartbeat(ctx); err != nil {
			t.Fatalf("heartbeat %d: %v", i, err)
		}
	}
	if got := rpcs.take(rangeMethod); got != 0 {
		t.Errorf("%d heartbeats made %d range reads, want 0", n, got)
	}
	if got := rpcs.take(ttlMethod); got != 1 {
		t.Errorf("%d heartbeats made %d lease look-ups, want 1 (one renewal)", n, got)
	}

	deleted, overwritten := regs[3].(*registration), regs[5].(*registration)
	if _, err := d.cli.Delete(ctx, deleted.key); err != nil {
		t.Fatal(err)
	}
	if _, err := d.cli.Put(ctx, overwritten.key, `{"address":"10.9.9.9:1"}`); err != nil {
		t.Fatal(err)
	}
	renewalDue(l)
	for i, r := range regs {
		err := r.Heartbeat(ctx)
		switch r {
		case deleted, overwritten:
			if !errors.Is(err, registry.ErrNotFound) {
				t.Errorf("heartbeat %d after its key was changed behind its back = %v, want ErrNotFound", i, err)
			}
		default:
			if err != nil {
				t.Errorf("heartbeat %d: %v", i, err)
			}
		}
	}
	// The lease engine registers again; the look-up it follows predates
	// the put, so it does not count against it.
	again := register(t, d, "keys", deleted.id)
	if err := again.Heartbeat(ctx); err != nil {
		t.Fatalf("heartbeat after registering again: %v", err)
	}
	renewalDue(l)
	if err := again.Heartbeat(ctx); err != nil {
		t.Fatalf("heartbeat after registering again, renewed: %v", err)
	}
}

const (
	rangeMethod = "/etcdserverpb.KV/Range"
	ttlMethod   = "/etcdserverpb.Lease/LeaseTimeToLive"
)
