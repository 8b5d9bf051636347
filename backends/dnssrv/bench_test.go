package dnssrv_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/consultest"
	"github.com/roster-go/roster/internal/servers/dnssrvtest"
	"github.com/roster-go/roster/registry"
)

// The benchmarks read a real Consul agent's DNS interface; instances are
// published through its HTTP API (dnssrvtest). Results and the command
// are in docs/backends/dns.md.

func benchSetup(b *testing.B) (conformance.ReadOnly, *registry.Registry) {
	b.Helper()
	a := consultest.Start(b)
	h := dnssrvtest.NewHarness(b, a)
	r, err := registry.Open(context.Background(), dnssrvtest.URL(a, "min_poll=100ms"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	return h.(conformance.ReadOnly), r
}

// BenchmarkLookup100: one SRV question over TCP (the default) for a
// service of 100 instances.
func BenchmarkLookup100(b *testing.B) {
	ro, r := benchSetup(b)
	for i := range 100 {
		in := registry.Instance{Service: "big", Address: fmt.Sprintf("10.0.0.%d:8080", i+1)}
		if _, err := ro.Publish(context.Background(), in); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		sn, err := r.Lookup(context.Background(), "big")
		if err != nil {
			b.Fatal(err)
		}
		if len(sn.Instances) != 100 {
			b.Fatalf("got %d instances", len(sn.Instances))
		}
	}
}

// BenchmarkPropagation: time from the agent's deregistration returning to
// the removal reaching a Watcher polling every 100ms (Consul's records
// have TTL 0); p50 and p99 over b.N runs.
func BenchmarkPropagation(b *testing.B) {
	ro, r := benchSetup(b)
	ctx := context.Background()
	w, err := r.Watch(ctx, "prop")
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
	in := registry.Instance{Service: "prop", Address: "127.0.0.1:9000"}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		if _, err := ro.Publish(ctx, in); err != nil {
			b.Fatal(err)
		}
		until(1)
		b.StartTimer()
		if err := ro.Unpublish(ctx, in); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		until(0)
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
