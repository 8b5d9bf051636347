package conformance

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/roster-go/roster/registry"
)

// BenchPropagation measures, b.N times, the time from Lease.Deregister on
// writer to the removal reaching a Watcher of service on observer, and
// reports its p50, p99 and max in milliseconds. Registration and its
// arrival at the watcher are outside the timer. Backends' benchmarks call
// it so that their propagation figures are measured the same way.
func BenchPropagation(b *testing.B, writer, observer *registry.Registry, service string) {
	ctx := context.Background()
	w, err := observer.Watch(ctx, service)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	until := func(n int) {
		for {
			nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			sn, err := w.Next(nctx)
			cancel()
			switch {
			case err != nil && !sn.Stale:
				b.Fatal(err)
			case err != nil:
				continue // a stale delivery while the watch reconnects
			}
			if len(sn.Instances) == n {
				return
			}
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		l, err := writer.Register(ctx, registry.Instance{Service: service, Address: "127.0.0.1:9000"}, registry.WithTTL(10*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		until(1)
		b.StartTimer()
		t0 := time.Now()
		if err := l.Deregister(ctx); err != nil {
			b.Fatal(err)
		}
		until(0)
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[min(len(lat)-1, len(lat)/2)]), "p50-ms")
	b.ReportMetric(ms(lat[min(len(lat)-1, int(0.99*float64(len(lat))))]), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
}
