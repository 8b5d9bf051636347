package consul_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/roster-go/roster/backends/consul"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// Benchmarks against the real agent. Figures and the command that made
// them are in docs/bench/consul.md.

func benchDriver(b *testing.B) *consul.Driver {
	b.Helper()
	a := sharedAgent(b)
	d, err := consul.NewDriver(consul.Options{Address: a.Addr()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	return d
}

func benchService(name string) string {
	return fmt.Sprintf("bench-%s-%d", name, time.Now().UnixNano()%1e9)
}

// deregisterAll removes registrations made by a benchmark, in parallel.
func deregisterAll(regs []driver.Registration) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, r := range regs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_ = r.Deregister(context.Background())
		}()
	}
	wg.Wait()
}

// BenchmarkRegister: one agent registration (service + passing TTL check).
func BenchmarkRegister(b *testing.B) {
	d := benchDriver(b)
	svc := benchService("reg")
	ctx := context.Background()
	var regs []driver.Registration
	i := 0
	for b.Loop() {
		in := registry.Instance{ID: fmt.Sprintf("%s-%d", svc, i), Service: svc, Address: "127.0.0.1:8080", Weight: 100}
		r, err := d.Register(ctx, in, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		regs = append(regs, r)
		i++
	}
	b.StopTimer()
	deregisterAll(regs)
}

// BenchmarkHeartbeat: one TTL renewal (UpdateTTL) of a live registration.
func BenchmarkHeartbeat(b *testing.B) {
	d := benchDriver(b)
	svc := benchService("hb")
	ctx := context.Background()
	r, err := d.Register(ctx, registry.Instance{ID: svc + "-1", Service: svc, Address: "127.0.0.1:8080", Weight: 100}, time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Deregister(ctx)
	for b.Loop() {
		if err := r.Heartbeat(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLookup1000: List of a service with 1,000 passing instances
// (/v1/health/service/<name>?passing, decoded and sorted).
func BenchmarkLookup1000(b *testing.B) {
	d := benchDriver(b)
	svc := benchService("lookup")
	ctx := context.Background()
	const n = 1000
	regs := make([]driver.Registration, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			in := registry.Instance{
				ID: fmt.Sprintf("%s-%04d", svc, i), Service: svc, Address: fmt.Sprintf("10.0.%d.%d:8080", i/250, i%250+1),
				Weight: 100, Version: "1.2.0", Zone: "hz-1", Tags: []string{"grpc"}, Metadata: map[string]string{"owner": "team-a"},
			}
			r, err := d.Register(ctx, in, 10*time.Minute)
			if err != nil {
				b.Error(err)
				return
			}
			regs[i] = r
		}()
	}
	wg.Wait()
	defer deregisterAll(slices.DeleteFunc(regs, func(r driver.Registration) bool { return r == nil }))
	if b.Failed() {
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := d.List(ctx, svc)
		if err == nil && len(s.Instances) == n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the %d instances were not all listed within 30s (%d, %v)", n, len(s.Instances), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for b.Loop() {
		s, err := d.List(ctx, svc)
		if err != nil || len(s.Instances) != n {
			b.Fatalf("List: %d instances, %v", len(s.Instances), err)
		}
	}
}

// BenchmarkPropagation: a graceful Lease.Deregister on one registry until
// a Watcher on another registry delivers the removal (blocking query on
// /v1/health/service/<name>?passing), and the same for a registration.
// One op is one register + deregister cycle; cycles are paced 120ms apart
// so that the watch's rate limit (burst 5, 20 queries/s) never delays a
// delivery: the figure is propagation, not the limiter.
func BenchmarkPropagation(b *testing.B) {
	a := sharedAgent(b)
	ctx := context.Background()
	writer, err := openRegistry(b, a)
	if err != nil {
		b.Fatal(err)
	}
	defer writer.Close()
	reader, err := openRegistry(b, a)
	if err != nil {
		b.Fatal(err)
	}
	defer reader.Close()
	svc := benchService("prop")
	w, err := reader.Watch(ctx, svc)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Next(ctx); err != nil {
		b.Fatal(err)
	}
	until := func(cond func(registry.Snapshot) bool) {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for {
			s, err := w.Next(tctx)
			if err != nil {
				b.Fatalf("watcher: %v", err)
			}
			if !s.Stale && cond(s) {
				return
			}
		}
	}
	var add, del []time.Duration
	for b.Loop() {
		t0 := time.Now()
		l, err := writer.Register(ctx, registry.Instance{Service: svc, Address: "127.0.0.1:8080"}, registry.WithTTL(time.Minute))
		if err != nil {
			b.Fatal(err)
		}
		id := l.Instance().ID
		until(func(s registry.Snapshot) bool { _, ok := s.Find(id); return ok })
		add = append(add, time.Since(t0))
		b.StopTimer()
		time.Sleep(60 * time.Millisecond)
		b.StartTimer()
		t1 := time.Now()
		if err := l.Deregister(ctx); err != nil {
			b.Fatal(err)
		}
		until(func(s registry.Snapshot) bool { _, ok := s.Find(id); return !ok })
		del = append(del, time.Since(t1))
		b.StopTimer()
		time.Sleep(60 * time.Millisecond)
		b.StartTimer()
	}
	report := func(name string, ds []time.Duration) {
		slices.Sort(ds)
		q := func(p float64) float64 {
			return float64(ds[min(len(ds)-1, int(p*float64(len(ds))))].Microseconds()) / 1000
		}
		b.ReportMetric(q(0.50), name+"-p50-ms")
		b.ReportMetric(q(0.99), name+"-p99-ms")
		b.ReportMetric(float64(ds[len(ds)-1].Microseconds())/1000, name+"-max-ms")
	}
	report("dereg", del)
	report("reg", add)
}
