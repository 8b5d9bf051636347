package middleware_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

func TestHedgeCutsTheTail(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, id := range []string{"fast", "slow"} {
		if _, err := e.writer.Register(ctx, registry.Instance{ID: id, Service: "api", Address: "127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, e.reader,
		middleware.WithSelector(selector.WithStrategy(selector.RoundRobin)),
		middleware.WithMiddleware(
			middleware.Retry(middleware.RetryConfig{BudgetRatio: 1, BudgetMinPerSecond: 100}), // the hedge shares it
			middleware.Hedge(middleware.HedgeConfig{Delay: 20 * time.Millisecond})))
	var slowCancelled, calls atomic.Int32
	call := func(ctx context.Context, in registry.Instance) error {
		calls.Add(1)
		if in.ID == "slow" {
			select {
			case <-time.After(2 * time.Second):
				return nil
			case <-ctx.Done():
				slowCancelled.Add(1)
				return ctx.Err()
			}
		}
		return nil
	}
	start := time.Now()
	for i := 0; i < 10; i++ {
		if err := c.Do(ctx, "api", call); err != nil {
			t.Fatal(err)
		}
	}
	// Half the calls start on the slow instance; each is hedged after 20ms.
	if el := time.Since(start); el > time.Second {
		t.Fatalf("10 calls took %v: the slow instance was not hedged", el)
	}
	if slowCancelled.Load() == 0 || calls.Load() <= 10 {
		t.Fatalf("%d attempts, %d slow attempts cancelled: no hedge ran", calls.Load(), slowCancelled.Load())
	}
}

func TestHedgeRespectsTheBudget(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if _, err := e.writer.Register(ctx, registry.Instance{ID: id, Service: "api", Address: "127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
	}
	// A Retry that never retries, with a budget that allows no hedge at all.
	c := newClient(t, e.reader, middleware.WithMiddleware(
		middleware.Retry(middleware.RetryConfig{MaxAttempts: 1, BudgetRatio: -1, BudgetMinPerSecond: -1}),
		middleware.Hedge(middleware.HedgeConfig{Delay: time.Millisecond})))
	var calls atomic.Int32
	for i := 0; i < 5; i++ {
		err := c.Do(ctx, "api", func(ctx context.Context, in registry.Instance) error {
			calls.Add(1)
			time.Sleep(10 * time.Millisecond)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := calls.Load(); n != 5 {
		t.Fatalf("%d attempts for 5 calls with an empty budget, want 5", n)
	}
}

// A failure that Retry would not retry (the application's answer, a fatal
// error, the caller giving up) is not hedged either.
func TestHedgeNotAfterFinalFailure(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if _, err := e.writer.Register(ctx, registry.Instance{ID: id, Service: "api", Address: "127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
	}
	// A delay no test reaches: a hedge can only be the one sent at once
	// after a failure.
	c := newClient(t, e.reader, middleware.WithMiddleware(middleware.Hedge(middleware.HedgeConfig{
		Delay: time.Hour})))
	for _, fail := range []error{
		middleware.BusinessError(errors.New("404 not found")),
		middleware.FatalError(errors.New("not idempotent")),
	} {
		var calls atomic.Int32
		err := c.Do(ctx, "api", func(ctx context.Context, in registry.Instance) error {
			calls.Add(1)
			return fail
		})
		if !errors.Is(err, fail) || calls.Load() != 1 {
			t.Errorf("%v: %d attempts (%v), want 1", fail, calls.Load(), err)
		}
	}
	var calls atomic.Int32
	err := c.Do(ctx, "api", func(ctx context.Context, in registry.Instance) error {
		if calls.Add(1) == 1 {
			return errors.New("connection refused")
		}
		return nil
	})
	if err != nil || calls.Load() != 2 {
		t.Errorf("a retryable failure: %d attempts (%v), want a hedge that succeeds", calls.Load(), err)
	}
}

// Under NoHedge a call runs one attempt at a time.
func TestNoHedge(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if _, err := e.writer.Register(ctx, registry.Instance{ID: id, Service: "api", Address: "127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, e.reader, middleware.WithMiddleware(middleware.Hedge(middleware.HedgeConfig{
		Delay: time.Millisecond})))
	var calls atomic.Int32
	second := make(chan struct{})
	err := c.Do(middleware.NoHedge(ctx), "api", func(ctx context.Context, in registry.Instance) error {
		if calls.Add(1) > 1 {
			close(second)
			return nil
		}
		// A hedge would leave 1 ms from now: give it a hundred times that.
		select {
		case <-second:
		case <-time.After(100 * time.Millisecond):
		}
		return nil
	})
	if err != nil || calls.Load() != 1 {
		t.Fatalf("%d attempts (%v) under NoHedge with a 1 ms delay, want 1", calls.Load(), err)
	}
}
