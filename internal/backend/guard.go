package backend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/roster-go/roster/registry/driver"
)

// Guard wraps a driver with the chores every driver method would repeat:
// a context that has ended never reaches the driver, no call starts after
// Close and none is in flight when the driver's Close runs, and every
// error is mapped to a sentinel once, through the driver's ErrorKind.
// Registry guards its driver. A driver over other drivers, as dual://
// is, may guard them too; dual classifies its sides' errors itself.
func Guard(d driver.Driver) driver.Driver { return newGuard(d) }

// closeGrace bounds how long Close waits for calls in flight.
const closeGrace = 5 * time.Second

type guard struct {
	d driver.Driver

	mu     sync.Mutex
	closed bool
	calls  sync.WaitGroup
	stop   context.Context // canceled by close: ends the calls in flight
	cancel context.CancelFunc
}

func newGuard(d driver.Driver) *guard {
	g := &guard{d: d}
	g.stop, g.cancel = context.WithCancel(context.Background())
	return g
}

// enter admits one driver call. The returned context also ends at close;
// leave must be called when the driver returns.
func (g *guard) enter(ctx context.Context) (context.Context, func(), error) {
	if err := g.admit(ctx); err != nil {
		return nil, nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(g.stop, cancel)
	return cctx, func() { unhook(); cancel(); g.calls.Done() }, nil
}

// admit counts one call in flight, unless ctx ended or the guard closed.
func (g *guard) admit(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return driver.ErrClosed
	}
	g.calls.Add(1)
	return nil
}

// mapErr gives a driver's error its sentinel. An error that wraps one
// already is returned as is, as is the caller's own context error.
func (g *guard) mapErr(ctx context.Context, err error) error {
	switch {
	case err == nil || isSentinel(err):
		return err
	case ctx.Err() != nil:
		if errors.Is(err, ctx.Err()) {
			return err
		}
		return fmt.Errorf("%w: %w", err, ctx.Err())
	case g.stop.Err() != nil:
		return fmt.Errorf("%w: %w", err, driver.ErrClosed)
	}
	kind := g.d.ErrorKind(err)
	if kind != driver.ErrNotFound && kind != driver.ErrInvalid {
		kind = driver.ErrUnavailable
	}
	return fmt.Errorf("%w: %w", err, kind)
}

func isSentinel(err error) bool {
	return errors.Is(err, driver.ErrInvalid) || errors.Is(err, driver.ErrNotFound) ||
		errors.Is(err, driver.ErrUnavailable) || errors.Is(err, driver.ErrClosed) ||
		errors.Is(err, driver.ErrConflict)
}

// close ends the calls in flight, waits for them (at most closeGrace: a
// driver that ignores its context must not hang Close), then closes the
// driver.
func (g *guard) close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return driver.ErrClosed
	}
	g.closed = true
	g.mu.Unlock()
	g.cancel()
	done := make(chan struct{})
	go func() { g.calls.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(closeGrace):
	}
	return g.d.Close()
}

// call runs one driver method under the guard.
func call[T any](g *guard, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	cctx, leave, err := g.enter(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	defer leave()
	v, err := f(cctx)
	return v, g.mapErr(ctx, err)
}

// open runs Register or Watch under the guard. Their context is passed on
// as given, not canceled on return: a driver may tie what it opens (a
// stream, a keep-alive) to it.
func open[T any](g *guard, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	if err := g.admit(ctx); err != nil {
		var zero T
		return zero, err
	}
	defer g.calls.Done()
	v, err := f(ctx)
	return v, g.mapErr(ctx, err)
}

func (g *guard) Register(ctx context.Context, inst driver.Instance, ttl time.Duration) (driver.Registration, error) {
	reg, err := open(g, ctx, func(ctx context.Context) (driver.Registration, error) { return g.d.Register(ctx, inst, ttl) })
	if err != nil {
		return nil, err
	}
	return guardedReg{g: g, reg: reg}, nil
}

func (g *guard) List(ctx context.Context, service string) (driver.Snapshot, error) {
	return call(g, ctx, func(ctx context.Context) (driver.Snapshot, error) { return g.d.List(ctx, service) })
}

func (g *guard) Watch(ctx context.Context, service string) (driver.Stream, error) {
	st, err := open(g, ctx, func(ctx context.Context) (driver.Stream, error) { return g.d.Watch(ctx, service) })
	if err != nil {
		return nil, err
	}
	return guardedStream{g: g, st: st}, nil
}

func (g *guard) Services(ctx context.Context) ([]string, error) {
	return call(g, ctx, g.d.Services)
}

func (g *guard) Limits() driver.Limits     { return g.d.Limits() }
func (g *guard) ErrorKind(err error) error { return g.d.ErrorKind(err) }
func (g *guard) Close() error              { return g.close() }

type guardedReg struct {
	g   *guard
	reg driver.Registration
}

func (r guardedReg) Heartbeat(ctx context.Context) error {
	_, err := call(r.g, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, r.reg.Heartbeat(ctx) })
	return err
}

func (r guardedReg) Update(ctx context.Context, inst driver.Instance) error {
	_, err := call(r.g, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, r.reg.Update(ctx, inst) })
	return err
}

func (r guardedReg) Deregister(ctx context.Context) error {
	_, err := call(r.g, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, r.reg.Deregister(ctx) })
	return err
}

type guardedStream struct {
	g  *guard
	st driver.Stream
}

func (s guardedStream) Next(ctx context.Context) (driver.Snapshot, error) {
	return call(s.g, ctx, s.st.Next)
}

// Close is always passed on: a stream's resources are released even
// after the driver closed.
func (s guardedStream) Close() error { return s.st.Close() }
