package etcd_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/roster-go/roster/backends/etcd"
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// The benchmarks run against one embedded member, in the same process:
// CPU figures include the server's share. Clients dial the member
// directly (no test proxy). Results and the command are in
// docs/bench/etcd.md.

func benchDriver(b *testing.B, c *etcdtest.Cluster) *etcd.Driver {
	b.Helper()
	d, err := etcd.New(etcd.Options{Client: clientv3.Config{Endpoints: c.Endpoints()}, Prefix: "/bench"})
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

// registerMany registers n instances of svc with 16 concurrent callers.
func registerMany(b *testing.B, d *etcd.Driver, svc string, n int, ttl time.Duration) []driver.Registration {
	b.Helper()
	regs := make([]driver.Registration, n)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				r, err := d.Register(context.Background(), benchInst(svc, i), ttl)
				if err != nil {
					errs <- err
					return
				}
				regs[i] = r
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return regs
}

func deregisterAll(regs []driver.Registration) {
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(regs); i += 16 {
				if regs[i] != nil {
					_ = regs[i].Deregister(context.Background())
				}
			}
		}()
	}
	wg.Wait()
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRegister: one registration (Grant + Put), sequential.
func BenchmarkRegister(b *testing.B) {
	c := startCluster(b, etcdtest.Config{DirectClients: true})
	d := benchDriver(b, c)
	regs := make([]driver.Registration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := d.Register(context.Background(), benchInst("reg", i), 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		regs = append(regs, r)
	}
	b.StopTimer()
	deregisterAll(regs)
}

// BenchmarkKeepAlive1000: one op is a heartbeat of each of 1,000
// registrations on one shared lease, 16 at a time. Back to back, only the
// first heartbeat of each TTL/6 renews the lease and looks up its keys;
// the rest check their key in memory. BenchmarkHold1000 measures the
// heartbeats at their real rhythm.
func BenchmarkKeepAlive1000(b *testing.B) {
	c := startCluster(b, etcdtest.Config{DirectClients: true})
	d := benchDriver(b, c)
	const n = 1000
	regs := registerMany(b, d, "ka", n, 10*time.Second)
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		var wg sync.WaitGroup
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := w; j < n; j += 16 {
					if err := regs[j].Heartbeat(context.Background()); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	b.StopTimer()
	perHB := (cpuTime() - cpu0) / time.Duration(b.N*n)
	b.ReportMetric(float64(perHB.Nanoseconds())/1e3, "cpu-µs/heartbeat")
	// The lease engine heartbeats every TTL/3: 1,000 leases at TTL 10s
	// are 300 heartbeats a second.
	b.ReportMetric(300*perHB.Seconds()*100, "cpu-%-for-1000-leases-ttl10s")
	deregisterAll(regs)
}

// BenchmarkLookup1000: List of a service with 1,000 instances.
func BenchmarkLookup1000(b *testing.B) {
	c := startCluster(b, etcdtest.Config{DirectClients: true})
	d := benchDriver(b, c)
	regs := registerMany(b, d, "big", 1000, 30*time.Second)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sn, err := d.List(context.Background(), "big")
		if err != nil {
			b.Fatal(err)
		}
		if len(sn.Instances) != 1000 {
			b.Fatalf("got %d instances", len(sn.Instances))
		}
	}
	b.StopTimer()
	deregisterAll(regs)
}

// BenchmarkPropagation: time from calling Lease.Deregister on one client
// to the removal reaching a Watcher on another; p50 and p99 over b.N runs.
func BenchmarkPropagation(b *testing.B) {
	c := startCluster(b, etcdtest.Config{DirectClients: true})
	open := func() *registry.Registry {
		r := registry.New(benchDriver(b, c))
		b.Cleanup(func() { r.Close() })
		return r
	}
	reg, obs := open(), open()
	conformance.BenchPropagation(b, reg, obs, "prop")
}
