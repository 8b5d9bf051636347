package conformance

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/roster-go/roster/registry"
)

// endpointsOn returns n named endpoints on addr's host, at the ports
// after addr's: names of nameLen bytes (at least 4: "ep0a" makes them
// unique) and protocols of protoLen (at least 4, of every character a
// protocol may hold).
func endpointsOn(addr string, n, nameLen, protoLen int) []registry.Endpoint {
	host, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)
	eps := make([]registry.Endpoint, n)
	for i := range eps {
		eps[i] = registry.Endpoint{
			Name:     longName(fmt.Sprintf("ep%d", i), nameLen),
			Address:  net.JoinHostPort(host, strconv.Itoa((port+i)%65535+1)),
			Protocol: longName("p.+-", protoLen),
		}
	}
	return eps
}

// withEndpoints sets n endpoints of the given name and protocol lengths.
func withEndpoints(n, nameLen, protoLen int) func(in *registry.Instance) {
	return func(in *registry.Instance) { in.Endpoints = endpointsOn(in.Address, n, nameLen, protoLen) }
}

// endpointLimits are the limitCases of named endpoints.
var endpointLimits = []limitCase{
	{name: "endpoints", field: "endpoints",
		at: withEndpoints(backend.MaxEndpoints, 4, 4), past: withEndpoints(backend.MaxEndpoints+1, 4, 4)},
	{name: "endpoint name length", field: "endpoints[0].name",
		at: withEndpoints(1, backend.MaxEndpointNameLen, 4), past: withEndpoints(1, backend.MaxEndpointNameLen+1, 4)},
	{name: "endpoint protocol length", field: "endpoints[0].protocol",
		at: withEndpoints(1, 4, backend.MaxProtocolLen), past: withEndpoints(1, 4, backend.MaxProtocolLen+1)},
}

// allEndpoints is every endpoint limit at once, for allAtOnce.
func allEndpoints(in *registry.Instance) {
	in.Endpoints = endpointsOn(in.Address, backend.MaxEndpoints, backend.MaxEndpointNameLen, backend.MaxProtocolLen)
}

// endpointsRoundTrip: an instance's named endpoints — an http primary,
// grpc and metrics, each with a protocol — come back identical, in
// order, through a Lookup that reads the backend, a watch, and after
// updates of other fields.
func endpointsRoundTrip(t TB, s *suite) {
	r, obs, svc := s.pair(t, "ep")
	lister := s.open(t) // never watches: its Lookups read the backend
	primary := addr()
	host, _, _ := net.SplitHostPort(primary)
	in := registry.Instance{ID: "ep-1", Service: svc, Address: primary, Version: "2.0.0",
		Endpoints: []registry.Endpoint{
			{Name: "http", Address: primary, Protocol: "http"},
			{Name: "grpc", Address: net.JoinHostPort(host, "9090"), Protocol: "grpc"},
			{Name: "metrics", Address: net.JoinHostPort(host, "9100"), Protocol: "http"},
		}}
	l := s.register(t, r, in)
	want := l.Instance()
	if !want.Equal(registry.Instance{ID: in.ID, Service: svc, Address: primary, Version: in.Version,
		Weight: registry.DefaultWeight, Endpoints: in.Endpoints}) {
		t.Fatalf("Lease.Instance() = %+v, want the registered endpoints %+v", want, in.Endpoints)
	}
	same := func(what string, sn registry.Snapshot, want registry.Instance) (bool, string) {
		got, ok := sn.Find(want.ID)
		if !ok || !got.Equal(want) {
			return false, fmt.Sprintf("%s: got %+v, want %+v", what, sn.Instances, want)
		}
		return true, ""
	}
	read := func(what string, want registry.Instance) {
		t.Helper()
		eventually(t, s.cfg.Propagation, what+" through Lookup", func() (bool, string) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			sn, err := lister.Lookup(ctx, svc)
			if err != nil {
				return false, err.Error()
			}
			return same("Lookup", sn, want)
		})
	}
	read("endpoints", want)
	w := s.watch(t, obs, svc)
	watched := func(what string, want registry.Instance) {
		t.Helper()
		var detail string
		waitWatch(t, w, s.cfg.Propagation, what, func(sn registry.Snapshot) bool {
			ok, msg := same("watch", sn, want)
			detail = msg
			return ok
		})
		if sn, err := obs.Lookup(t.Context(), svc); err != nil {
			t.Fatalf("Lookup from the watch cache: %v (%s)", err, detail)
		} else if ok, msg := same("Lookup from the watch cache", sn, want); !ok {
			t.Fatalf("%s", msg)
		}
	}
	watched("the instance with its endpoints", want)

	md := map[string]string{"rev": "2"}
	if err := l.SetMetadata(t.Context(), md); err != nil {
		t.Fatalf("SetMetadata: %v", err)
	}
	want.Metadata = md
	watched("new metadata, the endpoints kept", want)
	read("new metadata, the endpoints kept", want)
	if err := l.Drain(t.Context()); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	want.Weight = 0
	watched("weight 0 after Drain, the endpoints kept", want)
	if got := l.Instance(); !got.Equal(want) {
		t.Errorf("Lease.Instance() after updates = %+v, want %+v", got, want)
	}
}

// roEndpoints: named endpoints published through the server's own API
// (names and addresses: DNS carries no protocol) reach Lookup and a
// watch, and stay when the instance is published again.
func roEndpoints(t TB, s *suite, ro ReadOnly) {
	r := s.open(t)
	svc := service("ep")
	primary := addr()
	host, _, _ := net.SplitHostPort(primary)
	in := registry.Instance{Service: svc, Address: primary, Weight: 10, Endpoints: []registry.Endpoint{
		{Name: "http", Address: primary}, {Name: "grpc", Address: net.JoinHostPort(host, "9090")},
		{Name: "metrics", Address: net.JoinHostPort(host, "9100")}}}
	id := publish(t, ro, in)
	match := func(sn registry.Snapshot, weight uint32) (bool, string) {
		got, ok := sn.Find(id)
		return ok && got.Weight == weight && slices.Equal(got.Endpoints, in.Endpoints),
			fmt.Sprintf("got %+v, want %s with endpoints %+v", sn.Instances, id, in.Endpoints)
	}
	eventually(t, s.cfg.Propagation, "published endpoints through Lookup", func() (bool, string) {
		sn, err := r.Lookup(t.Context(), svc)
		if err != nil {
			return false, err.Error()
		}
		return match(sn, 10)
	})
	w := s.watch(t, s.observer(t), svc)
	waitWatch(t, w, s.cfg.Propagation, "the endpoints", func(sn registry.Snapshot) bool { ok, _ := match(sn, 10); return ok })
	in.Weight = 20
	publish(t, ro, in)
	waitWatch(t, w, s.cfg.Propagation, "weight 20, the endpoints kept", func(sn registry.Snapshot) bool { ok, _ := match(sn, 20); return ok })
}
