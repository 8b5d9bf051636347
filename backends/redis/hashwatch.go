package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/registry/driver"
)

// hashStream follows one service: the driver's logMux reads its change
// log (one XREAD BLOCK for many services); the stream applies the entries
// to its copy of the instances while their revisions follow each other,
// relisting when they do not.
type hashStream struct {
	h    *hashLayout
	svc  string
	keys hashKeys
	sub  *logSub // nil until the first relist

	insts   map[string]driver.Instance
	rev     uint64
	lastID  string
	listed  driver.Snapshot // the last relist: the first state delivered
	pending bool            // listed not yet delivered (the first Next)

	relistedAt time.Time     // when the last resync's relist began
	relistTook time.Duration // how long it took
	readFailed bool          // the last XREAD failed

	sweepErr atomic.Pointer[error] // why the driver's sweeper gave up on the service

	closeOnce sync.Once
	closed    chan struct{}
}

func (h *hashLayout) watch(ctx context.Context, service string) (driver.Stream, error) {
	st := &hashStream{h: h, svc: service, keys: h.hkeys(service), closed: make(chan struct{})}
	if err := st.relist(ctx); err != nil {
		return nil, err
	}
	sub, err := h.mux.subscribe(ctx, service, st.keys.log, st.keys.rev, st.lastID)
	if err != nil {
		return nil, err
	}
	st.sub = sub
	sub.seen(st.rev)
	st.pending = true
	h.sweeps.add(st)
	return st, nil
}

// relist replaces the stream's state with a fresh snapshot, and moves the
// log subscription to the snapshot's last entry. It reads on the mux's
// client, which does not retry: a relist that fails reports the outage at
// once.
func (st *hashStream) relist(ctx context.Context) error {
	s, lastID, err := st.h.snapshot(ctx, st.h.mux.client(), st.svc)
	if err != nil {
		return err
	}
	if st.sub != nil {
		if err := st.sub.reset(ctx, lastID); err != nil {
			return err
		}
	}
	st.insts = make(map[string]driver.Instance, len(s.Instances))
	for _, in := range s.Instances {
		st.insts[in.ID] = in
	}
	st.rev, st.lastID = s.Revision, lastID
	st.listed = s
	if st.sub != nil {
		st.sub.seen(st.rev)
	}
	if len(s.Instances) > 0 {
		st.h.sweeps.kick(st.svc) // an idle service may have members again
	}
	return nil
}

// current builds a snapshot of the stream's state.
func (st *hashStream) current() driver.Snapshot {
	s := driver.Snapshot{Service: st.svc, Revision: st.rev, At: time.Now(), Instances: make([]driver.Instance, 0, len(st.insts))}
	for _, in := range st.insts {
		s.Instances = append(s.Instances, in)
	}
	return s
}

// opening answers a watch's Next without reading: ErrClosed once the
// stream is closed, else the snapshot the watch opened with, once (ok).
func opening(svc string, closed <-chan struct{}, pending *bool, first driver.Snapshot) (driver.Snapshot, bool, error) {
	select {
	case <-closed:
		return driver.Snapshot{}, true, fmt.Errorf("redis: watch %s: %w", svc, driver.ErrClosed)
	default:
	}
	if *pending {
		*pending = false
		return first, true, nil
	}
	return driver.Snapshot{}, false, nil
}

func (st *hashStream) Next(ctx context.Context) (driver.Snapshot, error) {
	if s, ok, err := opening(st.svc, st.closed, &st.pending, st.listed); ok {
		return s, err
	}
	for {
		if err := ctx.Err(); err != nil {
			return driver.Snapshot{}, err
		}
		if serr := st.sweepErr.Load(); serr != nil {
			return driver.Snapshot{}, *serr
		}
		if st.sub.stale.Swap(false) {
			if s, ok, err := st.quietCheck(ctx); err != nil || ok {
				return s, err
			}
		}
		msgs, err := st.sub.wait(ctx, st.closed)
		if err != nil {
			if s, ok, err := st.readFailure(ctx, err); err != nil || ok {
				return s, err
			}
			continue
		}
		if len(msgs) == 0 {
			continue // quiet, poked or closed: checked above
		}
		if s, ok, err := st.applyAll(ctx, msgs); err != nil || ok {
			return s, err
		}
	}
}

// quietCheck runs when the shard's quiet check (muxShard.checkRevs)
// found the revision counter moved without log entries. The counter moves
// with every change, in the same script, so an unchanged counter means
// nothing was missed. The check reads it again, one GET, as an entry may
// have arrived meanwhile. Anything else — a FLUSHALL, a failover that lost
// writes, a counter that restarted, a failed read — relists.
func (st *hashStream) quietCheck(ctx context.Context) (driver.Snapshot, bool, error) {
	if msgs, err := st.sub.take(); len(msgs) > 0 || err != nil {
		st.sub.requeue(msgs, err)
		return driver.Snapshot{}, false, nil // entries first
	}
	rev, err := st.h.mux.client().Get(ctx, st.keys.rev).Uint64()
	if errors.Is(err, goredis.Nil) {
		rev, err = 0, nil // forgotten: an empty service
	}
	if err == nil && rev == st.rev {
		st.sub.seen(st.rev)
		return driver.Snapshot{}, false, nil
	}
	return st.resync(ctx)
}

// readFailure handles a failed shared read. A broken connection may have
// missed nothing (the log is resumable) or a whole restart: relist once
// through the relist client. If that fails too, or reading fails again
// before an entry arrives, the backend is unavailable.
func (st *hashStream) readFailure(ctx context.Context, err error) (driver.Snapshot, bool, error) {
	select {
	case <-st.closed:
		return driver.Snapshot{}, false, fmt.Errorf("redis: watch %s: %w", st.svc, driver.ErrClosed)
	default:
	}
	if st.readFailed || ctx.Err() != nil || st.sweepErr.Load() != nil {
		return driver.Snapshot{}, false, st.fail(ctx, err)
	}
	st.readFailed = true
	return st.resync(ctx)
}

// applyAll applies entries read from the log; ok reports a state to
// deliver, changed or not (Registry drops repeats).
func (st *hashStream) applyAll(ctx context.Context, msgs []goredis.XMessage) (driver.Snapshot, bool, error) {
	st.readFailed = false
	defer func() { st.sub.seen(st.rev) }()
	for _, m := range msgs {
		if !idLess(st.lastID, m.ID) {
			continue // already in the last relist
		}
		if !st.apply(m) {
			// A trimmed log, a FLUSHALL or lost writes: relist.
			return st.resync(ctx)
		}
	}
	return st.current(), true, nil
}

// apply applies one log entry; false when its revision does not follow.
func (st *hashStream) apply(m goredis.XMessage) bool {
	rev, put, ok := applyEntry(st.insts, st.rev, m)
	if !ok {
		return false
	}
	if put {
		// A new member may expire before the sweep scheduled so far:
		// sweep now, which learns the earliest deadline again.
		st.h.sweeps.kick(st.svc)
	}
	st.rev, st.lastID = rev, m.ID
	return true
}

// applyEntry applies a log entry to insts, at revision rev. It reports
// the entry's revision and whether it was a put; ok is false when the
// revision does not follow or the entry is not Roster's.
func applyEntry(insts map[string]driver.Instance, rev uint64, m goredis.XMessage) (next uint64, put, ok bool) {
	str := func(k string) string { v, _ := m.Values[k].(string); return v }
	next, err := strconv.ParseUint(str("rev"), 10, 64)
	if err != nil || next != rev+1 {
		return 0, false, false
	}
	switch str("op") {
	case "put":
		in, err := decodeRecord(str("data"))
		if err != nil || in.ID != str("id") {
			return 0, false, false
		}
		insts[in.ID] = in
		return next, true, true
	case "del":
		delete(insts, str("id"))
		return next, false, true
	}
	return 0, false, false
}

// Relists are throttled per watch. Another writer of the keyspace can
// append log entries whose revisions do not follow, and each would cost
// every watcher a relist: 582 such entries in a service of 100,000
// records, with 3 watchers, took Redis's latency to 343ms for every
// tenant. A watch relists at once after a calm spell, but at most once per
// minRelistGap, and spends at most 1/relistShare of its time relisting.
// Entries that arrive while it waits are covered by the relist.
const (
	minRelistGap = time.Second
	relistShare  = 10
)

// resync relists; ok is always true: the state is delivered, changed or
// not (Registry drops repeats).
func (st *hashStream) resync(ctx context.Context) (driver.Snapshot, bool, error) {
	if err := st.throttle(ctx); err != nil {
		return driver.Snapshot{}, false, st.fail(ctx, err)
	}
	st.relistedAt = time.Now()
	err := st.relist(ctx)
	st.relistTook = time.Since(st.relistedAt)
	if err != nil {
		return driver.Snapshot{}, false, st.fail(ctx, err)
	}
	return st.listed, true, nil
}

// throttle waits until the watch may relist again.
func (st *hashStream) throttle(ctx context.Context) error {
	gap := max(minRelistGap, relistShare*st.relistTook)
	d := time.Until(st.relistedAt.Add(gap))
	if st.relistedAt.IsZero() || d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-st.closed:
		return fmt.Errorf("redis: watch %s: %w", st.svc, driver.ErrClosed)
	}
}

func (st *hashStream) fail(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if serr := st.sweepErr.Load(); serr != nil {
		return *serr // the sweeper closed the read: report its error
	}
	select {
	case <-st.closed:
		return fmt.Errorf("redis: watch %s: %w", st.svc, driver.ErrClosed)
	default:
	}
	return err // wrapped where it was made
}

func (st *hashStream) Close() error {
	st.closeOnce.Do(func() {
		close(st.closed)
		st.h.sweeps.remove(st)
		st.sub.unsubscribe()
	})
	return nil
}
