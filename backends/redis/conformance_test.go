package redis_test

import (
	"testing"
	"time"

	"github.com/roster-go/roster/backends/redis/redistest"
	"github.com/roster-go/roster/conformance"
)

// The suite on every topology, one deployment each. Bounds: the backend's
// own (one sweep or poll interval) plus a margin for 2 shared cores under
// -race; typical figures are far lower (docs/bench/redis.md).
var (
	hashCfg = conformance.Config{TTL: time.Second, ExpirySlack: 700 * time.Millisecond}
	keysCfg = conformance.Config{TTL: time.Second, ExpirySlack: time.Second}
)

const hashOpts, keysOpts = "sweep=200ms&quiet=2s", "layout=keys&poll=100ms&notify=off" // keys: polling alone

func TestConformanceHash(t *testing.T) {
	t.Parallel()
	conformance.Run(t, redistest.Start(t).Harness(t, hashOpts, hashCfg))
}

func TestConformanceKeys(t *testing.T) {
	t.Parallel()
	conformance.Run(t, redistest.Start(t).Harness(t, keysOpts, keysCfg))
}

// After the suite, many services over the slots; last, the failover.
func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	t.Run("hash", func(t *testing.T) { conformance.Run(t, c.Harness(t, hashOpts, hashCfg)) })
	t.Run("keys", func(t *testing.T) { conformance.Run(t, c.Harness(t, keysOpts, keysCfg)) })
	t.Run("Scale", func(t *testing.T) { clusterScale(t, c) })
}

func TestConformanceSentinel(t *testing.T) {
	t.Parallel()
	f := redistest.StartFailover(t)
	conformance.Run(t, f.Harness(t, hashOpts, sentinelCfg))
	t.Run("Failover", func(t *testing.T) { sentinelFailover(t, f) })
}
