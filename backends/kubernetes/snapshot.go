package kubernetes

import (
	"context"
	"encoding/json"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/roster-go/roster/internal/backend"

	coordv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/roster-go/roster/registry/driver"
)

// instances turns a service's slices into its live instances at now, given
// the Leases by name. It also returns when the earliest of the Leases it
// relied on lapses (zero if none), when the answer will change by itself.
func instances(service string, slices []*discoveryv1.EndpointSlice, leases map[string]*coordv1.Lease, now time.Time) ([]driver.Instance, time.Time) {
	var out []backend.Candidate
	var next time.Time
	for _, s := range slices {
		if s.Labels[discoveryv1.LabelServiceName] != service {
			continue
		}
		if s.Labels[discoveryv1.LabelManagedBy] != managedBy {
			for _, in := range platformInstances(service, s) {
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

// platformInstances reads the endpoints of a slice another controller
// (the endpointslice controller, a mirror) wrote.
func platformInstances(service string, s *discoveryv1.EndpointSlice) []driver.Instance {
	if len(s.Ports) == 0 || s.Ports[0].Port == nil {
		return nil
	}
	port := strconv.Itoa(int(*s.Ports[0].Port))
	weight := uint32(backend.DefaultWeight)
	if w, err := strconv.ParseUint(s.Annotations[AnnotationWeight], 10, 32); err == nil {
		// Past the portable limit the registry would skip every endpoint
		// of the slice: an operator's 100000 means "as heavy as can be".
		weight = uint32(min(w, backend.MaxWeight))
	}
	var out []driver.Instance
	for _, e := range s.Endpoints {
		w, ok := endpointWeight(e.Conditions, weight)
		if !ok || len(e.Addresses) == 0 {
			continue
		}
		// Without a Pod to name it, an endpoint is known by its address
		// ("fd00::1" is no ID: the registry would skip it).
		in := driver.Instance{ID: backend.AddressID(e.Addresses[0]), Service: service, Address: net.JoinHostPort(e.Addresses[0], port),
			Version: s.Annotations[AnnotationVersion], Weight: w}
		if e.TargetRef != nil && e.TargetRef.Name != "" {
			in.ID = e.TargetRef.Name
		}
		if e.Zone != nil {
			in.Zone = *e.Zone
		}
		out = append(out, in)
	}
	return out
}

// endpointWeight applies the conditions: ready (nil means ready) and not
// terminating serves at weight; serving but not ready (terminating,
// draining) at 0; not serving is left out.
func endpointWeight(c discoveryv1.EndpointConditions, weight uint32) (uint32, bool) {
	ready := c.Ready == nil || *c.Ready
	terminating := c.Terminating != nil && *c.Terminating
	serving := ready
	if c.Serving != nil {
		serving = *c.Serving
	}
	switch {
	case ready && !terminating:
		return weight, true
	case serving:
		return 0, true
	}
	return 0, false
}

// List implements driver.Driver with a consistent read of the apiserver.
func (d *Driver) List(ctx context.Context, service string) (driver.Snapshot, error) {
	sl, leases, rev, err := d.read(ctx, discoveryv1.LabelServiceName+"="+service, labelLeaseService+"="+service)
	if err != nil {
		return driver.Snapshot{}, err
	}
	now := time.Now()
	ins, _ := instances(service, sl, leases, now)
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
		if ins, _ := instances(svc, []*discoveryv1.EndpointSlice{s}, leases, now); len(ins) > 0 {
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
