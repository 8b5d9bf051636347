package middleware_test

import (
	"context"
	"fmt"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/policy"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

func noop(context.Context, registry.Instance) error { return nil }

// BenchmarkDo measures the full chain's overhead per call — discovery
// cache read, retry, quarantine, pick, Done, spans and metrics with no
// OpenTelemetry SDK installed — around a call that does nothing.
func BenchmarkDo(b *testing.B) {
	for _, n := range []int{10, 100} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			c := chainClient(b, n)
			ctx := context.Background()
			b.Run("serial", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if err := c.Do(ctx, "api", noop); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := c.Do(ctx, "api", noop); err != nil {
							b.Fatal(err)
						}
					}
				})
			})
		})
	}
}

// BenchmarkDoEndpoint is BenchmarkDo's serial case, 3 instances, with the
// client's endpoint set and instances that announce endpoints.
func BenchmarkDoEndpoint(b *testing.B) {
	c, err := middleware.NewClient(portedRegistry(b), middleware.WithEndpoint("grpc"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Do(ctx, "api", noop); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDoNoopTracer is BenchmarkDo with the OpenTelemetry no-op tracer
// provider set explicitly, which skips the global delegate's allocations.
func BenchmarkDoNoopTracer(b *testing.B) {
	c := chainClient(b, 10, middleware.WithTracerProvider(tracenoop.NewTracerProvider()))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Do(ctx, "api", noop); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDoMetrics is BenchmarkDoNoopTracer with a real OpenTelemetry
// SDK meter provider: the cost of the metrics a call records (the call
// counter and histogram, picks, cache reads).
func BenchmarkDoMetrics(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() { mp.Shutdown(context.Background()) })
	c := chainClient(b, 10, middleware.WithTracerProvider(tracenoop.NewTracerProvider()), middleware.WithMeterProvider(mp))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Do(ctx, "api", noop); err != nil {
			b.Fatal(err)
		}
	}
}

// chainClient returns a client over n registered instances of "api" whose
// cache is already warm.
func chainClient(tb testing.TB, n int, opts ...middleware.Option) *middleware.Client {
	tb.Helper()
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	tb.Cleanup(func() { reg.Close() })
	ctx := context.Background()
	for i := 0; i < n; i++ {
		if _, err := reg.Register(ctx, registry.Instance{Service: "api", Address: fmt.Sprintf("10.0.0.%d:80", i+1)}); err != nil {
			tb.Fatal(err)
		}
	}
	c, err := middleware.NewClient(reg, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() }) // runs before the registry's Close
	if err := c.Do(ctx, "api", noop); err != nil {
		tb.Fatal(err)
	}
	return c
}

// BenchmarkDoPolicy is BenchmarkDo's serial case, 10 instances, without
// a policy and with one per service (round robin both, so that only the
// policy's cost differs): what a per-service policy adds to a call.
func BenchmarkDoPolicy(b *testing.B) {
	rr := policy.Policy{Strategy: "round_robin"}
	withRetry := policy.Policy{Strategy: "round_robin", Retry: &policy.Retry{Attempts: 2, RetryOn: []string{"connection"}}}
	for _, tc := range []struct {
		name string
		opts []middleware.Option
	}{
		{"none", []middleware.Option{middleware.WithSelector(selector.WithStrategy(selector.RoundRobin))}},
		{"policy", []middleware.Option{middleware.WithPolicy("api", rr)}},
		{"policy+retry", []middleware.Option{middleware.WithPolicy("api", withRetry)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := chainClient(b, 10, append(tc.opts, middleware.WithTracerProvider(tracenoop.NewTracerProvider()))...)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := c.Do(ctx, "api", noop); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
