package dual

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/roster-go/roster/internal/backoff"
	"github.com/roster-go/roster/registry/driver"
)

// state is what the driver last heard from each side about one service,
// shared by List and every stream of the service. Guarded by pairDriver.mu.
type state struct {
	sides   [2]sideState
	changed chan struct{} // closed and replaced on every change
}

type sideState struct {
	snap      driver.Snapshot
	have      bool      // snap holds an answer
	down      bool      // the side's last call failed
	downSince time.Time // when it started failing
	err       error
	rev       uint64 // the driver's counter when this side last changed
	// own holds, while the side is down, the IDs it held that the other
	// side did not when it went down (nil: all of them). Only those stay
	// in the union: an instance both held is the other side's to report,
	// so its deregistration or expiry there shows at once.
	own map[string]bool
}

// stateLocked returns the state of service, creating it; d.mu held.
func (d *pairDriver) stateLocked(service string) *state {
	s := d.services[service]
	if s == nil {
		s = &state{changed: make(chan struct{})}
		d.services[service] = s
	}
	return s
}

// observe records side i's answer about service: a snapshot, or the
// error that replaced one.
func (d *pairDriver) observe(service string, i int, snap driver.Snapshot, err error) {
	d.mu.Lock()
	s := d.stateLocked(service)
	sd := &s.sides[i]
	switch {
	case err == nil:
		*sd = sideState{snap: snap, have: true}
	case !sd.down:
		sd.down, sd.downSince = true, time.Now()
		sd.own = ownIDs(sd, &s.sides[1-i])
		fallthrough
	default:
		sd.err = err
	}
	sd.rev = d.rev.Add(1)
	close(s.changed)
	s.changed = make(chan struct{})
	d.mu.Unlock()
}

// ownIDs returns the IDs sd holds that other, answering, does not; nil
// when other cannot tell.
func ownIDs(sd, other *sideState) map[string]bool {
	if !other.have || other.down {
		return nil
	}
	// The sides' snapshots are in any order: no Find (a binary search).
	held := make(map[string]bool, len(other.snap.Instances))
	for _, in := range other.snap.Instances {
		held[in.ID] = true
	}
	own := map[string]bool{}
	for _, in := range sd.snap.Instances {
		if !held[in.ID] {
			own[in.ID] = true
		}
	}
	return own
}

// unionLocked returns the union of what the sides hold for service (in no
// order), the
// time at which a held side's state leaves it (zero: none), and an error
// when no side can serve; d.mu held.
func (d *pairDriver) unionLocked(service string, now time.Time) (driver.Snapshot, time.Time, error) {
	s := d.stateLocked(service)
	out := driver.Snapshot{Service: service, Instances: []driver.Instance{}}
	var expires time.Time
	served := false
	byID := map[string]bool{}
	for _, i := range [2]int{d.primary, 1 - d.primary} { // the preferred side first
		sd := s.sides[i]
		if sd.down {
			end := sd.downSince.Add(d.hold)
			if !sd.have || d.hold < 0 || !now.Before(end) {
				continue
			}
			expires = end
		}
		if !sd.have {
			continue
		}
		served = true
		if out.At.IsZero() || sd.snap.At.After(out.At) {
			out.At = sd.snap.At
		}
		for _, in := range sd.snap.Instances {
			if !byID[in.ID] && (!sd.down || sd.own == nil || sd.own[in.ID]) {
				byID[in.ID] = true
				out.Instances = append(out.Instances, in)
			}
		}
	}
	if !served || (s.sides[0].down && s.sides[1].down) {
		err := joinSides([2]error{s.sides[0].err, s.sides[1].err})
		if !errors.Is(err, driver.ErrUnavailable) {
			err = fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
		}
		return driver.Snapshot{}, time.Time{}, fmt.Errorf("dual: both sides failing: %w", err) // each names the watch
	}
	// The latest answer of either side, included or not: a side leaving
	// the union must not take the revision back (Registry would read a
	// wiped backend and hold what it served).
	out.Revision = max(s.sides[0].rev, s.sides[1].rev)
	return out, expires, nil
}

// List implements driver.Driver: both sides are listed at once; a side
// that fails is served from its last state for the hold.
func (d *pairDriver) List(ctx context.Context, service string) (driver.Snapshot, error) {
	errs := both(func(i int) error {
		snap, err := d.sides[i].List(ctx, service)
		err = d.classify(ctx, i, err)
		if ctx.Err() == nil {
			d.observe(service, i, snap, err)
		}
		return err
	})
	if err := d.outcome("list", errs); err != nil {
		return driver.Snapshot{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	snap, _, err := d.unionLocked(service, time.Now())
	return snap, err
}

// Watch implements driver.Driver: one stream per side, each reopened
// with backoff when it fails, merged as List merges.
func (d *pairDriver) Watch(_ context.Context, service string) (driver.Stream, error) {
	sctx, cancel := context.WithCancel(context.Background())
	st := &stream{d: d, service: service, cancel: cancel, closed: make(chan struct{})}
	st.wg.Add(2)
	for i := range 2 {
		go st.follow(sctx, i)
	}
	return st, nil
}

type stream struct {
	d       *pairDriver
	service string
	cancel  context.CancelFunc
	closed  chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
	heard   [2]bool          // this stream has an answer from the side; d.mu held
	last    *driver.Snapshot // last union returned
	// changed and expires are the wake-ups of the last union returned:
	// the next Next waits for one of them.
	changed <-chan struct{}
	expires time.Time
}

// follow feeds side i's states for the stream's service into the driver
// until the stream closes.
func (st *stream) follow(ctx context.Context, i int) {
	defer st.wg.Done()
	for attempt := 0; ; attempt++ {
		err := st.pump(ctx, i)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			attempt = 0
		}
		select {
		case <-time.After(backoff.Policy{Base: 100 * time.Millisecond, Max: 2 * time.Second}.Delay(attempt)):
		case <-ctx.Done():
			return
		}
	}
}

// pump runs one stream on side i until it fails; it returns nil if the
// stream delivered at least one state.
func (st *stream) pump(ctx context.Context, i int) error {
	s, err := st.d.sides[i].Watch(ctx, st.service)
	delivered := false
	for err == nil {
		var snap driver.Snapshot
		if snap, err = s.Next(ctx); err == nil {
			delivered = true
			st.hear(i, snap, nil)
		}
	}
	err = st.d.classify(ctx, i, err)
	if s != nil {
		s.Close()
	}
	if ctx.Err() != nil {
		return err
	}
	st.hear(i, driver.Snapshot{}, err)
	st.d.noteSide(i, "watch", err)
	if delivered {
		return nil
	}
	return err
}

func (st *stream) hear(i int, snap driver.Snapshot, err error) {
	st.d.mu.Lock()
	st.heard[i] = true
	st.d.mu.Unlock()
	if err == nil {
		st.d.noteSide(i, "watch", nil)
	}
	st.d.observe(st.service, i, snap, err)
}

// Next returns the union once both sides answered (or failed), then the
// union again after each change of a side or of what the hold keeps.
func (st *stream) Next(ctx context.Context) (driver.Snapshot, error) {
	if st.changed != nil {
		if err := st.wait(ctx, st.changed, st.expires); err != nil {
			return driver.Snapshot{}, err
		}
	}
	for {
		d := st.d
		d.mu.Lock()
		ready := st.heard[0] && st.heard[1]
		snap, expires, err := d.unionLocked(st.service, time.Now())
		ch := d.stateLocked(st.service).changed
		d.mu.Unlock()
		if ready && err != nil {
			return driver.Snapshot{}, err
		}
		if ready {
			// SameInstances compares in order: the same instances in
			// another order only cost a revision more.
			if st.last != nil && snap.Revision <= st.last.Revision && !st.last.SameInstances(snap) {
				// No side changed, a held side's state expired: a new
				// revision all the same.
				snap.Revision = d.rev.Add(1)
			}
			st.last, st.changed, st.expires = &snap, ch, expires
			return snap, nil
		}
		if err := st.wait(ctx, ch, expires); err != nil {
			return driver.Snapshot{}, err
		}
	}
}

// wait blocks until the service's state changes, a held side's state
// expires (at expires, unless zero), or the stream ends.
func (st *stream) wait(ctx context.Context, changed <-chan struct{}, expires time.Time) error {
	var timer <-chan time.Time
	if !expires.IsZero() {
		t := time.NewTimer(time.Until(expires))
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-changed:
	case <-timer:
	case <-ctx.Done():
		return ctx.Err()
	case <-st.closed:
		return fmt.Errorf("dual: watch: %w", driver.ErrClosed)
	}
	return nil
}

// Close stops both sides' streams. The side streams stop on their
// context, so Close does not wait on the network beyond that.
func (st *stream) Close() error {
	st.once.Do(func() {
		close(st.closed)
		st.cancel()
		st.wg.Wait()
	})
	return nil
}
