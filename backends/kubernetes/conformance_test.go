package kubernetes_test

import (
	"testing"

	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/kubetest"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, kubetest.NewHarness(server))
}
