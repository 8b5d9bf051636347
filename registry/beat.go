package registry

import (
	"container/heap"
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roster-go/roster/internal/backoff"
)

// grid runs the timed work of every lease of a Registry: heartbeats and
// re-registrations. Due times are rounded down to a grain of the lease's
// interval, so that the leases falling due in one slot run together, on
// one goroutine woken by the grid's one timer. A goroutine and a timer
// per lease per heartbeat cost a process with a thousand leases more
// CPU than the heartbeats themselves (docs/benchmarks.md, Registry cost).
//
// A slot whose steps are slow (a backend that does not answer) gets
// more goroutines, one per slowStep, so that one stuck call cannot hold
// the rest of the slot back by more than that.
//
// The grid owns no goroutine of its own: its timer is a time.AfterFunc,
// and a slot's goroutines end with the slot.
type grid struct {
	mu    sync.Mutex
	epoch time.Time
	slots map[int64][]slotEntry // by due time, in ns since epoch
	due   slotHeap              // the keys of slots
	timer *time.Timer           // fires at armed
	armed int64                 // math.MaxInt64: not armed
}

// slotEntry is a lease due in a slot. gen is the lease's schedule
// generation when it was put there: an entry whose lease was rescheduled
// since is stale, and skipped.
type slotEntry struct {
	l   *Lease
	gen uint64
}

// leaseSched is a lease's place on the grid; grid.mu guards it.
type leaseSched struct {
	gen     uint64
	at      int64 // its slot, or -1
	running bool  // a step is in flight, and reschedules when done
	// cancel ends the context of the step in flight, for halt.
	cancel context.CancelFunc
}

const (
	// maxGrain bounds the rounding of due times: a heartbeat runs up to
	// that much before it is due, never after.
	maxGrain = 100 * time.Millisecond
	// slowStep is how long a slot's goroutine may be busy with one step
	// before another goroutine takes up the slot's remaining leases.
	slowStep = 10 * time.Millisecond
	// maxSlotWorkers bounds the goroutines of one slot.
	maxSlotWorkers = 64
)

// grain is the rounding of l's due times: a sixteenth of its interval,
// at most maxGrain, so that leases of one interval share slots.
func (l *Lease) grain() int64 {
	return int64(min(l.interval/16, maxGrain))
}

func (g *grid) now() int64 {
	if g.epoch.IsZero() {
		g.epoch = time.Now()
	}
	return int64(time.Since(g.epoch))
}

// schedule puts l in the slot due in d, unless it is due sooner, a step
// of it is in flight (which reschedules it) or it was halted. Callers
// other than a slot hold l.stepMu, so a step in flight starts after
// them and reads the state they left.
func (g *grid) schedule(l *Lease, d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l.sched.running || l.halted.Load() {
		return
	}
	g.put(l, d)
}

// put schedules l in d; g.mu is held.
func (g *grid) put(l *Lease, d time.Duration) {
	now := g.now()
	at := int64(backoff.Add(time.Duration(now), max(d, 0)))
	if gr := l.grain(); gr > 0 && d >= time.Duration(gr) {
		at -= at % gr // down: never later than asked
	}
	if l.sched.at >= 0 && l.sched.at <= at {
		return
	}
	l.sched.gen++
	l.sched.at = at
	s, ok := g.slots[at]
	if !ok {
		if g.slots == nil {
			g.slots = map[int64][]slotEntry{}
			g.armed = math.MaxInt64
		}
		heap.Push(&g.due, at)
	}
	g.slots[at] = append(s, slotEntry{l: l, gen: l.sched.gen})
	if at < g.armed {
		g.arm(at, now)
	}
}

// unschedule takes l off the grid (withdrawn: the health check brings it
// back). As for schedule, a step in flight decides for itself.
func (g *grid) unschedule(l *Lease) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !l.sched.running {
		l.sched.gen++
		l.sched.at = -1
	}
}

// interrupt ends the call of l's step in flight, if any: l halted.
func (g *grid) interrupt(l *Lease) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l.sched.running && l.sched.cancel != nil {
		l.sched.cancel()
	}
}

// arm sets the timer for at; g.mu is held.
func (g *grid) arm(at, now int64) {
	g.armed = at
	d := time.Duration(max(at-now, 0))
	if g.timer == nil {
		g.timer = time.AfterFunc(d, g.fire)
		return
	}
	g.timer.Reset(d)
}

// fire starts the slots that are due, and arms the timer for the next.
func (g *grid) fire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	g.armed = math.MaxInt64
	for len(g.due) > 0 && g.due[0] <= now {
		at := heap.Pop(&g.due).(int64)
		s := g.slots[at]
		delete(g.slots, at)
		live := s[:0]
		for _, e := range s {
			if e.gen == e.l.sched.gen && !e.l.halted.Load() {
				e.l.sched.at = -1
				e.l.sched.running = true
				live = append(live, e)
			}
		}
		if len(live) > 0 {
			go g.run(&slotRun{g: g, entries: live})
		}
	}
	if len(g.due) > 0 {
		g.arm(g.due[0], now)
	}
}

// slotRun is one slot's leases, stepped by one goroutine or more.
type slotRun struct {
	g       *grid
	entries []slotEntry
	next    atomic.Int64 // index of the next entry to take
	workers atomic.Int32
	left    atomic.Int64 // entries not finished
	helper  *time.Timer
	hmu     sync.Mutex // guards helper
}

func (g *grid) run(s *slotRun) {
	s.left.Store(int64(len(s.entries)))
	s.workers.Store(1)
	if len(s.entries) > 1 {
		s.hmu.Lock()
		s.helper = time.AfterFunc(slowStep, s.help)
		s.hmu.Unlock()
	}
	s.work()
}

// help adds a goroutine to a slot still busy after slowStep, and comes
// back after another while some of its leases have not started.
func (s *slotRun) help() {
	if s.next.Load() >= int64(len(s.entries)) || s.workers.Load() >= maxSlotWorkers {
		return
	}
	s.workers.Add(1)
	go s.work()
	s.hmu.Lock()
	s.helper.Reset(slowStep)
	s.hmu.Unlock()
}

// work steps the slot's leases until none is left. The heartbeats of one
// goroutine share a context, made anew when it ended (a lease halted
// during its call) or when it has less than half a call's timeout left,
// so that each call still gets between half and all of its timeout.
func (s *slotRun) work() {
	var (
		ctx      context.Context
		cancel   context.CancelFunc = func() {}
		deadline time.Time
		timeout  time.Duration
	)
	defer func() { cancel() }()
	for {
		i := s.next.Add(1) - 1
		if i >= int64(len(s.entries)) {
			return
		}
		l := s.entries[i].l
		if t := l.callTimeout(); ctx == nil || ctx.Err() != nil || t != timeout || time.Until(deadline) < t/2 {
			cancel()
			timeout, deadline = t, time.Now().Add(t)
			ctx, cancel = context.WithDeadline(context.Background(), deadline)
		}
		s.g.mu.Lock()
		l.sched.cancel = cancel
		s.g.mu.Unlock()
		d, again := l.step(ctx)
		s.g.mu.Lock()
		l.sched.running, l.sched.cancel = false, nil
		if again && !l.halted.Load() {
			s.g.put(l, d)
		}
		s.g.mu.Unlock()
		if s.left.Add(-1) == 0 && s.helper != nil {
			s.hmu.Lock()
			s.helper.Stop()
			s.hmu.Unlock()
		}
	}
}

// slotHeap is a min-heap of slot times.
type slotHeap []int64

func (h slotHeap) Len() int           { return len(h) }
func (h slotHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h slotHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *slotHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *slotHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
