package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"math"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The sweep of lapsed registrations costs per namespace, not per
// process: the drivers that hold registrations elect one sweeper through
// a Lease, sweeperLease. Each round, every other driver reads that one
// Lease. The elected one renews it and reads the namespace's Roster
// Leases, from its informer's cache when it watches (no call at all),
// else with one list served from the apiserver's watch cache. A process
// that holds registrations therefore costs one small call per round,
// whatever the namespace holds.
//
// A sweeper that stops renewing (a crash) is replaced three rounds after
// its last renewal; Close hands the Lease over at once. Sweeping is
// housekeeping only: readers ignore a lapsed registration by themselves.

// sweeperLease elects the namespace's sweeper. It is not an ObjectName
// (those end in 20 hex digits) and carries no Roster label, so neither
// the sweep nor the informers' service index counts it.
const sweeperLease = "roster-sweeper"

// sweeper is the election state of a driver; its sweep goroutine owns it
// (Close reads it once that goroutine has ended).
type sweeper struct {
	id   string         // this driver's holder identity
	held *coordv1.Lease // the sweeper Lease as this driver last wrote it, nil if not held
}

// startSweeper starts the driver's sweeper once it holds a registration.
func (d *Driver) startSweeper() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sweeping || d.closed.Load() {
		return
	}
	d.sweeping = true
	var b [8]byte
	_, _ = rand.Read(b[:])
	d.sw.id = "roster-" + hex.EncodeToString(b[:])
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		every(d.sweepT, d.stopSweep, nil, func() bool { d.sweepRound(); return true })
	}()
}

// sweepRound sweeps if this driver is, or becomes, the sweeper.
func (d *Driver) sweepRound() {
	ctx, cancel := context.WithTimeout(context.Background(), d.reqT)
	defer cancel()
	if d.elect(ctx, time.Now()) {
		d.sweep(ctx)
	}
}

// elect reports whether this driver sweeps this round: it renews the
// sweeper Lease it holds, or reads it and takes it over if it is missing
// or has lapsed. A conflict means another driver won; the next round
// reads the Lease again.
func (d *Driver) elect(ctx context.Context, now time.Time) bool {
	leases := d.cs.CoordinationV1().Leases(d.ns)
	l := d.sw.held
	if l == nil {
		cur, err := leases.Get(ctx, sweeperLease, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			want := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: sweeperLease}}
			d.sweeperSpec(want, now)
			created, err := leases.Create(ctx, want, metav1.CreateOptions{})
			if err != nil {
				return false
			}
			d.sw.held = created
			return true
		case err != nil:
			return false
		case cur.Spec.HolderIdentity != nil && *cur.Spec.HolderIdentity != d.sw.id && expiry(cur).After(now):
			return false // another driver sweeps
		}
		l = cur
	}
	next := l.DeepCopy()
	d.sweeperSpec(next, now)
	nl, err := leases.Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		d.sw.held = nil
		return false
	}
	d.sw.held = nl
	return true
}

// sweeperSpec makes l held by this driver from now, for three rounds.
func (d *Driver) sweeperSpec(l *coordv1.Lease, now time.Time) {
	secs := int32(min(math.Ceil((3 * d.sweepT).Seconds()), math.MaxInt32))
	t := metav1.NewMicroTime(now)
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != d.sw.id {
		l.Spec.AcquireTime = &t
	}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &d.sw.id, &secs, &t
}

// releaseSweeper deletes the sweeper Lease if this driver holds it, so
// that another driver sweeps from its next round. The preconditions
// leave a Lease another driver has taken since.
func (d *Driver) releaseSweeper() {
	l := d.sw.held
	if l == nil {
		return
	}
	d.sw.held = nil
	ctx, cancel := context.WithTimeout(context.Background(), d.reqT)
	defer cancel()
	rv := l.ResourceVersion
	_ = d.cs.CoordinationV1().Leases(d.ns).Delete(ctx, sweeperLease, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &l.UID, ResourceVersion: &rv}})
}

// sweep deletes the Leases and slices of expired registrations in the
// namespace, whoever made them. Preconditions make a renewal or a new
// registration racing with it win: the Lease is deleted only at the
// resourceVersion found expired, the slice only if it still names that
// Lease at the version read. A stale read (the informer's cache, the
// apiserver's watch cache) therefore deletes nothing live.
func (d *Driver) sweep(ctx context.Context) {
	now := time.Now()
	for _, l := range d.rosterLeases(ctx) {
		if expiry(l).After(now) {
			continue
		}
		d.sweepOne(ctx, l)
	}
}

// rosterLeases returns the namespace's Roster Leases: from the watch
// informer's cache when it has synced, else from one list that the
// apiserver answers from its watch cache (resourceVersion 0), not etcd.
func (d *Driver) rosterLeases(ctx context.Context) []*coordv1.Lease {
	sel := labels.SelectorFromSet(labels.Set{labelLeaseManagedBy: "roster"})
	d.mu.Lock()
	inf := d.inf
	d.mu.Unlock()
	if inf != nil && inf.leases.HasSynced() {
		var out []*coordv1.Lease
		for _, o := range inf.leases.GetStore().List() {
			if l, ok := o.(*coordv1.Lease); ok && sel.Matches(labels.Set(l.Labels)) {
				out = append(out, l)
			}
		}
		return out
	}
	list, err := d.cs.CoordinationV1().Leases(d.ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String(), ResourceVersion: "0"})
	if err != nil {
		return nil // the next round tries again
	}
	out := make([]*coordv1.Lease, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out
}

func (d *Driver) sweepOne(ctx context.Context, l *coordv1.Lease) {
	slices := d.cs.DiscoveryV1().EndpointSlices(d.ns)
	s, err := slices.Get(ctx, l.Name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return
	}
	rv := l.ResourceVersion
	if err := d.cs.CoordinationV1().Leases(d.ns).Delete(ctx, l.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &l.UID, ResourceVersion: &rv}}); err != nil {
		return
	}
	if s != nil && s.Annotations[annotationLease] == string(l.UID) {
		srv := s.ResourceVersion
		slices.Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &srv}})
	}
}
