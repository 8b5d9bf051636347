package middleware

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrCircuitOpen is the error of a call that a service's open circuit
// breaker rejected locally, without sending it.
var ErrCircuitOpen = errors.New("middleware: circuit breaker open")

// BreakerConfig tunes the circuit breaker. Zero fields take the defaults,
// which are Hystrix's.
type BreakerConfig struct {
	// FailureRatio opens the circuit when at least this share of the calls
	// in the window failed (default 0.5).
	FailureRatio float64
	// MinRequests: with fewer calls in the window the circuit stays closed
	// (default 20).
	MinRequests int
	// Window over which calls are counted while closed (default 10s).
	Window time.Duration
	// OpenTimeout is how long the circuit stays open before it lets probe
	// calls through (default 5s).
	OpenTimeout time.Duration
	// HalfOpenProbes is how many probe calls the half-open circuit lets
	// through; all must succeed to close it, one failure opens it again
	// (default 1).
	HalfOpenProbes int
}

func (c BreakerConfig) withDefaults() BreakerConfig {
	if c.FailureRatio <= 0 || c.FailureRatio > 1 {
		c.FailureRatio = 0.5
	}
	c.MinRequests = orDefault(c.MinRequests, 20)
	c.Window = orDefault(c.Window, 10*time.Second)
	c.OpenTimeout = orDefault(c.OpenTimeout, 5*time.Second)
	c.HalfOpenProbes = orDefault(c.HalfOpenProbes, 1)
	return c
}

// BreakerState is the state of a service's circuit.
type BreakerState int32

const (
	// BreakerClosed: calls go through and are counted.
	BreakerClosed BreakerState = iota
	// BreakerHalfOpen: a few probe calls go through, the others are
	// rejected; the probes' outcome closes or reopens the circuit.
	BreakerHalfOpen
	// BreakerOpen: every call is rejected with ErrCircuitOpen.
	BreakerOpen
)

func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerHalfOpen:
		return "half_open"
	case BreakerOpen:
		return "open"
	}
	return "unknown"
}

// Breaker is a circuit breaker per service: closed, it counts calls over a
// sliding window and opens when too many fail; open, it rejects every call
// with ErrCircuitOpen for OpenTimeout; then half-open, it lets
// HalfOpenProbes calls through, and closes when they all succeed or opens
// again at the first failure. Outcomes are judged as Throttle's (Success
// and Business succeed; Retryable, Fatal and the caller's deadline fail).
// Safe for concurrent use; closed, the call path takes no lock.
type Breaker struct {
	cfg      BreakerConfig
	services sync.Map // service → *circuit
}

// NewBreaker returns a Breaker with cfg (zero fields: defaults).
func NewBreaker(cfg BreakerConfig) *Breaker { return &Breaker{cfg: cfg.withDefaults()} }

type circuit struct {
	state     atomic.Int32 // BreakerState
	openUntil atomic.Int64 // unix ns
	admitted  atomic.Int32 // probes let through in this half-open period
	w         window
	err       error // the rejection, built once

	mu     sync.Mutex // guards transitions and passed
	passed int        // probes that succeeded in this half-open period
}

func (b *Breaker) circuit(name string) (*circuit, bool) {
	if c, ok := b.services.Load(name); ok {
		return c.(*circuit), false
	}
	c := &circuit{err: rejectionError(name, ErrCircuitOpen)}
	c.w.init(b.cfg.Window)
	v, loaded := b.services.LoadOrStore(name, c)
	return v.(*circuit), !loaded
}

// State returns the state of service's circuit (closed for a service the
// breaker has not seen).
func (b *Breaker) State(service string) BreakerState {
	c, ok := b.services.Load(service)
	if !ok {
		return BreakerClosed
	}
	return BreakerState(c.(*circuit).state.Load())
}

// Middleware returns the breaker as a chain element. Place it outside
// Retry, so that it judges calls, not attempts.
func (b *Breaker) Middleware() Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, req *Request) error {
			c, created := b.circuit(req.Service)
			if created {
				req.tel.breakerState(ctx, req.Service, BreakerClosed)
			}
			now := req.Start.UnixNano()
			probe, ok, changed := c.allow(now, b.cfg)
			if changed {
				req.tel.breakerState(ctx, req.Service, BreakerHalfOpen)
			}
			if !ok {
				req.tel.rejected(ctx, req.Service, rejectCircuitOpen)
				return c.err
			}
			err := next(ctx, req)
			counted, failed := outcome(ctx, req, err)
			if to, changed := c.record(now, probe, counted, failed, b.cfg); changed {
				req.tel.breakerState(ctx, req.Service, to)
			}
			return err
		}
	}
}

// allow reports whether a call may go through at now, and whether it is a
// half-open probe; changed is set when this call moved the circuit from
// open to half-open.
func (c *circuit) allow(now int64, cfg BreakerConfig) (probe, ok, changed bool) {
	switch BreakerState(c.state.Load()) {
	case BreakerClosed:
		return false, true, false
	case BreakerOpen:
		if now < c.openUntil.Load() {
			return false, false, false
		}
		c.mu.Lock()
		if BreakerState(c.state.Load()) == BreakerOpen && now >= c.openUntil.Load() {
			c.admitted.Store(0)
			c.passed = 0
			c.state.Store(int32(BreakerHalfOpen))
			changed = true
		}
		c.mu.Unlock()
	}
	if BreakerState(c.state.Load()) != BreakerHalfOpen {
		return false, true, changed // closed meanwhile by the probes
	}
	if c.admitted.Load() >= int32(cfg.HalfOpenProbes) || c.admitted.Add(1) > int32(cfg.HalfOpenProbes) {
		return false, false, changed
	}
	return true, true, changed
}

// record takes a call's outcome; it returns the new state when the call
// changed it.
func (c *circuit) record(now int64, probe, counted, failed bool, cfg BreakerConfig) (BreakerState, bool) {
	if probe {
		return c.probed(now, counted, failed, cfg)
	}
	if !counted {
		return 0, false
	}
	c.w.add(now, failed)
	if !failed || BreakerState(c.state.Load()) != BreakerClosed {
		return 0, false
	}
	requests, failures := c.w.sum(now)
	if requests < int64(cfg.MinRequests) || float64(failures) < cfg.FailureRatio*float64(requests) {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if BreakerState(c.state.Load()) != BreakerClosed {
		return 0, false
	}
	c.open(now, cfg)
	return BreakerOpen, true
}

// probed takes a half-open probe's outcome.
func (c *circuit) probed(now int64, counted, failed bool, cfg BreakerConfig) (BreakerState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if BreakerState(c.state.Load()) != BreakerHalfOpen {
		return 0, false
	}
	switch {
	case !counted: // the caller gave up: let another call probe
		c.admitted.Add(-1)
		return 0, false
	case failed:
		c.open(now, cfg)
		return BreakerOpen, true
	}
	c.passed++
	if c.passed < cfg.HalfOpenProbes {
		return 0, false
	}
	c.w.reset() // start closed with a clean slate
	c.state.Store(int32(BreakerClosed))
	return BreakerClosed, true
}

// open opens the circuit from now; c.mu held.
func (c *circuit) open(now int64, cfg BreakerConfig) {
	c.openUntil.Store(now + int64(cfg.OpenTimeout))
	c.state.Store(int32(BreakerOpen))
}
