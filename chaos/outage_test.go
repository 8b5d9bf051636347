package chaos

import (
	"os"
	"testing"
	"time"
)

// envOutage sets the long outage's length, and runs it: it is too long
// for every `go test`, so scripts/test.sh runs it once, beside the rest.
const envOutage = "ROSTER_CHAOS_OUTAGE"

// longLoad is the long outage's load: light, as it runs beside the other
// packages' tests.
var longLoad = loadShape{callers: 1, pace: 50 * time.Millisecond}

// TestChaosLongOutage cuts the client and its agent off from the
// registry (Redis) for ROSTER_CHAOS_OUTAGE (11m in CI: past the 10-minute
// staleness bound clients once had), with default options on every path:
// no call may fail, and the client must pick from exactly the live
// instances, fresh, once the link is back.
func TestChaosLongOutage(t *testing.T) {
	s := os.Getenv(envOutage)
	if s == "" {
		t.Skipf("set %s (for example 11m) to run the long outage", envOutage)
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", envOutage, s)
	}
	fx := newFixtureWith(t, startRedis("")(t), longLoad)
	fx.tally = func(string, *phase) {}
	fx.run(t, fault{"long-outage", func(fx *fixture, t *testing.T, p *phase) { fx.cutFor(t, p, d) }})
}

// cutFor cuts the client off from the registry for d, then requires it to
// converge.
func (fx *fixture) cutFor(t *testing.T, p *phase, d time.Duration) {
	sawStale := fx.watchStale(p)
	fx.cut(false)
	p.event("client and agent cut off from the registry for %v", d)
	time.Sleep(d)
	if !sawStale() {
		t.Errorf("the client never saw its registry fail during a %v partition: the cut had no effect", d)
	}
	fx.cut(true)
	p.event("link restored")
	fx.mustConverge(t, p)
}
