package etcd

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// leasePool holds one shared lease per TTL: every registration of the
// process with that TTL attaches its key to it. Heartbeats of N
// registrations then cost one keep-alive per renewal period, not N, and
// the server keeps one lease, not N.
//
// A registration whose heartbeats stop while others on its lease go on (a
// Lease abandoned, a stuck caller) must still expire within about its
// TTL: each keep-alive first deletes the keys of registrations that have
// not beaten for a TTL, as the server would have expired a lease of their
// own.
//
// A lease the server lost (expired during a partition, wiped) is dropped
// from the pool: the next Register grants a new one, and the heartbeat of
// every key on the old lease reports ErrNotFound, so the lease engine
// registers each again, on the new lease. The lease is revoked when its
// last registration deregisters, never before: deregistering one instance
// must not take the others' keys with it.
type leasePool struct {
	mu     sync.Mutex
	byTTL  map[int64]*sharedLease
	grants int // leases granted, for tests
}

type sharedLease struct {
	ttl  int64 // seconds
	id   clientv3.LeaseID
	refs int // registrations attached and not deregistered; leasePool.mu
	// gone: dropped from the pool (lost or revoked); set under
	// leasePool.mu, read by heartbeats without it.
	gone atomic.Bool

	kmu sync.Mutex // one keep-alive at a time
	// renewed is the start of the last successful keep-alive, keysAt the
	// start of the key listing that followed it (mono). A heartbeat reads
	// both without kmu: a thousand registrations beating on one lease
	// must not queue on one lock.
	renewed atomic.Int64
	keysAt  atomic.Int64

	bmu     sync.Mutex
	members map[*registration]struct{} // registrations on the lease
	byKey   map[string][]*registration // the same, by key (one, unless an ID is registered twice)
}

// epoch is the origin of mono.
var epoch = time.Now()

// mono is the time since epoch on the monotonic clock: one int64, so
// that a heartbeat stores and compares times with atomics.
func mono() int64 { return int64(time.Since(epoch)) }

// join puts r on the lease before its key is put: a key listing that
// sees the key then sees r. Its last beat is now.
func (l *sharedLease) join(r *registration) {
	r.beatAt.Store(mono())
	l.bmu.Lock()
	defer l.bmu.Unlock()
	if l.members == nil {
		l.members, l.byKey = map[*registration]struct{}{}, map[string][]*registration{}
	}
	if _, ok := l.members[r]; ok {
		return
	}
	l.members[r] = struct{}{}
	l.byKey[r.key] = append(l.byKey[r.key], r)
}

func (l *sharedLease) leave(r *registration) {
	l.bmu.Lock()
	defer l.bmu.Unlock()
	if _, ok := l.members[r]; !ok {
		return
	}
	delete(l.members, r)
	rs := slices.DeleteFunc(l.byKey[r.key], func(x *registration) bool { return x == r })
	if len(rs) == 0 {
		delete(l.byKey, r.key)
	} else {
		l.byKey[r.key] = rs
	}
}

// silent returns the registrations that have not beaten for a TTL.
func (l *sharedLease) silent() []*registration {
	l.bmu.Lock()
	defer l.bmu.Unlock()
	var out []*registration
	cut := mono() - int64(time.Duration(l.ttl)*time.Second)
	for r := range l.members {
		if r.beatAt.Load() <= cut {
			out = append(out, r)
		}
	}
	return out
}

// acquire returns the lease for ttl, granting it if there is none, and
// counts one more registration on it.
func (d *Driver) acquire(ctx context.Context, op string, ttl int64) (*sharedLease, error) {
	p := &d.leases
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.byTTL[ttl]; l != nil {
		l.refs++
		return l, nil
	}
	// Granting under the lock: concurrent first registrations of one TTL
	// share the one grant.
	c, cancel := d.op(ctx)
	defer cancel()
	g, err := d.cli.Grant(c, ttl)
	if err != nil {
		return nil, d.wrap(ctx, op+": grant lease", err)
	}
	if p.byTTL == nil {
		p.byTTL = map[int64]*sharedLease{}
	}
	l := &sharedLease{ttl: ttl, id: g.ID, refs: 1}
	l.renewed.Store(mono())
	p.byTTL[ttl] = l
	p.grants++
	return l, nil
}

// release counts one registration less on l, and revokes l after the
// last.
func (d *Driver) release(ctx context.Context, l *sharedLease) {
	p := &d.leases
	p.mu.Lock()
	l.refs--
	last := l.refs <= 0 && p.byTTL[l.ttl] == l
	if last {
		delete(p.byTTL, l.ttl)
		l.gone.Store(true)
	}
	p.mu.Unlock()
	if !last {
		return
	}
	c, cancel := d.op(ctx)
	defer cancel()
	// Best effort: a lease without keys expires alone.
	_, _ = d.cli.Revoke(c, l.id)
}

// isCurrent reports whether l is still the pool's lease for its TTL: a
// lease dropped or revoked is gone from the server, with its keys.
func (d *Driver) isCurrent(l *sharedLease) bool { return !l.gone.Load() }

// drop forgets l after the server lost it: the next acquire grants anew.
func (d *Driver) drop(l *sharedLease) {
	p := &d.leases
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byTTL[l.ttl] == l {
		delete(p.byTTL, l.ttl)
	}
	l.gone.Store(true)
}

// keepAlive renews l unless it was renewed within the last sixth of its
// TTL (by another registration's heartbeat: the lease engine beats every
// TTL/3, so each lease is renewed at least that often). Concurrent
// callers share one call.
func (d *Driver) keepAlive(ctx context.Context, op string, l *sharedLease) error {
	fresh := int64(time.Duration(l.ttl) * time.Second / 6)
	if mono()-l.renewed.Load() < fresh {
		return nil // without the lock: most heartbeats
	}
	l.kmu.Lock()
	defer l.kmu.Unlock()
	start := mono()
	if start-l.renewed.Load() < fresh {
		return nil // renewed while this one waited
	}
	for _, r := range l.silent() {
		if err := r.expire(ctx); err != nil {
			return err
		}
	}
	c, cancel := d.op(ctx)
	defer cancel()
	if err := d.renewer.renew(c, d.cli, l.id); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			d.drop(l)
		}
		return d.wrap(ctx, op+": keep-alive", err)
	}
	if err := d.readKeys(c, ctx, op, l); err != nil {
		return err
	}
	l.renewed.Store(start)
	return nil
}

// readKeys asks the server which keys it holds on l: one look-up per
// lease and renewal instead of a read per registration and heartbeat.
// The leader answers from its lease table, in memory, after applying
// every committed write, so a key put before the look-up began is in the
// answer unless something removed it since. l.kmu is held.
func (d *Driver) readKeys(c, parent context.Context, op string, l *sharedLease) error {
	at := mono()
	resp, err := d.cli.TimeToLive(c, l.id, clientv3.WithAttachedKeys())
	if err == nil && resp.TTL < 0 {
		err = rpctypes.ErrLeaseNotFound // the server's answer for an unknown lease
	}
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			d.drop(l)
		}
		return d.wrap(parent, op+": lease keys", err)
	}
	l.bmu.Lock()
	for _, k := range resp.Keys {
		for _, r := range l.byKey[string(k)] { // the conversion allocates nothing
			r.seen.Store(at)
		}
	}
	l.bmu.Unlock()
	// After every seen: a heartbeat that reads this keysAt reads them.
	l.keysAt.Store(at)
	return nil
}

// lost reports whether the server's last key listing lacked r's key,
// put at putAt. A listing from before the put says nothing about it.
func (l *sharedLease) lost(r *registration) bool {
	at := l.keysAt.Load()
	return at > r.putAt.Load() && r.seen.Load() < at
}

// leaseGrants reports how many leases the driver has granted: one per TTL
// value, plus one after each lease the server lost.
func (d *Driver) leaseGrants() int {
	d.leases.mu.Lock()
	defer d.leases.mu.Unlock()
	return d.leases.grants
}
