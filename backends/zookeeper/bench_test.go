package zookeeper_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/roster-go/roster/backends/zookeeper"
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// The benchmarks run against the package's shared server, a JVM in
// another process: CPU figures are the client's alone. Results and the
// command are in docs/backends/zookeeper.md.

func benchDriver(b *testing.B, root string) *zookeeper.Driver {
	b.Helper()
	d, err := zookeeper.New(zookeeper.Options{Servers: []string{shared.Addr()}, Root: root})
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

// each runs f(i) for i in [0, n) on 16 goroutines, failing on the first
// error.
func each(b *testing.B, n int, f func(i int) error) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// registerMany registers n instances with the TTL. Nothing heartbeats
// them: a run that lasts longer than the TTL finds them deleted by their
// watchdogs.
func registerMany(b *testing.B, d *zookeeper.Driver, svc string, n int, ttl time.Duration) []driver.Registration {
	b.Helper()
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

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRegister: one registration (a multi delete+create, then an
// exists for the owner), sequential.
func BenchmarkRegister(b *testing.B) {
	d := benchDriver(b, "/bench-reg")
	regs := make([]driver.Registration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
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
// registrations (one exists each), 16 at a time.
func BenchmarkHeartbeat1000(b *testing.B) {
	d := benchDriver(b, "/bench-hb")
	const n = 1000
	regs := registerMany(b, d, "hb", n, 10*time.Second)
	b.ResetTimer()
	cpu0 := cpuTime()
	for range b.N {
		each(b, n, func(i int) error { return regs[i].Heartbeat(context.Background()) })
	}
	b.StopTimer()
	perHB := (cpuTime() - cpu0) / time.Duration(b.N*n)
	b.ReportMetric(float64(perHB.Microseconds()), "cpu-µs/heartbeat")
	// The lease engine heartbeats every TTL/3: 1,000 leases at TTL 10s
	// are 300 heartbeats a second.
	b.ReportMetric(300*perHB.Seconds()*100, "cpu-%-for-1000-leases-ttl10s")
}

// BenchmarkLookup1000: List of a service with 1,000 instances (children,
// then one get per child).
func BenchmarkLookup1000(b *testing.B) {
	d := benchDriver(b, "/bench-list")
	registerMany(b, d, "big", 1000, time.Minute)
	b.ResetTimer()
	for range b.N {
		sn, err := d.List(context.Background(), "big")
		if err != nil {
			b.Fatal(err)
		}
		if len(sn.Instances) != 1000 {
			b.Fatalf("got %d instances", len(sn.Instances))
		}
	}
}

// BenchmarkPropagation: time from calling Lease.Deregister on one client
// to the removal reaching a Watcher on another; p50 and p99 over b.N runs.
func BenchmarkPropagation(b *testing.B) {
	open := func() *registry.Registry {
		r := registry.New(benchDriver(b, "/bench-prop"))
		b.Cleanup(func() { r.Close() })
		return r
	}
	reg, obs := open(), open()
	conformance.BenchPropagation(b, reg, obs, "prop")
}
