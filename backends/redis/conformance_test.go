package redis_test

import (
	"testing"
	"time"

	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/redistest"
)

// The suite on every topology, one deployment each, in parallel. Slack: a
// sweep or poll interval plus a margin for 2 shared cores under -race.
const hash, keys = "sweep=200ms&quiet=2s", "layout=keys&poll=100ms&notify=off" // keys: polling alone

var hashCfg, keysCfg = conformance.Config{ExpirySlack: 700 * time.Millisecond}, conformance.Config{ExpirySlack: time.Second}

func TestConformance(t *testing.T) {
	for name, run := range map[string]func(t *testing.T){
		"hash":     func(t *testing.T) { conformance.Run(t, redistest.Start(t).Harness(t, hash, hashCfg)) },
		"keys":     func(t *testing.T) { conformance.Run(t, redistest.Start(t).Harness(t, keys, keysCfg)) },
		"cluster":  clusterConformance,  // cluster_test.go: the suite, then many services over the slots
		"sentinel": sentinelConformance, // sentinel_test.go: the suite, then a failover
	} {
		t.Run(name, func(t *testing.T) { t.Parallel(); run(t) })
	}
}
