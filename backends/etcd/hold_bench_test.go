package etcd_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/roster-go/roster/backends/etcd"
	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/registry"
)

// serverEnv makes the test binary an etcd server for BenchmarkHold1000:
// the server runs in a process of its own, so that its CPU and the
// client's are measured apart.
const serverEnv = "ROSTER_ETCD_BENCH_SERVER"

// serveForBench runs one member until stdin closes. It prints the
// client endpoints on its first line of output.
func serveForBench() int {
	dir, err := os.MkdirTemp("", "roster-etcd-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	c, err := etcdtest.Start(context.Background(), etcdtest.Config{Dir: dir, DirectClients: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	fmt.Println(strings.Join(c.Endpoints(), ","))
	_, _ = bufio.NewReader(os.Stdin).ReadString(0) // until EOF
	return 0
}

// benchServer is a member in a child process.
type benchServer struct {
	cmd       *exec.Cmd
	endpoints []string
}

func startBenchServer(b *testing.B) *benchServer {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serverEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("bench server: %v", err)
	}
	return &benchServer{cmd: cmd, endpoints: strings.Split(strings.TrimSpace(line), ",")}
}

// cpu returns the server process's CPU time, from /proc (Linux).
func (s *benchServer) cpu(b *testing.B) time.Duration {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		b.Skipf("server CPU: %v", err)
	}
	// Fields after the command name, which is in parentheses: utime and
	// stime are the 12th and 13th, in clock ticks of 10ms.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// rpcCounter counts unary calls by method.
type rpcCounter struct{ m sync.Map } // method → *atomic.Int64

func (c *rpcCounter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	n, _ := c.m.LoadOrStore(method, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	return invoke(ctx, method, req, reply, cc, opts...)
}

func (c *rpcCounter) get(method string) int64 {
	if n, ok := c.m.Load(method); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

// BenchmarkHold1000 keeps 1,000 registrations of one process alive
// through the registry's lease engine at TTL 5s; one op is one second
// of that. The server runs in a child process: client and server CPU
// are reported apart, as are the server's range reads and lease
// look-ups per second (counted at the client).
func BenchmarkHold1000(b *testing.B) {
	srv := startBenchServer(b)
	var rpcs rpcCounter
	d, err := etcd.New(etcd.Options{Prefix: "/bench", Client: clientv3.Config{Endpoints: srv.endpoints,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(rpcs.intercept)}}})
	if err != nil {
		b.Fatal(err)
	}
	reg := registry.New(d)
	defer reg.Close()
	const n = 1000
	leases := make([]*registry.Lease, n)
	for i := range leases {
		svc := fmt.Sprintf("hold-%d", i%10)
		if leases[i], err = reg.Register(context.Background(), benchInst(svc, i), registry.WithTTL(5*time.Second)); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(5 * time.Second) // one TTL: every lease in its heartbeat rhythm
	ranges, ttls := rpcs.get("/etcdserverpb.KV/Range"), rpcs.get("/etcdserverpb.Lease/LeaseTimeToLive")
	srv0, cli0 := srv.cpu(b), cpuTime()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		time.Sleep(time.Second) // the measured window
	}
	el := time.Since(start).Seconds()
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cli0).Milliseconds())/el, "client-cpu-ms/s")
	b.ReportMetric(float64((srv.cpu(b)-srv0).Milliseconds())/el, "server-cpu-ms/s")
	b.ReportMetric(float64(rpcs.get("/etcdserverpb.KV/Range")-ranges)/el, "ranges/s")
	b.ReportMetric(float64(rpcs.get("/etcdserverpb.Lease/LeaseTimeToLive")-ttls)/el, "lease-ttl-calls/s")
	for _, l := range leases {
		if st := l.State(); st != registry.LeaseHealthy {
			b.Fatalf("lease %s %v: %v", l.Instance().ID, st, l.Err())
		}
	}
	for _, l := range leases {
		_ = l.Deregister(context.Background())
	}
}

// BenchmarkPropagation1000 is BenchmarkPropagation with 1,000 other
// instances registered in the watched service, as issue #32 measured
// it: each change rebuilds, checks and delivers a snapshot of 1,001
// instances. The server runs in a child process, so that a CPU profile
// shows the client's path alone.
func BenchmarkPropagation1000(b *testing.B) {
	srv := startBenchServer(b)
	open := func() *registry.Registry {
		d, err := etcd.New(etcd.Options{Prefix: "/bench", Client: clientv3.Config{Endpoints: srv.endpoints}})
		if err != nil {
			b.Fatal(err)
		}
		r := registry.New(d)
		b.Cleanup(func() { r.Close() })
		return r
	}
	reg, obs := open(), open()
	ctx := context.Background()
	const n = 1000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				if _, err := reg.Register(ctx, benchInst("prop", i), registry.WithTTL(30*time.Second)); err != nil {
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
	w, err := obs.Watch(ctx, "prop")
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	until := func(want int) {
		for {
			sn, err := w.Next(ctx)
			if err != nil && !sn.Stale {
				b.Fatal(err)
			}
			if err == nil && len(sn.Instances) == want {
				return
			}
		}
	}
	until(n)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		l, err := reg.Register(ctx, benchInst("prop", n), registry.WithTTL(30*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		until(n + 1)
		b.StartTimer()
		t0 := time.Now()
		if err := l.Deregister(ctx); err != nil {
			b.Fatal(err)
		}
		until(n)
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[min(len(lat)-1, len(lat)*99/100)]), "p99-ms")
}

// BenchmarkHold1000Driver is BenchmarkHold1000 without the registry: one
// goroutine calls the driver's Heartbeat of each registration every
// TTL/3, 60 every 100ms. Set beside BenchmarkHold1000, it tells the
// driver's share of the client's CPU from the lease engine's.
func BenchmarkHold1000Driver(b *testing.B) {
	srv := startBenchServer(b)
	var rpcs rpcCounter
	d, err := etcd.New(etcd.Options{Prefix: "/bench", Client: clientv3.Config{Endpoints: srv.endpoints,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(rpcs.intercept)}}})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	const n, perTick = 1000, 60 // 600 heartbeats a second: each every 5s/3
	regs := registerMany(b, d, "hold", n, 5*time.Second)
	defer deregisterAll(regs)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for next := 0; ; {
			select {
			case <-ctx.Done():
				errc <- nil
				return
			case <-t.C:
			}
			for range perTick {
				if err := regs[next].Heartbeat(ctx); err != nil && ctx.Err() == nil {
					errc <- err
					return
				}
				next = (next + 1) % n
			}
		}
	}()
	time.Sleep(5 * time.Second)
	ranges, ttls := rpcs.get("/etcdserverpb.KV/Range"), rpcs.get("/etcdserverpb.Lease/LeaseTimeToLive")
	srv0, cli0 := srv.cpu(b), cpuTime()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		time.Sleep(time.Second)
	}
	el := time.Since(start).Seconds()
	b.StopTimer()
	cli, srvCPU := cpuTime()-cli0, srv.cpu(b)-srv0
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cli.Milliseconds())/el, "client-cpu-ms/s")
	b.ReportMetric(float64(srvCPU.Milliseconds())/el, "server-cpu-ms/s")
	b.ReportMetric(float64(rpcs.get("/etcdserverpb.KV/Range")-ranges)/el, "ranges/s")
	b.ReportMetric(float64(rpcs.get("/etcdserverpb.Lease/LeaseTimeToLive")-ttls)/el, "lease-ttl-calls/s")
}
