package consul_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/roster-go/roster/registry"
)

// Named endpoints show in Consul's own API as tagged addresses, one per
// name, except the names Consul reserves; Roster reads them whole (order
// and protocols) from its check's notes, and Meta keeps to one pair.
func TestEndpointsAsTaggedAddresses(t *testing.T) {
	t.Parallel()
	a := sharedAgent(t)
	r, err := openRegistry(t, a)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	eps := []registry.Endpoint{
		{Name: "http", Address: "127.0.0.1:8080", Protocol: "http"},
		{Name: "grpc", Address: "[::1]:9090", Protocol: "grpc"},
		{Name: "wan", Address: "127.0.0.1:9443", Protocol: "https"},
	}
	l, err := r.Register(t.Context(), registry.Instance{Service: "ep-tagged", Address: "127.0.0.1:8080", Endpoints: eps},
		registry.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Deregister(t.Context())
	c, _, err := rawClient(a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	entries, _, err := c.Health().Service("ep-tagged", "", true, nil)
	if err != nil || len(entries) != 1 {
		t.Fatalf("health of ep-tagged = %v, %v", entries, err)
	}
	ta := entries[0].Service.TaggedAddresses
	if ta["http"] != (api.ServiceAddress{Address: "127.0.0.1", Port: 8080}) || ta["grpc"] != (api.ServiceAddress{Address: "::1", Port: 9090}) {
		t.Errorf("tagged addresses %v, want http and grpc", ta)
	}
	if got, ok := ta["wan"]; ok {
		t.Errorf(`tagged address "wan" = %v, want none: Consul answers remote datacenters with it`, got)
	}
	if m := entries[0].Service.Meta; len(m) != 1 {
		t.Errorf("Meta = %v, want Roster's one pair", m)
	}
	var notes string
	for _, ch := range entries[0].Checks {
		if ch.ServiceID == l.Instance().ID {
			notes = ch.Notes
		}
	}
	if !strings.HasSuffix(notes, " endpoints=http=127.0.0.1:8080/http,grpc=[::1]:9090/grpc,wan=127.0.0.1:9443/https") {
		t.Errorf("check notes %q, want the endpoints in order", notes)
	}
	s, err := r.Lookup(t.Context(), "ep-tagged")
	if in, ok := s.Find(l.Instance().ID); err != nil || !ok || !in.Equal(l.Instance()) {
		t.Fatalf("Lookup = %+v (err %v), want %+v", s.Instances, err, l.Instance())
	}
}
