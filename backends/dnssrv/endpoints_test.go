package dnssrv_test

import (
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/roster-go/roster/backends/dnssrv"
	"github.com/roster-go/roster/registry"
)

// The SRV name of an endpoint is RFC 2782's _name._tcp before the
// service's name, or in place of the name's own _name._tcp.
func TestEndpointNames(t *testing.T) {
	for name, want := range map[string]string{
		"{service}.test": "_grpc._tcp.api.test.",
		"_http._tcp.{service}.prod.svc.cluster.local": "_grpc._tcp.api.prod.svc.cluster.local.",
	} {
		d, err := dnssrv.New(dnssrv.Options{Resolver: "127.0.0.1:53", Name: name, Endpoints: []string{"grpc"}})
		if err != nil {
			t.Fatal(err)
		}
		if got := dnssrv.EndpointNameOf(d, "api", "grpc"); got != want {
			t.Errorf("Name %s: endpoint grpc asked as %s, want %s", name, got, want)
		}
	}
	for _, o := range []dnssrv.Options{
		{Resolver: "127.0.0.1:53", Name: "{service}.test", Endpoints: []string{"GRPC"}},
		{Resolver: "127.0.0.1:53", Name: "{service}.test", Endpoints: []string{"grpc", "grpc"}},
		{Resolver: "127.0.0.1:53", Name: "{service}.test", Endpoints: []string{"grpc"}, EndpointName: "grpc.{service}.test"},
	} {
		if _, err := dnssrv.New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

// _grpc._tcp.api.test. published next to api.test.: each instance gets
// the endpoint on its own host, and _http._tcp at its own address names
// its primary. Two instances on one host cannot tell their records
// apart and get only what matches their address.
func TestRecordsToEndpoints(t *testing.T) {
	z := startZone(t)
	records := map[string][]dns.RR{
		"api.test.": {rr(t, "api.test. 30 IN SRV 1 10 8080 10.0.0.1."), rr(t, "api.test. 30 IN SRV 1 10 8080 10.0.0.2."),
			rr(t, "api.test. 30 IN SRV 1 10 8080 10.0.0.3."), rr(t, "api.test. 30 IN SRV 1 10 8081 10.0.0.3.")},
		"_http._tcp.api.test.": {rr(t, "_http._tcp.api.test. 30 IN SRV 1 10 8080 10.0.0.1."),
			rr(t, "_http._tcp.api.test. 30 IN SRV 1 10 8080 10.0.0.3.")},
		"_grpc._tcp.api.test.": {rr(t, "_grpc._tcp.api.test. 1 IN SRV 1 10 9090 10.0.0.1."),
			rr(t, "_grpc._tcp.api.test. 1 IN SRV 1 10 9091 10.0.0.2."), rr(t, "_grpc._tcp.api.test. 1 IN SRV 1 10 9090 10.0.0.3.")},
	}
	z.set(func(q dns.Question) (int, []dns.RR, []dns.RR) {
		if rrs, ok := records[q.Name]; ok && q.Qtype == dns.TypeSRV {
			return dns.RcodeSuccess, rrs, nil
		}
		return dns.RcodeNameError, nil, nil
	})
	r := open(t, z, "endpoints=http,grpc,metrics")
	snap, err := r.Lookup(t.Context(), "api")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]registry.Endpoint{
		"10.0.0.1:8080": {{Name: "http", Address: "10.0.0.1:8080"}, {Name: "grpc", Address: "10.0.0.1:9090"}},
		"10.0.0.2:8080": {{Name: "grpc", Address: "10.0.0.2:9091"}},
		"10.0.0.3:8080": {{Name: "http", Address: "10.0.0.3:8080"}},
		"10.0.0.3:8081": nil,
	}
	if len(snap.Instances) != len(want) {
		t.Fatalf("instances %+v, want %d", snap.Instances, len(want))
	}
	for _, in := range snap.Instances {
		if w, ok := want[in.Address]; !ok || !slices.Equal(in.Endpoints, w) {
			t.Errorf("%s: endpoints %+v, want %+v", in.Address, in.Endpoints, w)
		}
	}
	// The grpc records' TTL of 1s paces the watch, not the service's 30s.
	w, err := r.Watch(t.Context(), "api")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Next(t.Context()); err != nil {
		t.Fatal(err)
	}
	before := z.srvQs.Load()
	deadline := time.Now().Add(4 * time.Second)
	for z.srvQs.Load() == before && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if z.srvQs.Load() == before {
		t.Errorf("no question within 4s of a 1s TTL: the service's 30s paced the watch")
	}
}
