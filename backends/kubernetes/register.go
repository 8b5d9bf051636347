package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/roster-go/roster/internal/backend"

	coordv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/roster-go/roster/registry/driver"
)

// Register implements driver.Driver: it upserts the Lease, then the slice
// that names it.
func (d *Driver) Register(ctx context.Context, inst driver.Instance, ttl time.Duration) (driver.Registration, error) {
	r := &registration{d: d, name: ObjectName(inst.Service, inst.ID), inst: inst.Clone(), ttl: ttl}
	lease, err := r.upsertLease(ctx)
	if err != nil {
		return nil, err
	}
	r.lease, r.leaseUID = lease, lease.UID
	if err := r.upsertSlice(ctx); err != nil {
		return nil, err
	}
	d.startSweeper()
	return r, nil
}

// registration is one instance's Lease and slice.
type registration struct {
	d        *Driver
	name     string
	inst     driver.Instance
	ttl      time.Duration
	leaseUID types.UID
	// lease is the Lease as last written: a heartbeat updates it at its
	// resourceVersion, one call, and reads it again only on a conflict.
	lease *coordv1.Lease
}

func (r *registration) leaseSpec(now time.Time) coordv1.LeaseSpec {
	secs := int32(backend.TTLUnits(r.ttl, time.Second)) // ≤ limits.MaxTTL: no wrap
	t := metav1.NewMicroTime(now)
	return coordv1.LeaseSpec{HolderIdentity: &r.inst.ID, LeaseDurationSeconds: &secs, AcquireTime: &t, RenewTime: &t}
}

// upsertLease creates the Lease, or renews the one already there (keeping
// its UID, so a slice that names it stays valid).
func (r *registration) upsertLease(ctx context.Context) (*coordv1.Lease, error) {
	ctx, cancel := r.d.call(ctx)
	defer cancel()
	leases := r.d.cs.CoordinationV1().Leases(r.d.ns)
	want := &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: r.name, Labels: map[string]string{
			labelLeaseService: r.inst.Service, labelLeaseManagedBy: "roster"}},
		Spec: r.leaseSpec(time.Now()),
	}
	l, err := leases.Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsNotFound(err) { // the namespace: a wrong URL
		return nil, fmt.Errorf("k8s: register: %w: namespace %q: %v", driver.ErrInvalid, r.d.ns, err)
	}
	if !apierrors.IsAlreadyExists(err) {
		return l, wrap("create lease", err)
	}
	cur, err := leases.Get(ctx, r.name, metav1.GetOptions{})
	if err != nil {
		return nil, wrap("get lease", err)
	}
	cur.Labels, cur.Spec = want.Labels, want.Spec
	l, err = leases.Update(ctx, cur, metav1.UpdateOptions{})
	return l, wrap("update lease", err)
}

func (r *registration) slice() (*discoveryv1.EndpointSlice, error) {
	host, port := r.inst.Host(), r.inst.Port()
	js, err := backend.Encode(r.inst)
	if err != nil {
		return nil, fmt.Errorf("k8s: %w: %v", driver.ErrInvalid, err)
	}
	p, ready := int32(port), true
	ctrl := false
	ann := map[string]string{annotationInstance: string(js), annotationLease: string(r.leaseUID)}
	if r.inst.Region != "" {
		ann[AnnotationRegion] = r.inst.Region // for readers of the slice alone
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: r.name,
			Labels: map[string]string{discoveryv1.LabelServiceName: r.inst.Service,
				discoveryv1.LabelManagedBy: managedBy},
			Annotations: ann,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "coordination.k8s.io/v1", Kind: "Lease",
				Name: r.name, UID: r.leaseUID, Controller: &ctrl}},
		},
		AddressType: addressType(host),
		Endpoints:   endpoints(host, ready, r.inst.Zone),
		Ports:       []discoveryv1.EndpointPort{{Port: &p}},
	}, nil
}

// endpoints is the slice's one endpoint, or none for a host name the
// apiserver refuses in an endpoint (one label, over 253 characters…):
// Roster still reads the instance from the annotation, other clients of
// the Service see nothing they could not resolve anyway.
func endpoints(host string, ready bool, z string) []discoveryv1.Endpoint {
	if net.ParseIP(host) == nil && len(validation.IsFullyQualifiedDomainName(field.NewPath("address"), host)) > 0 {
		return nil
	}
	return []discoveryv1.Endpoint{{Addresses: []string{host},
		Conditions: discoveryv1.EndpointConditions{Ready: &ready}, Zone: zone(z)}}
}

func zone(z string) *string {
	if z == "" {
		return nil
	}
	return &z
}

// upsertSlice creates the slice or replaces the one there.
func (r *registration) upsertSlice(ctx context.Context) error {
	want, err := r.slice()
	if err != nil {
		return err
	}
	ctx, cancel := r.d.call(ctx)
	defer cancel()
	slices := r.d.cs.DiscoveryV1().EndpointSlices(r.d.ns)
	_, err = slices.Create(ctx, want, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return wrap("create endpointslice", err)
	}
	cur, err := slices.Get(ctx, r.name, metav1.GetOptions{})
	if err != nil {
		return wrap("get endpointslice", err)
	}
	want.ResourceVersion = cur.ResourceVersion
	_, err = slices.Update(ctx, want, metav1.UpdateOptions{})
	return wrap("update endpointslice", err)
}

// Heartbeat renews the Lease, if it is still ours and alive, and checks
// that the slice still names it: two calls. The client's rate limit
// (200 requests/s by default) is then what bounds one process: about 100
// heartbeats a second, 300 leases at a TTL of 10s.
func (r *registration) Heartbeat(ctx context.Context) error {
	ctx, cancel := r.d.call(ctx)
	defer cancel()
	if err := r.renew(ctx); err != nil {
		return gone(err)
	}
	s, err := r.d.cs.DiscoveryV1().EndpointSlices(r.d.ns).Get(ctx, r.name, metav1.GetOptions{})
	if err != nil {
		return gone(wrap("heartbeat", err))
	}
	if s.Annotations[annotationLease] != string(r.leaseUID) {
		return fmt.Errorf("k8s: heartbeat: %w: endpointslice %s replaced", driver.ErrNotFound, r.name)
	}
	return nil
}

// gone marks a heartbeat's error ErrNotFound when the Lease or slice is
// missing: the registration is gone, the driver's own knowledge, which
// callers of a raw driver (dual's sides) read too.
func gone(err error) error {
	if !errors.Is(err, driver.ErrNotFound) && errorKind(err) == driver.ErrNotFound {
		return fmt.Errorf("%w: %w", err, driver.ErrNotFound)
	}
	return err
}

// renew updates the Lease as last written, at its resourceVersion. A
// conflict means another writer touched it since (a sweeper, a process
// registering the same ID): read it, and renew only a Lease that is still
// ours and alive.
func (r *registration) renew(ctx context.Context) error {
	leases := r.d.cs.CoordinationV1().Leases(r.d.ns)
	l := r.lease
	for range 2 {
		now := time.Now()
		if l.UID != r.leaseUID || !expiry(l).After(now) {
			return fmt.Errorf("k8s: heartbeat: %w: lease %s expired or replaced", driver.ErrNotFound, r.name)
		}
		l = l.DeepCopy()
		t := metav1.NewMicroTime(now)
		l.Spec.RenewTime = &t
		nl, err := leases.Update(ctx, l, metav1.UpdateOptions{})
		if err == nil {
			r.lease = nl
			return nil
		}
		if !apierrors.IsConflict(err) {
			return wrap("heartbeat", err)
		}
		if l, err = leases.Get(ctx, r.name, metav1.GetOptions{}); err != nil {
			return wrap("heartbeat", err)
		}
	}
	return fmt.Errorf("k8s: heartbeat: %w: lease %s keeps changing under another writer", driver.ErrUnavailable, r.name)
}

// Update replaces the stored instance and renews the Lease.
func (r *registration) Update(ctx context.Context, inst driver.Instance) error {
	if err := r.Heartbeat(ctx); err != nil {
		return err
	}
	r.inst = inst.Clone()
	return r.upsertSlice(ctx)
}

// Deregister deletes the slice, then the Lease; either already gone is fine.
func (r *registration) Deregister(ctx context.Context) error {
	ctx, cancel := r.d.call(ctx)
	defer cancel()
	uid := metav1.Preconditions{UID: &r.leaseUID}
	err := r.d.cs.DiscoveryV1().EndpointSlices(r.d.ns).Delete(ctx, r.name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return wrap("deregister", err)
	}
	err = r.d.cs.CoordinationV1().Leases(r.d.ns).Delete(ctx, r.name, metav1.DeleteOptions{Preconditions: &uid})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return wrap("deregister", err)
	}
	return nil
}
