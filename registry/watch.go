package registry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/roster-go/roster/internal/backoff"
)

// Watcher follows one service. It is a view on a cache shared by every
// watcher of the same service in the same Registry: one backend watch
// serves them all.
//
// The contract:
//   - The first Next returns the current snapshot, even when it is empty.
//   - Each later Next blocks until the state differs from the one it last
//     returned (instances, or the Stale flag), then returns the newest
//     state. Intermediate states may be skipped: a slow reader always gets
//     the latest state and never an unbounded queue.
//   - Revisions never go backwards, and two successive snapshots never hold
//     the same instances unless the Stale flag changed.
//   - When the backend fails, Next returns the last good snapshot marked
//     Stale together with an error wrapping ErrUnavailable; an error never
//     empties the list. The watcher keeps retrying, and delivers a fresh
//     snapshot (Stale false) when the backend answers again. If the backend
//     was never reached, the stale snapshot is empty.
//   - After the backend stream failed, or when the backend's revision goes
//     back (a wipe), instances missing from the backend's first answers are
//     held until they reappear or the recovery window ends (see the package
//     doc). A failed relist alone marks the state Stale but holds nothing:
//     the stream that kept running saw every change as it happened.
//   - Only ErrClosed (Close, Registry.Close) and the context's error are
//     final. Close unblocks a pending Next.
type Watcher struct {
	e       *entry
	seq     uint64
	last    Snapshot // last returned, valid when sent
	sent    bool
	closed  chan struct{}
	closing sync.Once
}

// Next returns the next state of the service, as described on Watcher.
func (w *Watcher) Next(ctx context.Context) (Snapshot, error) {
	for {
		e := w.e
		e.mu.Lock()
		select {
		case <-w.closed:
			e.mu.Unlock()
			return Snapshot{}, fmt.Errorf("watch %s: %w", e.service, ErrClosed)
		default:
		}
		if e.closed {
			e.mu.Unlock()
			return Snapshot{}, fmt.Errorf("watch %s: %w", e.service, ErrClosed)
		}
		if e.seq != w.seq {
			w.seq = e.seq
			s, err := e.out, e.err
			e.mu.Unlock()
			// The cache may have gone stale and fresh again (or changed
			// and changed back) since this watcher last read: the state
			// it now holds can equal the one already returned.
			if w.sent && s.Stale == w.last.Stale && s.SameInstances(w.last) {
				continue
			}
			w.last, w.sent = s, true
			if !s.Stale {
				err = nil
			}
			return s, err
		}
		ch := e.changed
		e.mu.Unlock()
		select {
		case <-ch:
		case <-w.closed:
		case <-ctx.Done():
			return Snapshot{}, ctx.Err()
		}
	}
}

// Close stops the watcher and unblocks its Next. The backend watch stops
// when the last watcher of the service closes.
func (w *Watcher) Close() error {
	w.closing.Do(func() {
		close(w.closed)
		w.e.r.release(w.e)
	})
	return nil
}

// entry is the shared cache of one service: one driver stream, one resync
// timer, the current snapshot and a broadcast channel closed on change.
type entry struct {
	r       *Registry
	service string
	refs    int // guarded by r.mu

	mu  sync.Mutex
	cur Snapshot // the backend's state plus held instances
	// out is what watchers get: cur with the operators' overrides
	// applied (override.go); cur itself when there are none.
	out Snapshot
	ovr []Override
	seq uint64 // bumped on every delivery; 0 = nothing yet
	// streamRev is the backend's counter as the stream last showed it
	// (or as a relist showed it reset). Only the stream's own revisions
	// move it: a relist may be answered from a newer view than the
	// stream has reached, and a stream snapshot behind such a relist is
	// lagging, not a backend that went back.
	streamRev uint64
	// streamLost: the backend stream failed, and the backend has not
	// answered since. Its next answer may lack instances whose leases
	// have not yet written themselves back, so it starts a hold. A failed
	// relist while the stream runs is no such gap: the stream saw every
	// change live.
	streamLost bool
	err        error
	changed    chan struct{}
	closed     bool
	hold       recovery

	resyncT *time.Timer // owned by run
	cancel  context.CancelFunc
	done    chan struct{}
}

func newEntry(r *Registry, service string) *entry {
	return &entry{r: r, service: service, changed: make(chan struct{}), done: make(chan struct{})}
}

// cached returns the snapshot if the entry holds a fresh one.
func (e *entry) cached() (Snapshot, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.out, e.seq != 0 && !e.cur.Stale
}

// last returns whatever the entry holds, fresh or stale.
func (e *entry) last() (Snapshot, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.out, e.seq != 0 && (len(e.cur.Instances) > 0 || !e.cur.Stale)
}

func (e *entry) broadcast() {
	e.seq++
	close(e.changed)
	e.changed = make(chan struct{})
}

// publish applies a snapshot from the stream.
func (e *entry) publish(s Snapshot) {
	e.mu.Lock()
	wentBack := s.Revision < e.streamRev
	e.streamRev = s.Revision
	e.applyLocked(s, wentBack)
}

// publishList applies the result of a full relist that started when the
// stream's last revision was before. A result between before and the
// stream's current revision raced with the stream, which is ordered and
// newer: it is dropped. A result below before can only come from a backend
// whose counter went back (wiped or restarted empty) without the stream
// noticing: it is applied, or the cache would never heal.
func (e *entry) publishList(s Snapshot, before uint64) {
	e.mu.Lock()
	if e.seq != 0 && !e.cur.Stale && s.Revision >= before &&
		(s.Revision < e.streamRev || (s.Revision == e.streamRev && e.sameAsServed(s))) {
		e.mu.Unlock()
		return
	}
	wentBack := s.Revision < before
	if wentBack {
		e.streamRev = s.Revision // the stream will go on from the reset counter
	}
	e.applyLocked(s, wentBack)
}

// applyLocked publishes the backend's state s, merged with the instances
// held through a recovery; wentBack says the backend's counter went back
// to reach s. It is called with e.mu held and releases it.
func (e *entry) applyLocked(s Snapshot, wentBack bool) {
	have := e.seq != 0
	fresh := have && !e.cur.Stale
	// Back from a stream failure, or the backend's counter went back (a wipe):
	// the backend may be answering before the leases had a chance to
	// write themselves again. Hold what was served until they do.
	if have && (e.streamLost || wentBack) {
		if n := e.hold.begin(e.cur.Instances, e.r.recovery, e.endHold); n > 0 {
			e.r.logf("roster: backend recovering: holding the last instances until their leases return",
				"service", e.service, "held", n, "window", e.r.recovery)
		}
	}
	e.streamLost = false
	s = e.hold.apply(s)
	if fresh && e.cur.SameInstances(s) {
		e.mu.Unlock()
		return
	}
	e.deliverLocked(s)
}

// sameAsServed reports whether the backend's state s would change nothing
// that watchers see.
func (e *entry) sameAsServed(s Snapshot) bool {
	merged, _ := e.hold.merge(s)
	return merged.SameInstances(e.cur)
}

// endHold ends a recovery window: what the backend said last is served
// as is.
func (e *entry) endHold() {
	e.mu.Lock()
	if e.closed || !e.hold.end() {
		e.mu.Unlock()
		return
	}
	s := e.hold.last
	if e.cur.Stale || e.cur.SameInstances(s) {
		e.mu.Unlock()
		return
	}
	e.deliverLocked(s)
}

// deliverLocked makes s the current state and wakes the watchers; it is
// called with e.mu held and releases it.
func (e *entry) deliverLocked(s Snapshot) {
	have := e.seq != 0
	rev := s.Revision
	if have && rev <= e.cur.Revision {
		// The backend's counter went back (wiped data) or did not move:
		// keep the promise that revisions only grow.
		rev = e.cur.Revision + 1
	}
	s.Service, s.Revision, s.Stale = e.service, rev, false
	if s.At.IsZero() {
		s.At = time.Now()
	}
	if s.Instances == nil {
		s.Instances = []Instance{}
	}
	e.cur, e.err = s, nil
	e.out = applyOverrides(s, e.ovr)
	s = e.out
	e.broadcast()
	e.mu.Unlock()
	if obs := e.r.obs; obs != nil {
		obs.Snapshot(s)
	}
}

// setOverrides applies a new set of overrides to what watchers get.
func (e *entry) setOverrides(ovs []Override) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || slices.EqualFunc(ovs, e.ovr, sameOverride) {
		return
	}
	e.ovr = ovs
	if e.seq == 0 {
		return
	}
	out := applyOverrides(e.cur, ovs)
	if out.SameInstances(e.out) {
		return
	}
	e.out = out
	e.broadcast()
}

// streamFailed marks the cache stale after the stream failed or could
// not be opened, and remembers the gap (streamLost).
func (e *entry) streamFailed(err error) {
	e.mu.Lock()
	e.streamLost = true
	e.mu.Unlock()
	e.fail(err)
}

// fail marks the cache stale: the last good instances stay, flagged.
func (e *entry) fail(err error) {
	if !errors.Is(err, ErrUnavailable) {
		err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.err = err
	if e.seq != 0 && e.cur.Stale {
		return
	}
	s := e.cur
	s.Service, s.Stale = e.service, true
	if s.Instances == nil {
		s.Instances = []Instance{}
	}
	if s.At.IsZero() {
		s.At = time.Now()
	}
	e.cur = s
	e.out = applyOverrides(s, e.ovr)
	e.broadcast()
}

func (e *entry) close() {
	e.mu.Lock()
	e.closed = true
	e.hold.end()
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()
}

type streamResult struct {
	s   Snapshot
	err error
}

// run owns the driver stream and the resync timer until ctx ends.
func (e *entry) run(ctx context.Context) {
	defer close(e.done)
	defer e.followOverrides()()
	var resyncC <-chan time.Time
	if e.r.resync > 0 {
		// Random phase: clients started together spread their relists.
		e.resyncT = time.NewTimer(time.Duration(float64(e.r.resync) * (0.5 + rand.Float64()/2)))
		defer e.resyncT.Stop()
		resyncC = e.resyncT.C
	}
	// Reopening is cheap (a refused connection while the backend is down),
	// and the sooner the watch is back the sooner changes flow again.
	policy := backoff.Policy{Base: 100 * time.Millisecond, Max: time.Second}
	for attempt := 0; ctx.Err() == nil; {
		st, err := e.r.drv.Watch(ctx, e.service)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			e.streamFailed(err)
			if !e.sleep(ctx, policy.Delay(attempt), resyncC) {
				return
			}
			attempt++
			continue
		}
		sctx, cancel := context.WithCancel(ctx)
		results := make(chan streamResult)
		readerDone := make(chan struct{})
		go func() {
			defer close(readerDone)
			for {
				s, err := st.Next(sctx)
				select {
				case results <- streamResult{s, err}:
				case <-sctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
		failed := false
		for !failed {
			select {
			case <-ctx.Done():
			case <-resyncC:
				e.resync(ctx)
				continue
			case r := <-results:
				if r.err != nil {
					if ctx.Err() == nil {
						e.r.logf("roster: watch failed", "service", e.service, "err", r.err)
						e.streamFailed(r.err)
					}
					failed = true
					continue
				}
				attempt = 0
				e.publish(r.s)
				continue
			}
			break
		}
		cancel()
		st.Close()
		<-readerDone // drivers honour ctx: Close never leaves a reader behind
		if !failed || !e.sleep(ctx, policy.Delay(attempt), resyncC) {
			return
		}
		attempt++
	}
}

// sleep waits d, running resyncs meanwhile; false when ctx ended.
func (e *entry) sleep(ctx context.Context, d time.Duration, resyncC <-chan time.Time) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case <-resyncC:
			e.resync(ctx)
		}
	}
}

// resync relists the service in full and publishes the result if the
// stream missed something.
func (e *entry) resync(ctx context.Context) {
	start := time.Now()
	e.mu.Lock()
	before := e.streamRev
	e.mu.Unlock()
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	s, err := e.r.drv.List(lctx, e.service)
	cancel()
	if obs := e.r.obs; obs != nil && ctx.Err() == nil {
		obs.Resync(e.service, start, time.Since(start), err)
	}
	switch {
	case ctx.Err() != nil:
	case err != nil:
		e.r.logf("roster: resync failed", "service", e.service, "err", err)
		e.fail(err)
	default:
		e.publishList(s, before)
	}
	e.resyncT.Reset(backoff.Jitter(e.r.resync, 0.1))
}
