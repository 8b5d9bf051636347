package middleware_test

import (
	"context"
	"sync"
	"testing"
	"time"

	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/roster-go/roster/middleware"
)

// protections are the adaptive protections layered one by one on a
// client with spans off: none, then success-rate ejection (on by
// default), then throttling (on by default: this is the default client).
var protections = []struct {
	name string
	opts func() []middleware.Option
}{
	{"none", func() []middleware.Option {
		q := middleware.NewQuarantine(middleware.QuarantineConfig{SuccessRateMinimumHosts: -1})
		return []middleware.Option{middleware.WithQuarantine(q), middleware.WithMiddleware(middleware.Retry(middleware.RetryConfig{}), q.Middleware())}
	}},
	{"success_rate", func() []middleware.Option {
		q := middleware.NewQuarantine(middleware.QuarantineConfig{})
		return []middleware.Option{middleware.WithQuarantine(q), middleware.WithMiddleware(middleware.Retry(middleware.RetryConfig{}), q.Middleware())}
	}},
	{"default", func() []middleware.Option { return nil }},
}

// BenchmarkDoProtection measures what each protection adds to a call.
func BenchmarkDoProtection(b *testing.B) {
	for _, p := range protections {
		b.Run(p.name, func(b *testing.B) {
			c := chainClient(b, 10, append(p.opts(), middleware.WithTracerProvider(tracenoop.NewTracerProvider()))...)
			ctx := context.Background()
			b.Run("serial", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					_ = c.Do(ctx, "api", noop)
				}
			})
			b.Run("parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						_ = c.Do(ctx, "api", noop)
					}
				})
			})
		})
	}
}

// BenchmarkProtectionAlone measures each protection by itself around a
// handler that does nothing: the quarantine's Admit and Report for one
// instance, with and without success-rate counting, and the throttle's
// middleware for a healthy service.
func BenchmarkProtectionAlone(b *testing.B) {
	ids := []string{"i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7", "i8", "i9"}
	quarantine := func(minHosts int) func(i int) {
		q := middleware.NewQuarantine(middleware.QuarantineConfig{SuccessRateMinimumHosts: minHosts})
		return func(i int) {
			id := ids[i%len(ids)]
			if q.Admit("api", id, len(ids)) {
				q.Report("api", id, middleware.Success, len(ids))
			}
		}
	}
	// The Request and its Start come from the Client, outside what is
	// measured here: one Request, one clock reading per 1,024 calls.
	handler := func(mw middleware.Middleware) func(int) {
		h := middleware.Chain(func(context.Context, *middleware.Request) error { return nil }, mw)
		ctx := context.Background()
		var reqs sync.Pool
		reqs.New = func() any { return &middleware.Request{Service: "api"} }
		return func(i int) {
			req := reqs.Get().(*middleware.Request)
			if i%1024 == 0 || req.Start.IsZero() {
				req.Start = time.Now()
			}
			_ = h(ctx, req)
			reqs.Put(req)
		}
	}
	for _, bc := range []struct {
		name string
		op   func(i int)
	}{
		{"quarantine", quarantine(-1)},
		{"quarantine+success_rate", quarantine(0)},
		{"throttle", handler(middleware.Throttle(middleware.ThrottleConfig{}))},
	} {
		b.Run(bc.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				bc.op(i)
				i++
			}
		})
		b.Run(bc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					bc.op(i)
				}
			})
		})
	}
}
