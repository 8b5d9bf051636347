//go:build !race

// The race detector allocates, so the zero-allocation tests of the hot
// paths are built without it; scripts/test.sh runs them in a separate
// go test without -race.

package middleware_test

import (
	"context"
	"errors"
	"testing"

	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/policy"
	"github.com/roster-go/roster/registry"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
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
// allocates nothing, and neither does a call the throttle rejects.
func TestProtectionDoesNotAllocate(t *testing.T) {
	spansOff := middleware.WithTracerProvider(tracenoop.NewTracerProvider())
	c := chainClient(t, 10, spansOff)
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { _ = c.Do(ctx, "api", noop) }); n != 0 {
		t.Fatalf("Do allocates %.1f times per call with throttle and success rate on, want 0", n)
	}
	// A throttle that acts after one call: a failing service is then
	// rejected 9 calls in 10.
	c = chainClient(t, 10, spansOff, middleware.WithMiddleware(middleware.Throttle(middleware.ThrottleConfig{MinRequests: 1})))
	fail := func(context.Context, registry.Instance) error { return errDown }
	rejected := 0
	n := testing.AllocsPerRun(1000, func() {
		if errors.Is(c.Do(ctx, "api", fail), middleware.ErrThrottled) {
			rejected++
		}
	})
	if rejected == 0 {
		t.Fatal("no call rejected by the throttle")
	}
	if n != 0 {
		t.Fatalf("a failing or throttled call allocates %.1f times, want 0", n)
	}
}

// TestEndpointDoDoesNotAllocate: a call to a named endpoint, the
// client's or the context's, allocates nothing either.
func TestEndpointDoDoesNotAllocate(t *testing.T) {
	c, err := middleware.NewClient(portedRegistry(t), middleware.WithEndpoint("grpc"),
		middleware.WithTracerProvider(tracenoop.NewTracerProvider()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	httpCtx := middleware.ForEndpoint(ctx, "http")
	i := 0
	n := testing.AllocsPerRun(1000, func() {
		c2 := ctx
		if i++; i%2 == 0 {
			c2 = httpCtx
		}
		if err := c.Do(c2, "api", noop); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Fatalf("Do to an endpoint allocates %.1f times per call, want 0", n)
	}
}

var errBusiness = middleware.BusinessError(errDown)

// TestMetricsDoNotAllocate: with a real OpenTelemetry SDK meter provider
// a call records its metrics without allocating: the label sets are
// built once per service, zone and outcome.
func TestMetricsDoNotAllocate(t *testing.T) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	for name, extra := range map[string]middleware.Option{"": nil, " and WithInstanceMetrics": middleware.WithInstanceMetrics()} {
		opts := []middleware.Option{middleware.WithTracerProvider(tracenoop.NewTracerProvider()), middleware.WithMeterProvider(mp)}
		if extra != nil {
			opts = append(opts, extra)
		}
		c := chainClient(t, 10, opts...)
		ctx := context.Background()
		// A business error: a failed attempt, not retried, so no backoff.
		fail := func(context.Context, registry.Instance) error { return errBusiness }
		for range 20 { // every instance's counts and label sets
			_ = c.Do(ctx, "api", noop)
			_ = c.Do(ctx, "api", fail)
		}
		if n := testing.AllocsPerRun(1000, func() { _ = c.Do(ctx, "api", noop); _ = c.Do(ctx, "api", fail) }); n != 0 {
			t.Errorf("Do allocates %.1f times per call with an SDK meter provider%s, want 0", n, name)
		}
	}
}

// TestPolicyDoDoesNotAllocate: a call to a service with a policy
// (strategy, split, retry settings) allocates nothing, before and after
// SetPolicy changes it. A policy timeout or per-try timeout costs the
// context.WithTimeout they need, and is left out here.
func TestPolicyDoDoesNotAllocate(t *testing.T) {
	p := policy.Policy{Strategy: "round_robin", Retry: &policy.Retry{Attempts: 2, BudgetRatio: 0.1, RetryOn: []string{"connection"}},
		Split: []policy.SplitEntry{{Tag: "none", Percent: 10}}}
	c := chainClient(t, 10, middleware.WithTracerProvider(tracenoop.NewTracerProvider()), middleware.WithPolicy("api", p))
	ctx := context.Background()
	for i, strategy := range []string{"round_robin", "consistent_hash", "p2c_ewma"} {
		if i > 0 {
			p.Strategy = strategy
			if err := c.SetPolicy("api", p); err != nil {
				t.Fatal(err)
			}
		}
		if n := testing.AllocsPerRun(1000, func() { _ = c.DoKey(ctx, "api", "user-1", noop) }); n != 0 {
			t.Fatalf("%s: Do with a policy allocates %.1f times per call, want 0", strategy, n)
		}
	}
}
