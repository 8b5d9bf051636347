package zookeeper_test

import (
	"testing"

	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/zktest"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, zktest.NewHarness(t, zktest.Start(t)))
}

// TestConformanceCurator runs the suite with instances stored as Apache
// Curator's ServiceInstance with Spring Cloud's payload. The map payload
// differs only in the payload's class and fields: TestCuratorPeer runs it
// against Curator's own code.
func TestConformanceCurator(t *testing.T) {
	conformance.Run(t, zktest.NewHarnessWith(t, zktest.Start(t), "layout=curator"))
}
