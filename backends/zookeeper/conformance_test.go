package zookeeper_test

import (
	"testing"

	"github.com/roster-go/roster/internal/servers/zktest"
	"github.com/roster-go/roster/conformance"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, zktest.NewHarness(t, zktest.Start(t)))
}
