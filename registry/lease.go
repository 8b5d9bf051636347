package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/roster-go/roster/internal/backoff"
	"github.com/roster-go/roster/registry/driver"
)

// LeaseState is the state of a registration kept alive by a Lease.
type LeaseState int32

const (
	// LeaseHealthy: registered, heartbeats succeeding.
	LeaseHealthy LeaseState = iota
	// LeaseReregistering: the backend lost the registration or cannot be
	// reached for longer than the TTL; the lease is writing it again with
	// backoff, forever, until Deregister or Close.
	LeaseReregistering
	// LeaseWithdrawn: the local health check fails; the instance is removed
	// from the registry until the check passes again.
	LeaseWithdrawn
	// LeaseClosed: deregistered, abandoned or the registry was closed.
	LeaseClosed
)

func (s LeaseState) String() string {
	switch s {
	case LeaseHealthy:
		return "healthy"
	case LeaseReregistering:
		return "re-registering"
	case LeaseWithdrawn:
		return "withdrawn"
	case LeaseClosed:
		return "closed"
	}
	return fmt.Sprintf("LeaseState(%d)", int(s))
}

// Lease keeps one registration alive. It heartbeats every interval (TTL/3
// by default, with jitter); when the backend reports the registration lost
// — expired during an outage, deleted externally, data wiped, agent
// restarted — it registers again by itself with capped, jittered backoff,
// until Deregister, Abandon or Registry.Close. Its methods are safe for
// concurrent use.
type Lease struct {
	r          *Registry
	id         string // the instance ID, fixed for the lease's life
	ttl        time.Duration
	interval   time.Duration
	policy     backoff.Policy
	check      func(context.Context) error
	checkEvery time.Duration
	onState    func(LeaseState, error)

	// opMu serialises driver calls on the registration: the loop's
	// heartbeats and re-registrations, and Update/Deregister from callers.
	opMu sync.Mutex
	reg  driver.Registration // nil while withdrawn or lost

	mu    sync.Mutex
	inst  Instance
	state LeaseState
	err   error

	// The registry's grid runs the lease's heartbeats and
	// re-registrations (beat.go); stepMu serialises them with the health
	// check's transitions. lastOK and attempt are the step's, under stepMu.
	stepMu  sync.Mutex
	ctx     context.Context // ends at halt
	lastOK  time.Time
	attempt int
	sched   leaseSched // the registry grid's mu guards it
	halted  atomic.Bool

	stop    chan struct{}
	done    chan struct{} // closed when the health check's goroutine ends
	cancel  context.CancelFunc
	stopped sync.Once
}

// Instance returns the registered instance (with its ID).
func (l *Lease) Instance() Instance {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inst.Clone()
}

// TTL returns the effective TTL (the requested one rounded up to the
// backend's granularity).
func (l *Lease) TTL() time.Duration { return l.ttl }

// HeartbeatInterval returns the heartbeat period.
func (l *Lease) HeartbeatInterval() time.Duration { return l.interval }

// State returns the current state.
func (l *Lease) State() LeaseState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

// Err returns the last error seen by the lease (a failed heartbeat,
// re-registration or health check), or nil once it is healthy again.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Drain sets the instance's weight to 0 in the registry, so that selectors
// stop sending it new work while it finishes what it has; the
// registration stays alive until Deregister.
func (l *Lease) Drain(ctx context.Context) error { return l.SetWeight(ctx, 0) }

// SetWeight changes the instance's weight in the registry. Weight 0 means
// draining.
func (l *Lease) SetWeight(ctx context.Context, w uint32) error {
	return l.update(ctx, func(in *Instance) { in.Weight = w })
}

// SetMetadata replaces the instance's metadata in the registry.
func (l *Lease) SetMetadata(ctx context.Context, md map[string]string) error {
	return l.update(ctx, func(in *Instance) { in.Metadata = md })
}

func (l *Lease) update(ctx context.Context, f func(*Instance)) error {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	l.mu.Lock()
	if l.state == LeaseClosed {
		l.mu.Unlock()
		return fmt.Errorf("lease %s: %w", l.inst.ID, ErrClosed)
	}
	next := l.inst.Clone()
	f(&next)
	if err := backend.ValidateInstance(next); err != nil {
		l.mu.Unlock()
		return err
	}
	l.mu.Unlock()
	if l.reg != nil {
		if err := l.reg.Update(ctx, next); err != nil {
			return fmt.Errorf("lease %s: update: %w", next.ID, err)
		}
	}
	// While withdrawn or lost, the next registration writes the new state.
	l.mu.Lock()
	l.inst = next
	l.mu.Unlock()
	return nil
}

// Deregister stops the heartbeats and removes the instance from the
// registry. If the backend cannot be reached the error says so, and the
// instance disappears when its TTL runs out. Calling it again returns
// ErrClosed.
func (l *Lease) Deregister(ctx context.Context) error {
	if !l.halt() {
		return fmt.Errorf("lease %s: %w", l.id, ErrClosed)
	}
	l.r.forget(l)
	l.opMu.Lock()
	reg := l.reg
	l.reg = nil
	l.opMu.Unlock()
	if reg == nil {
		return nil
	}
	if err := reg.Deregister(ctx); err != nil {
		return fmt.Errorf("lease %s: deregister: %w", l.id, err)
	}
	return nil
}

// Abandon stops the heartbeats without deregistering, as if the process
// had crashed: the backend drops the instance when its TTL runs out. It is
// how tests and hand-offs simulate a crash.
func (l *Lease) Abandon() {
	if l.halt() {
		l.r.forget(l)
	}
}

// halt stops the loop; it reports whether this call did it.
func (l *Lease) halt() bool {
	first := false
	l.stopped.Do(func() {
		first = true
		l.halted.Store(true)
		close(l.stop)
		l.cancel()
		l.r.beats.interrupt(l)
		<-l.done
		// A step in flight holds stepMu; none starts after halted.
		l.stepMu.Lock()
		l.stepMu.Unlock()
		l.setState(LeaseClosed, nil)
	})
	return first
}

func (l *Lease) setState(s LeaseState, err error) {
	l.mu.Lock()
	changed := l.state != s
	l.state, l.err = s, err
	inst := l.inst
	l.mu.Unlock()
	if !changed {
		return
	}
	if l.r.log != nil {
		l.r.log.Info("roster: lease state", "id", inst.ID, "service", inst.Service, "state", s.String(), "err", err)
	}
	if l.r.obs != nil {
		l.r.obs.LeaseState(inst, s, err)
	}
	if l.onState != nil {
		l.callHook(s, err)
	}
}

// callHook runs the user's state hook; a panic in it is logged, never
// allowed to kill the lease's goroutine (and with it the process).
func (l *Lease) callHook(s LeaseState, err error) {
	defer func() {
		if p := recover(); p != nil {
			l.r.logf("roster: lease state hook panicked", "id", l.id, "panic", p)
		}
	}()
	l.onState(s, err)
}

// runCheck runs a health check; a panic counts as a failed check.
func runCheck(ctx context.Context, check func(context.Context) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return check(ctx)
}

func (l *Lease) setErr(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
}

// start puts the lease on the registry's grid, and starts its health
// check's goroutine if it has one.
func (l *Lease) start(ctx context.Context, lastOK time.Time) {
	l.ctx, l.lastOK = ctx, lastOK
	l.sched.at = -1
	if l.check != nil {
		go l.checkLoop(ctx)
	} else {
		close(l.done)
	}
	if l.State() == LeaseHealthy { // not withdrawn from the start
		l.r.beats.schedule(l, backoff.Jitter(l.interval, 0.2))
	}
}

// checkLoop is the health check's goroutine.
func (l *Lease) checkLoop(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(l.checkEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.checkHealth(ctx)
		}
	}
}

// step is what the grid runs when the lease is due. Heartbeats are due
// every interval; failures are retried sooner, with backoff, and after a
// full TTL without a successful heartbeat — or as soon as the backend
// says the registration is gone — the lease switches to registering
// again. It returns when the lease is next due, or false when it is not
// (halted, withdrawn).
// A heartbeat runs within hctx, the slot goroutine's context, which ends
// within callTimeout and when the lease halts (grid.interrupt).
func (l *Lease) step(hctx context.Context) (time.Duration, bool) {
	l.stepMu.Lock()
	defer l.stepMu.Unlock()
	ctx := l.ctx
	for !l.halted.Load() {
		switch l.State() {
		case LeaseHealthy:
			err := l.heartbeat(hctx)
			switch {
			case err == nil:
				l.lastOK, l.attempt = time.Now(), 0
				l.setErr(nil)
				return backoff.Jitter(l.interval, 0.2), true
			case l.halted.Load():
				return 0, false
			case errors.Is(err, ErrNotFound) || time.Since(l.lastOK) >= l.ttl:
				l.setState(LeaseReregistering, err)
				l.attempt = 0
				continue // at once
			default:
				l.setErr(err)
				d := min(l.policy.Delay(l.attempt), l.interval)
				l.attempt++
				return d, true
			}
		case LeaseReregistering:
			err := l.register(ctx)
			switch {
			case err == nil:
				l.lastOK, l.attempt = time.Now(), 0
				l.setState(LeaseHealthy, nil)
				return backoff.Jitter(l.interval, 0.2), true
			case ctx.Err() != nil:
				return 0, false
			default:
				l.setErr(err)
				d := l.policy.Delay(l.attempt)
				l.attempt++
				return d, true
			}
		default: // withdrawn: the health check reschedules it
			return 0, false
		}
	}
	return 0, false
}

// callTimeout bounds one driver call of the lease.
func (l *Lease) callTimeout() time.Duration { return max(l.interval, time.Second) }

func (l *Lease) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, l.callTimeout())
}

// heartbeat runs within ctx, which the grid bounds (slotRun.ctxFor): a
// context per heartbeat was most of the engine's cost.
func (l *Lease) heartbeat(ctx context.Context) error {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	if l.reg == nil {
		return ErrNotFound
	}
	return l.reg.Heartbeat(ctx)
}

func (l *Lease) register(ctx context.Context) error {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	cctx, cancel := l.callCtx(ctx)
	defer cancel()
	reg, err := l.r.drv.Register(cctx, l.Instance(), l.ttl)
	if err != nil {
		return err
	}
	l.reg = reg
	return nil
}

func (l *Lease) checkHealth(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, l.checkEvery)
	err := runCheck(cctx, l.check)
	cancel()
	if ctx.Err() != nil {
		return
	}
	l.stepMu.Lock()
	defer l.stepMu.Unlock()
	state := l.State()
	switch {
	case err != nil && state != LeaseWithdrawn:
		l.r.beats.unschedule(l)
		l.opMu.Lock()
		reg := l.reg
		l.reg = nil
		l.opMu.Unlock()
		l.setState(LeaseWithdrawn, fmt.Errorf("health check: %w", err))
		if reg != nil {
			dctx, cancel := l.callCtx(ctx)
			// Best effort: if this fails the instance still expires with its TTL.
			if derr := reg.Deregister(dctx); derr != nil {
				l.setErr(fmt.Errorf("health check: %w; withdraw: %w", err, derr))
			}
			cancel()
		}
	case err != nil:
		l.setErr(fmt.Errorf("health check: %w", err))
	case state == LeaseWithdrawn:
		l.setState(LeaseReregistering, nil)
		l.r.beats.schedule(l, 0)
	}
}
