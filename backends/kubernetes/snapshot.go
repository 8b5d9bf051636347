package kubernetes

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/roster-go/roster/internal/backend"

	coordv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/roster-go/roster/registry/driver"
)

// instances turns a service's slices into its live instances at now, given
// the Leases by name and how to read other controllers' slices (p). It
// also returns when the earliest of the Leases it relied on lapses (zero
// if none), when the answer will change by itself.
func instances(service string, slices []*discoveryv1.EndpointSlice, leases map[string]*coordv1.Lease, p platform, now time.Time) ([]driver.Instance, time.Time) {
	var out []backend.Candidate
	var next time.Time
	for _, s := range slices {
		if s.Labels[discoveryv1.LabelServiceName] != service {
			continue
		}
		if s.Labels[discoveryv1.LabelManagedBy] != managedBy {
			for _, in := range p.instances(service, s) {
				out = append(out, backend.Candidate{Instance: in}) // no lease of Roster's vouches for it
			}
			continue
		}
		in, until, ok := rosterInstance(service, s, leases[s.Name], now)
		if !ok {
			continue
		}
		out = append(out, backend.Candidate{Instance: in, Standing: backend.Live | backend.Own}) // its Lease is held
		if next.IsZero() || until.Before(next) {
			next = until
		}
	}
	// A Pod in two slices while the controller moves it is one record
	// twice; a slice naming a Roster instance's ID loses to its Lease.
	return backend.Resolve(service, out), next
}

// rosterInstance decodes a Roster slice, live only while its own Lease is.
func rosterInstance(service string, s *discoveryv1.EndpointSlice, l *coordv1.Lease, now time.Time) (driver.Instance, time.Time, bool) {
	var in driver.Instance
	if l == nil || string(l.UID) != s.Annotations[annotationLease] {
		return in, time.Time{}, false
	}
	until := expiry(l)
	if !until.After(now) {
		return in, time.Time{}, false
	}
	if err := json.Unmarshal([]byte(s.Annotations[annotationInstance]), &in); err != nil || in.Service != service || in.ID == "" {
		return in, time.Time{}, false
	}
	return in, until, true
}

// List implements driver.Driver with a consistent read of the apiserver.
func (d *Driver) List(ctx context.Context, service string) (driver.Snapshot, error) {
	sl, leases, rev, err := d.read(ctx, discoveryv1.LabelServiceName+"="+service, labelLeaseService+"="+service)
	if err != nil {
		return driver.Snapshot{}, err
	}
	p, err := d.listPlatform(ctx, sl)
	if err != nil {
		return driver.Snapshot{}, err
	}
	now := time.Now()
	ins, _ := instances(service, sl, leases, p, now)
	return driver.Snapshot{Service: service, Instances: ins, Revision: rev, At: now}, nil
}

// Services implements driver.Driver.
func (d *Driver) Services(ctx context.Context) ([]string, error) {
	sl, leases, _, err := d.read(ctx, discoveryv1.LabelServiceName, labelLeaseService)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []string
	for _, s := range sl {
		svc := s.Labels[discoveryv1.LabelServiceName]
		if slices.Contains(out, svc) {
			continue
		}
		if ins, _ := instances(svc, []*discoveryv1.EndpointSlice{s}, leases, platform{port: d.port}, now); len(ins) > 0 {
			out = append(out, svc)
		}
	}
	slices.Sort(out)
	return out, nil
}

// read lists the slices and Leases matching the selectors.
func (d *Driver) read(ctx context.Context, sliceSel, leaseSel string) ([]*discoveryv1.EndpointSlice, map[string]*coordv1.Lease, uint64, error) {
	ctx, cancel := d.call(ctx)
	defer cancel()
	sl, err := d.cs.DiscoveryV1().EndpointSlices(d.ns).List(ctx, metav1.ListOptions{LabelSelector: sliceSel})
	if err != nil {
		return nil, nil, 0, wrap("list endpointslices", err)
	}
	ll, err := d.cs.CoordinationV1().Leases(d.ns).List(ctx, metav1.ListOptions{LabelSelector: leaseSel})
	if err != nil {
		return nil, nil, 0, wrap("list leases", err)
	}
	out := make([]*discoveryv1.EndpointSlice, len(sl.Items))
	for i := range sl.Items {
		out[i] = &sl.Items[i]
	}
	leases := make(map[string]*coordv1.Lease, len(ll.Items))
	for i := range ll.Items {
		leases[ll.Items[i].Name] = &ll.Items[i]
	}
	return out, leases, max(parseRV(sl.ResourceVersion), parseRV(ll.ResourceVersion)), nil
}
