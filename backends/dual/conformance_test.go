package dual_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/dualtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestConformance runs the suite on dual:// over a real etcd (old) and a
// real Redis (new).
func TestConformance(t *testing.T) {
	conformance.Run(t, dualtest.NewHarness(t))
}
