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
