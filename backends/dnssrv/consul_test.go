package dnssrv_test

import (
	"fmt"
	"testing"

	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/consultest"
	"github.com/roster-go/roster/internal/servers/dnssrvtest"
	"github.com/roster-go/roster/registry"
)

// TestLargeServiceWhole: a service of 150 instances comes back whole from
// Consul's DNS interface, which trims a UDP answer without saying so: the
// default is TCP.
func TestLargeServiceWhole(t *testing.T) {
	a := consultest.Start(t)
	ro := dnssrvtest.NewHarness(t, a).(conformance.ReadOnly)
	for i := range 150 {
		if _, err := ro.Publish(t.Context(), registry.Instance{Service: "big", Address: fmt.Sprintf("10.0.%d.%d:80", i/100, i%100+1)}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := registry.Open(t.Context(), dnssrvtest.URL(a, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s, err := r.Lookup(t.Context(), "big")
	if err != nil || len(s.Instances) != 150 {
		t.Fatalf("Lookup: %d instances, %v; want 150", len(s.Instances), err)
	}
}

// TestConsulEndpointsAsServices: Consul's DNS answers only with a
// service's own port, so a Consul user publishes a second port as a
// service of its own ("api-grpc"); endpoint_name maps it to the "grpc"
// endpoint of the instance on the same host.
func TestConsulEndpointsAsServices(t *testing.T) {
	a := consultest.Start(t)
	ro := dnssrvtest.NewHarness(t, a).(conformance.ReadOnly)
	for _, in := range []registry.Instance{{Service: "api", Address: "10.0.1.1:8080"}, {Service: "api-grpc", Address: "10.0.1.1:9090"},
		{Service: "api", Address: "10.0.1.2:8080"}} {
		if _, err := ro.Publish(t.Context(), in); err != nil {
			t.Fatal(err)
		}
	}
	r, err := registry.Open(t.Context(), dnssrvtest.URL(a, "endpoints=grpc&endpoint_name={service}-{endpoint}.service.consul"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s, err := r.Lookup(t.Context(), "api")
	if err != nil || len(s.Instances) != 2 {
		t.Fatalf("Lookup: %v, %v; want 2 instances", s.Instances, err)
	}
	for _, in := range s.Instances {
		e, ok := in.Endpoint("grpc")
		if want := map[string]string{"10.0.1.1:8080": "10.0.1.1:9090", "10.0.1.2:8080": "10.0.1.2:8080"}[in.Address]; !ok || e.Address != want {
			t.Errorf(`%s: Endpoint("grpc") = %v, %v; want %s`, in.Address, e, ok, want)
		}
	}
}
