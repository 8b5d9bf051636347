package nats_test

import (
	"testing"

	"github.com/roster-go/roster/backends/nats/natstest"
	"github.com/roster-go/roster/conformance"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, natstest.Start(t).Harness())
}
