package selector

import (
	"testing"
	"time"
)

// TestCoarseClockTicksAndStops: the clock advances while it is read and
// its goroutine stops once nobody reads it (goleak in TestMain checks the
// same at the end of the package's tests).
func TestCoarseClockTicksAndStops(t *testing.T) {
	first := coarse.read()
	deadline := time.Now().Add(10 * time.Second)
	for coarse.read() <= first {
		if time.Now().After(deadline) {
			t.Fatal("the coarse clock did not advance in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	if now, c := monotonic(), coarse.read(); c > now || now-c > int64(time.Second) {
		t.Errorf("coarse clock %d, monotonic %d: want at most a little behind", c, now)
	}
	for coarse.running.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the coarse clock's goroutine still runs 10 s after its last reader")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Read again: it restarts with the current time.
	before := monotonic()
	if c := coarse.read(); c < before {
		t.Errorf("restarted clock reads %d, before it %d", c, before)
	}
}
