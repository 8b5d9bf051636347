package zookeeper_test

import (
	"testing"

	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/zktest"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, zktest.NewHarness(t, zktest.Start(t)))
}
