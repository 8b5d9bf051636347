package dnssrv_test

import (
	"testing"

	_ "github.com/roster-go/roster/backends/dnssrv" // dns+srv:// for the harness
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/consultest"
	"github.com/roster-go/roster/internal/servers/dnssrvtest"
)

// TestConformance runs the suite on a Consul agent's DNS interface: the
// checks that only read run, with instances published through the
// agent's HTTP API; the others are reported "n/a: read-only".
func TestConformance(t *testing.T) {
	conformance.Run(t, dnssrvtest.NewHarness(t, consultest.Start(t)))
}
