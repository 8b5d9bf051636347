package kubernetes_test

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/roster-go/roster/backends/kubernetes"
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
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
	conformance.BenchPropagation(b, openRegistry(b), openRegistry(b), "prop")
}

func benchDriver(b *testing.B, options ...string) *kubernetes.Driver {
	b.Helper()
	raw, err := server.URL(server.Addr(), "default", options...)
	if err != nil {
		b.Fatal(err)
	}
	u, err := url.Parse(raw)
	if err != nil {
		b.Fatal(err)
	}
	o, err := kubernetes.ParseURL(u)
	if err != nil {
		b.Fatal(err)
	}
	d, err := kubernetes.New(o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	return d
}

func benchInst(svc string, i int) registry.Instance {
	return registry.Instance{ID: fmt.Sprintf("%s-%06d", svc, i), Service: svc, Address: fmt.Sprintf("10.0.%d.%d:8080", i/250, i%250),
		Version: "1.4.2", Zone: "hz-1", Weight: 100, Metadata: map[string]string{"owner": "team-a"}}
}

// each runs f(i) for every i in [0, n) on 16 goroutines, failing on the
// first error.
func each(b *testing.B, n int, f func(i int) error) {
	b.Helper()
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// registerMany registers n instances of svc, deregistered at cleanup.
func registerMany(b *testing.B, d *kubernetes.Driver, svc string, n int, ttl time.Duration) []driver.Registration {
	regs := make([]driver.Registration, n)
	each(b, n, func(i int) (err error) {
		regs[i], err = d.Register(context.Background(), benchInst(svc, i), ttl)
		return err
	})
	b.Cleanup(func() {
		each(b, n, func(i int) error { return regs[i].Deregister(context.Background()) })
	})
	return regs
}

// BenchmarkRegister: one registration (a Lease, then its EndpointSlice),
// sequential.
func BenchmarkRegister(b *testing.B) {
	d := benchDriver(b)
	var regs []driver.Registration
	for i := 0; b.Loop(); i++ {
		r, err := d.Register(context.Background(), benchInst("reg", i), 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		regs = append(regs, r)
	}
	b.StopTimer()
	for _, r := range regs {
		_ = r.Deregister(context.Background())
	}
}

// BenchmarkHeartbeat1000: one op is a heartbeat of each of 1,000
// registrations (Lease update, slice read), 16 at a time, with the
// default client rate limit and with qps=1000; the CPU per heartbeat is
// the test process's (client and the embedded etcd; the apiserver is
// another process).
func BenchmarkHeartbeat1000(b *testing.B) {
	for _, opt := range []string{"", "qps=1000"} {
		b.Run("limit="+cmp.Or(opt, "default"), func(b *testing.B) {
			d := benchDriver(b, strings.Fields(opt)...)
			const n = 1000
			regs := registerMany(b, d, "hb", n, time.Minute)
			cpu0 := cpuTime()
			for b.Loop() {
				each(b, n, func(i int) error { return regs[i].Heartbeat(context.Background()) })
			}
			perHB := (cpuTime() - cpu0) / time.Duration(b.N*n)
			b.ReportMetric(float64(perHB.Microseconds()), "cpu-µs/heartbeat")
		})
	}
}

// BenchmarkLookup1000: List of a service with 1,000 instances (slices and
// Leases listed by label).
func BenchmarkLookup1000(b *testing.B) {
	d := benchDriver(b)
	registerMany(b, d, "big", 1000, time.Minute)
	for b.Loop() {
		sn, err := d.List(context.Background(), "big")
		if err != nil {
			b.Fatal(err)
		}
		if len(sn.Instances) != 1000 {
			b.Fatalf("got %d instances", len(sn.Instances))
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
