package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/registry/driver"
)

// minSweepGap keeps a watch from sweeping in a tight loop when a deadline
// is due but its record is still alive for a few more microseconds.
const minSweepGap = 5 * time.Millisecond

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
	last    driver.Snapshot // last delivered
	pending bool            // last not yet delivered (the first snapshot)

	lastActive time.Time // last log entry or relist
	readFailed bool      // the last XREAD failed

	kick        chan struct{} // 1-buffered: "sweep now"
	stopSweeper context.CancelFunc
	sweepErr    atomic.Pointer[error] // why the sweeper gave up
	token       string                // names this watch in the sweeper lease
	holding     bool                  // this watch sweeps; owned by the sweeper goroutine

	closeOnce sync.Once
	closed    chan struct{}
}

func (h *hashLayout) watch(ctx context.Context, service string) (driver.Stream, error) {
	st := &hashStream{h: h, svc: service, keys: h.hkeys(service), closed: make(chan struct{}), token: fmt.Sprintf("%016x", rand.Uint64())}
	if err := st.relist(ctx); err != nil {
		return nil, err
	}
	sub, err := h.mux.subscribe(ctx, service, st.keys.log, st.lastID)
	if err != nil {
		return nil, err
	}
	st.sub = sub
	st.pending = true
	st.kick = make(chan struct{}, 1)
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	st.stopSweeper = cancel
	go st.sweeper(sctx)
	return st, nil
}

// sweeper sweeps the service when the earliest deadline in its index falls
// due, when a put arrives (the new member may be the earliest), and at
// least every sweep interval — if this watch holds the service's sweeper
// lease. Otherwise it tries to take the lease when the holder's would run
// out: N watchers of a service, in any number of processes, cost one sweep
// per interval plus one cheap claim per lease for each of the others, and
// a dead holder is replaced within a lease.
// It keeps its own clock: a Redis blocking read's timeout is only as
// precise as the server's hz (100ms at the default 10), too coarse to time
// expiry announcements.
func (st *hashStream) sweeper(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-st.kick:
			if !st.holding {
				continue // the holder reads the same put
			}
		case <-t.C:
		}
		next, err := st.sweepTurn(ctx)
		if err != nil && ctx.Err() == nil {
			next, err = st.sweepTurn(ctx) // the watch client does not retry
		}
		if err != nil && ctx.Err() == nil {
			// The client failed twice in a row: the backend is
			// unreachable. A blocked read on a silent (blackholed) link
			// would only notice after its block plus a 10s read timeout:
			// report the failure now, and make the shared read reconnect.
			st.sweepErr.CompareAndSwap(nil, &err)
			st.sub.poke()
			st.sub.shard.interrupt()
			return
		}
		t.Reset(next)
	}
}

// sweepTurn sweeps if this watch holds the sweeper lease or can take it,
// and returns when to come back.
func (st *hashStream) sweepTurn(ctx context.Context) (time.Duration, error) {
	if !st.holding {
		ok, left, err := st.h.claimSweeper(ctx, st.svc, st.token)
		if err != nil || !ok {
			return st.untilFree(left), err
		}
		st.holding = true
	}
	wait, lost, err := st.h.sweep(ctx, st.svc, st.token)
	switch {
	case err != nil:
		return 0, err
	case lost: // wait is the new holder's lease
		st.holding = false
		return st.untilFree(wait), nil
	case wait >= 0 && wait < st.h.o.Sweep:
		return max(wait+time.Millisecond, minSweepGap), nil
	}
	return st.h.o.Sweep, nil
}

// untilFree is when to claim the lease again, given how long the holder's
// runs unless renewed: just after that, with a jitter of up to a quarter
// sweep interval so that the watchers of a service do not claim at once.
func (st *hashStream) untilFree(left time.Duration) time.Duration {
	return max(left, minSweepGap) + rand.N(st.h.o.Sweep/4+1)
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
	st.last = s
	st.lastActive = time.Now()
	return nil
}

// current builds a sorted snapshot of the stream's state.
func (st *hashStream) current() driver.Snapshot {
	s := driver.Snapshot{Service: st.svc, Revision: st.rev, At: time.Now(), Instances: make([]driver.Instance, 0, len(st.insts))}
	for _, in := range st.insts {
		s.Instances = append(s.Instances, in)
	}
	driver.SortInstances(s.Instances)
	return s
}

func (st *hashStream) Next(ctx context.Context) (driver.Snapshot, error) {
	select {
	case <-st.closed:
		return driver.Snapshot{}, fmt.Errorf("redis: watch %s: %w", st.svc, driver.ErrClosed)
	default:
	}
	if st.pending {
		st.pending = false
		return st.last, nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return driver.Snapshot{}, err
		}
		if serr := st.sweepErr.Load(); serr != nil {
			return driver.Snapshot{}, *serr
		}
		if time.Since(st.lastActive) >= st.h.o.Quiet {
			if s, ok, err := st.resync(ctx); err != nil || ok {
				return s, err
			}
		}
		msgs, err := st.sub.wait(ctx, st.closed, st.h.o.Quiet-time.Since(st.lastActive))
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

// applyAll applies entries read from the log; ok reports a changed state
// to deliver.
func (st *hashStream) applyAll(ctx context.Context, msgs []goredis.XMessage) (driver.Snapshot, bool, error) {
	st.readFailed = false
	st.lastActive = time.Now()
	for _, m := range msgs {
		if !idLess(st.lastID, m.ID) {
			continue // already in the last relist
		}
		if !st.apply(m) {
			// A trimmed log, a FLUSHALL or lost writes: relist.
			return st.resync(ctx)
		}
	}
	if s := st.current(); !s.SameInstances(st.last) {
		st.last = s
		return s, true, nil
	}
	return driver.Snapshot{}, false, nil
}

// apply applies one log entry; false when its revision does not follow.
func (st *hashStream) apply(m goredis.XMessage) bool {
	str := func(k string) string { v, _ := m.Values[k].(string); return v }
	rev, err := strconv.ParseUint(str("rev"), 10, 64)
	if err != nil || rev != st.rev+1 {
		return false
	}
	switch str("op") {
	case "put":
		in, err := decodeRecord(str("data"))
		if err != nil || in.ID != str("id") {
			return false
		}
		st.insts[in.ID] = in
		// A new member may expire before the sweep scheduled so far:
		// sweep now, which learns the earliest deadline again.
		select {
		case st.kick <- struct{}{}:
		default:
		}
	case "del":
		delete(st.insts, str("id"))
	default:
		return false
	}
	st.rev, st.lastID = rev, m.ID
	return true
}

// resync relists; ok reports a changed state to deliver.
func (st *hashStream) resync(ctx context.Context) (driver.Snapshot, bool, error) {
	prev := st.last
	if err := st.relist(ctx); err != nil {
		return driver.Snapshot{}, false, st.fail(ctx, err)
	}
	if st.last.SameInstances(prev) {
		st.last = prev
		return driver.Snapshot{}, false, nil
	}
	return st.last, true, nil
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
	if errors.Is(err, driver.ErrUnavailable) || errors.Is(err, driver.ErrClosed) {
		return err
	}
	return st.h.wrap("watch "+st.svc, err)
}

func (st *hashStream) Close() error {
	st.closeOnce.Do(func() {
		close(st.closed)
		st.stopSweeper()
		st.sub.unsubscribe()
	})
	return nil
}
