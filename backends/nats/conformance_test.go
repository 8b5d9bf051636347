package nats_test

import (
	"testing"

	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/natstest"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, natstest.Start(t).Harness())
}
