// Package backoff computes the capped, jittered exponential delays of
// every retry loop in Roster. Lease re-registration, watch
// resubscription, driver reconnects and call retries all use it.
//
// It also holds the saturating duration arithmetic they need. A user may
// pass any time.Duration, up to math.MaxInt64. No product or doubling here
// ever wraps around to a negative value.
package backoff

import (
	"math"
	"math/rand/v2"
	"time"
)

// Policy is an exponential backoff with a cap. The zero value uses
// Base 100ms and Max 10s.
type Policy struct {
	Base time.Duration // first delay before jitter
	Max  time.Duration // cap on the delay before jitter
}

// Delay returns the delay before retry number attempt (0-based). It uses
// "equal jitter": half the exponential delay is kept and the other half is
// random, so many clients that failed together spread out, yet no client
// retries in a tight loop.
func (p Policy) Delay(attempt int) time.Duration {
	base, max := p.Base, p.Max
	if base <= 0 {
		base = 100 * time.Millisecond
	}
	if max <= 0 {
		max = 10 * time.Second
	}
	d := Exp(base, attempt, max)
	half := d / 2
	return half + rand.N(half+1)
}

// Exp returns base·2^attempt, capped at max, without overflow for any
// attempt. A negative attempt counts as 0; a non-positive base or max
// gives 0.
func Exp(base time.Duration, attempt int, max time.Duration) time.Duration {
	if base <= 0 || max <= 0 {
		return 0
	}
	d := min(base, max)
	for i := 0; i < attempt && d < max; i++ {
		if d > max/2 {
			return max
		}
		d *= 2
	}
	return d
}

// Mul returns d·n saturated to [0, math.MaxInt64]: a negative d or n gives
// 0, and a product too large for a Duration gives the largest Duration.
func Mul(d time.Duration, n int64) time.Duration {
	if d <= 0 || n <= 0 {
		return 0
	}
	if int64(d) > math.MaxInt64/n {
		return math.MaxInt64
	}
	return d * time.Duration(n)
}

// Add returns a+b for non-negative durations, saturated at the largest
// Duration.
func Add(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Jitter returns d scaled by a random factor in [1-frac, 1].
// Periodic work (heartbeats, resyncs) uses it so that processes started
// together do not hit the backend in lockstep, and never later than d.
func Jitter(d time.Duration, frac float64) time.Duration {
	if d <= 0 || frac <= 0 {
		return d
	}
	if frac > 1 {
		frac = 1
	}
	cut := float64(d) * frac * rand.Float64()
	if cut >= float64(d) {
		// Only at the largest durations, where float64 rounds d up and the
		// conversion back to an integer would overflow.
		return d / 2
	}
	return d - time.Duration(cut)
}
