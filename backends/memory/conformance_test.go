package memory_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/memorytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	conformance.Run(t, memorytest.NewHarness())
}
