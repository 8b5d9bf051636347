package middleware

import "time"

// SkipClock moves the clock that staleness is measured on forward by d,
// for the rest of the test binary's life.
func SkipClock(d time.Duration) { clockSkip.Add(int64(d)) }
