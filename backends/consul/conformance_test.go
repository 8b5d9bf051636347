package consul_test

import (
	"testing"

	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/consultest"
)

// TestConformance runs the common suite on the shared agent. The harness —
// timings, fault hooks, the one check declared skipped and why — lives
// with the agent in consultest, for other suites to reuse.
func TestConformance(t *testing.T) {
	conformance.Run(t, consultest.NewHarness(t, sharedAgent(t)))
}
