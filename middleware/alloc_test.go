//go:build !race

// The race detector allocates, so the zero-allocation tests of the hot
// paths are built without it; scripts/test.sh runs them in a separate
// go test without -race.

package middleware_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// TestDoDoesNotAllocate pins the chain's allocation budget: nothing with
// spans off (an explicit no-op tracer provider). The race detector
// allocates, so scripts/test.sh runs this test once more without -race.
func TestDoDoesNotAllocate(t *testing.T) {
	c := chainClient(t, 10, middleware.WithTracerProvider(tracenoop.NewTracerProvider()))
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { _ = c.Do(ctx, "api", noop) }); n != 0 {
		t.Fatalf("Do allocates %.1f times per call with spans off, want 0", n)
	}
}

// TestProtectionDoesNotAllocate: with every protection on, a call
// allocates nothing, and neither does a call rejected by an open circuit.
func TestProtectionDoesNotAllocate(t *testing.T) {
	spansOff := middleware.WithTracerProvider(tracenoop.NewTracerProvider())
	c := chainClient(t, 10, spansOff, middleware.WithBreaker(middleware.NewBreaker(middleware.BreakerConfig{})))
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { _ = c.Do(ctx, "api", noop) }); n != 0 {
		t.Fatalf("Do allocates %.1f times per call with throttle, breaker and success rate on, want 0", n)
	}
	// A breaker that opens at the first failure (chainClient's first call
	// succeeded: 2 calls, 1 failure).
	br := middleware.NewBreaker(middleware.BreakerConfig{MinRequests: 1, OpenTimeout: time.Hour})
	c = chainClient(t, 10, spansOff, middleware.WithBreaker(br))
	fail := func(context.Context, registry.Instance) error { return errDown }
	if err := c.Do(ctx, "api", fail); !errors.Is(err, errDown) {
		t.Fatal(err)
	}
	if br.State("api") != middleware.BreakerOpen {
		t.Fatalf("circuit %v after a failed call with MinRequests 1", br.State("api"))
	}
	if n := testing.AllocsPerRun(1000, func() { _ = c.Do(ctx, "api", noop) }); n != 0 {
		t.Fatalf("a call rejected by the open circuit allocates %.1f times, want 0", n)
	}
}
