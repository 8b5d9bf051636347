package selector

import (
	"fmt"
	"sync"
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

// TestCoarseClockNeverGoesBack: readers that mark a tick publish the
// time they read, the goroutine stores its own; neither may move the
// clock backwards, or Finish would measure a negative latency and a
// restart would hand out a time from before the clock stopped.
func TestCoarseClockNeverGoesBack(t *testing.T) {
	var c coarseClock
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for range 4 {
		wg.Go(func() {
			last := int64(0)
			for range 200_000 {
				now := c.read()
				if now < last {
					errs <- fmt.Sprintf("read %d after %d", now, last)
					return
				}
				last = now
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	// The races the readers above may or may not hit, made to happen: a
	// tick after a reader stored a later time, a mark after a tick
	// stored a later time.
	later := monotonic() + int64(time.Hour)
	c.word.Store(later<<1 | 1)
	if !c.store() {
		t.Error("a tick after a read did not report the clock used")
	}
	if w := c.word.Load(); w>>1 < later || w&1 != 0 {
		t.Errorf("a tick moved the clock from %d back to %d (used %v)", later, w>>1, w&1 != 0)
	}
	if got := c.read(); got < later {
		t.Errorf("the first read after a tick moved the clock from %d back to %d", later, got)
	}
	// Let the goroutine stop (goleak checks it does).
	deadline := time.Now().Add(10 * time.Second)
	for c.running.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the clock's goroutine still runs 10 s after its last reader")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
