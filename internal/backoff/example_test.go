package backoff_test

import (
	"fmt"
	"math"
	"time"

	"github.com/roster-go/roster/internal/backoff"
)

// Delays double from Base up to Max; the jitter keeps at least half of
// each delay, so no client retries in a tight loop.
func ExamplePolicy_Delay() {
	p := backoff.Policy{Base: 100 * time.Millisecond, Max: time.Second}
	for attempt := range 6 {
		d := p.Delay(attempt)
		full := backoff.Exp(p.Base, attempt, p.Max)
		fmt.Println(full, d >= full/2 && d <= full)
	}
	// Output:
	// 100ms true
	// 200ms true
	// 400ms true
	// 800ms true
	// 1s true
	// 1s true
}

// The arithmetic saturates: a user-supplied duration near the maximum
// never wraps around to a negative delay.
func ExampleMul() {
	huge := time.Duration(math.MaxInt64 / 2)
	fmt.Println(backoff.Mul(huge, 3) == time.Duration(math.MaxInt64))
	fmt.Println(backoff.Add(huge, huge+10) == time.Duration(math.MaxInt64))
	// Output:
	// true
	// true
}
