package selector

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestDecayApprox(t *testing.T) {
	for x := 0.0; x < 3; x += 1e-4 {
		if d := math.Abs(decay(x) - math.Exp(-x)); d > 3e-9 {
			t.Fatalf("x=%v err %v", x, d)
		}
	}
}

// TestSettledImpliesObserveDrops: Done skips observe when settled says
// so; that must never lose an update observe would have made. Over
// random estimates, ages and latencies (around the grain and the
// estimate, where the bound is tight), whenever settled is true, observe
// leaves the estimate and its stamp as they were.
func TestSettledImpliesObserveDrops(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, tau := range []time.Duration{time.Millisecond, 100 * time.Millisecond, defaultDecay} {
		sh := &shared{perTau: 1 / float64(tau), keep: 1 - float64(observeGrain)/float64(tau)}
		settled := 0
		for range 200_000 {
			var ep endpoint
			cost := rnd.Float64() * 1e8
			if rnd.IntN(10) == 0 {
				cost = 0
			}
			stamp := int64(1e12)
			now := stamp + rnd.Int64N(2*observeGrain) - observeGrain/4
			latency := time.Duration(cost * (0.99 + 0.02*rnd.Float64()))
			if rnd.IntN(10) == 0 {
				latency = -latency
			}
			ep.cost.Store(math.Float64bits(cost))
			ep.stamp.Store(stamp)
			if !ep.settled(latency, now, sh.keep) {
				continue
			}
			settled++
			sh.observe(&ep, latency, false, now)
			if got := math.Float64frombits(ep.cost.Load()); got != cost || ep.stamp.Load() != stamp {
				t.Fatalf("τ %v, cost %v, age %v, latency %v: settled, but observe changed the estimate to %v at %v",
					tau, cost, now-stamp, latency, got, ep.stamp.Load())
			}
		}
		if settled < 10_000 {
			t.Errorf("τ %v: settled only %d times: the test does not exercise it", tau, settled)
		}
	}
}

// TestObserveAveragesLowerSample: a sample below the estimate moves it by
// the weight 1 − w of its age, the old estimate keeping w (not w², which
// let an estimate recover from a peak twice as fast as τ says).
func TestObserveAveragesLowerSample(t *testing.T) {
	const tau = 10 * time.Second
	sh := &shared{perTau: 1 / float64(tau), keep: 1 - float64(observeGrain)/float64(tau)}
	var ep endpoint
	t0 := int64(time.Hour)
	sh.observe(&ep, 100*time.Millisecond, false, t0)
	age := tau / 2
	sh.observe(&ep, 10*time.Millisecond, false, t0+int64(age))
	w := decay(float64(age) * sh.perTau)
	want := float64(100*time.Millisecond)*w + float64(10*time.Millisecond)*(1-w)
	if got := math.Float64frombits(ep.cost.Load()); math.Abs(got-want) > 1 {
		t.Errorf("estimate after a lower sample %v later = %.0f ns, want %.0f ns (100ms·%.3f + 10ms·%.3f)", age, got, want, w, 1-w)
	}
}
