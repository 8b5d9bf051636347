package etcd_test

import (
	"testing"

	_ "github.com/roster-go/roster/backends/etcd" // etcd:// for the harness
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/etcdtest"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, etcdtest.NewHarness(t, etcdtest.Config{}))
}

func TestConformanceThreeMembers(t *testing.T) {
	conformance.Run(t, etcdtest.NewHarness(t, etcdtest.Config{Members: 3}))
}
