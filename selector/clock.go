package selector

import (
	"sync/atomic"
	"time"
)

// coarseClock is a process-wide monotonic clock that picks and Done read
// instead of the system clock: reading the clock costs ≈100 ns on the
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
	now     atomic.Int64
	used    atomic.Bool // a reader came since the last tick
	running atomic.Bool // the ticking goroutine runs
}

const (
	coarseTick = time.Millisecond
	coarseIdle = 50 // ticks without a reader before the goroutine stops
)

var coarse coarseClock

// read returns the monotonic time in ns since the process started, to
// within a tick.
func (c *coarseClock) read() int64 {
	if !c.used.Load() {
		c.wake()
	}
	return c.now.Load()
}

// wake marks the clock used and starts its goroutine if it stopped. The
// goroutine clears used on every tick and, before stopping, checks used
// once more after clearing running; a reader sets used before it checks
// running. So either the goroutine sees the reader's mark and goes on,
// or the reader sees the goroutine gone and starts a new one.
func (c *coarseClock) wake() {
	c.used.Store(true)
	if !c.running.Load() && c.running.CompareAndSwap(false, true) {
		c.now.Store(monotonic())
		go c.tick()
	}
}

func (c *coarseClock) tick() {
	t := time.NewTicker(coarseTick)
	defer t.Stop()
	idle := 0
	for range t.C {
		c.now.Store(monotonic())
		if c.used.Swap(false) {
			idle = 0
			continue
		}
		if idle++; idle < coarseIdle {
			continue
		}
		c.running.Store(false)
		if !c.used.Load() || !c.running.CompareAndSwap(false, true) {
			return
		}
		idle = 0
	}
}
