package selector

import (
	"sync/atomic"
	"time"
)

// coarseClock is a process-wide monotonic clock that picks and Done read
// instead of the system clock: reading the clock costs 40–100 ns on the
// VMs this was measured on (more than a whole pick), reading an atomic
// ≈1 ns. A goroutine stores the time every coarseTick while the clock is
// in use and stops after coarseIdle ticks without a reader, so an idle
// process has no timer running and tests see no goroutine left behind.
//
// The time it returns is at most one tick (plus scheduling delay) old.
// Latencies measured with it (Done.Finish) are quantised to the tick,
// but unbiased: a call starts at a uniformly random phase of the tick,
// so the expected difference of two readings is the call's duration, and
// the peak-EWMA averages the rest away.
type coarseClock struct {
	// word is the time (ns since epoch) << 1 | used. The goroutine
	// stores the time with used clear on every tick; the first reader
	// after a tick sets used, so that a read is one load and a bit test
	// and only the first read of a tick writes.
	word    atomic.Int64
	running atomic.Bool // the ticking goroutine runs
	// fake, if set, is a test's clock (WithClock): word stays 0, so that
	// every read calls it.
	fake func() int64
}

const (
	coarseTick = time.Millisecond
	coarseIdle = 50 // ticks without a reader before the goroutine stops
)

var coarse coarseClock

// read returns the monotonic time in ns since the process started, to
// within a tick.
func (c *coarseClock) read() int64 {
	if w := c.word.Load(); w&1 != 0 {
		return w >> 1
	}
	return c.mark()
}

// mark is the first read of a tick: it sets used, with the current
// time, and starts the goroutine if it stopped. The goroutine clears used
// on every tick and, before stopping, checks used once more after
// clearing running; a reader sets used before it checks running. So
// either the goroutine sees the reader's mark and goes on, or the reader
// sees the goroutine gone and starts a new one.
func (c *coarseClock) mark() int64 {
	if c.fake != nil {
		return c.fake()
	}
	for {
		w := c.word.Load()
		if w&1 != 0 {
			return w >> 1
		}
		now := max(monotonic(), w>>1)
		if !c.word.CompareAndSwap(w, now<<1|1) {
			continue // the goroutine ticked, or another reader marked
		}
		if !c.running.Load() && c.running.CompareAndSwap(false, true) {
			go c.tick()
		}
		return now
	}
}

// store sets the time, never backwards (a reader's mark may have stored
// a later one), clears used and reports whether it was set.
func (c *coarseClock) store() (used bool) {
	for {
		w := c.word.Load()
		if c.word.CompareAndSwap(w, max(monotonic(), w>>1)<<1) {
			return w&1 != 0
		}
	}
}

func (c *coarseClock) tick() {
	t := time.NewTicker(coarseTick)
	defer t.Stop()
	idle := 0
	for range t.C {
		if c.store() {
			idle = 0
			continue
		}
		if idle++; idle < coarseIdle {
			continue
		}
		c.running.Store(false)
		if c.word.Load()&1 == 0 || !c.running.CompareAndSwap(false, true) {
			return
		}
		idle = 0
	}
}
