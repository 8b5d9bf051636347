// Package backoff computes capped, jittered exponential delays shared by
// every retry loop in Roster (lease re-registration, watch resubscription,
// driver reconnects).
package backoff

import (
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
	d := base
	for i := 0; i < attempt && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	half := d / 2
	return half + rand.N(half+1)
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
	cut := time.Duration(float64(d) * frac * rand.Float64())
	return d - cut
}
