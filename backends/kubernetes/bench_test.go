package kubernetes_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/roster-go/roster/registry"
)

// openRegistry opens a registry on the shared apiserver, closed with tb.
func openRegistry(tb testing.TB) *registry.Registry {
	tb.Helper()
	u, err := server.URL(server.Addr(), "default")
	if err != nil {
		tb.Fatal(err)
	}
	r, err := registry.Open(context.Background(), u)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Close() })
	return r
}

// BenchmarkPropagation: time from calling Lease.Deregister on one client
// to the removal reaching a Watcher on another (through the apiserver, its
// watch cache and a client-go informer); p50 and p99 over b.N runs.
func BenchmarkPropagation(b *testing.B) {
	reg, obs := openRegistry(b), openRegistry(b)
	ctx := context.Background()
	w, err := obs.Watch(ctx, "prop")
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	until := func(n int) {
		for {
			nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			sn, err := w.Next(nctx)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			if len(sn.Instances) == n {
				return
			}
		}
	}
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		b.StopTimer()
		l, err := reg.Register(ctx, registry.Instance{Service: "prop", Address: "127.0.0.1:9000"}, registry.WithTTL(10*time.Second))
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
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
