package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

// Read cost under unrelated churn (issue 28): what watching costs the
// server when what changes is something else. Each case measures the
// server's commands per second (INFO commandstats, script calls
// included) over b.N seconds, once with the churn alone and once with the
// watchers too, and the latency of an unrelated tenant's List meanwhile.
//
//	go test -run '^$' -bench ReadCost -benchtime 10x ./backends/redis/
func BenchmarkReadCost(b *testing.B) {
	for _, c := range []struct {
		name, query string
		args        []string
		setup       func(b *testing.B, srv *redistest.Server) func(stop <-chan struct{})
		watch       func(b *testing.B, srv *redistest.Server, query string) func()
	}{
		{"hash/1000-idle-services", "layout=hash", nil, churn("layout=hash"), watchIdle(1000, 1)},
		{"hash/10000-idle-services", "layout=hash", nil, churn("layout=hash"), watchIdle(10000, 1)},
		{"keys/1000-idle-services", "layout=keys&notify=on", []string{"--notify-keyspace-events", "KEA"}, churn("layout=keys&notify=on"), watchIdle(1000, 1)},
		{"hash/bad-log-entries-20k-records-3-watchers", "layout=hash", nil, badEntries(20000), watchBig(3)},
	} {
		b.Run(c.name, func(b *testing.B) {
			srv := redistest.Start(b, c.args...)
			ctx := context.Background()
			rdb := srv.Client()
			defer rdb.Close()
			load := c.setup(b, srv)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() { load(stop) })
			defer func() { close(stop); wg.Wait() }()
			lat := startTenant(b, srv)
			window := time.Duration(b.N) * time.Second
			base := rate(ctx, b, rdb, window)
			lat.take()
			closeWatch := c.watch(b, srv, c.query)
			defer closeWatch()
			time.Sleep(12 * time.Second) // past the first sweeps and quiet checks
			lat.take()
			b.ResetTimer()
			total := rate(ctx, b, rdb, window)
			b.StopTimer()
			report(b, "tenant-list", lat.take())
			b.ReportMetric(base, "churn-only-cmds/s")
			b.ReportMetric(total, "server-cmds/s")
			b.ReportMetric(total-base, "watch-cmds/s")
			b.ReportMetric(float64(pubsubClients(ctx, b, rdb)), "pubsub-conns")
		})
	}
}

// rate is the server's commands per second over window, INFO and
// MONITOR left out.
func rate(ctx context.Context, b testing.TB, rdb *goredis.Client, window time.Duration) float64 {
	before := commandStats(ctx, b, rdb)
	time.Sleep(window)
	after := commandStats(ctx, b, rdb)
	total := 0.0
	for name, n := range after {
		if name != "info" && name != "monitor" {
			total += n - before[name]
		}
	}
	return total / window.Seconds()
}

// churn registers and deregisters an instance of an unrelated service
// 20 times a second (40 changes/s), from another process.
func churn(query string) func(b *testing.B, srv *redistest.Server) func(stop <-chan struct{}) {
	return func(b *testing.B, srv *redistest.Server) func(stop <-chan struct{}) {
		r, err := registry.Open(context.Background(), "redis://"+srv.Addr()+"/0?"+query)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = r.Close() })
		return func(stop <-chan struct{}) {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				l, err := r.Register(context.Background(), registry.Instance{Service: "churn", Address: fmt.Sprintf("10.9.0.%d:80", i%200+1)}, registry.WithTTL(time.Minute))
				if err == nil {
					_ = l.Deregister(context.Background())
				}
			}
		}
	}
}

// badEntries fills a service "big" with n records, and appends to its
// change log, 50 times a second, an entry whose revision does not follow:
// another writer of the keyspace, buggy or hostile.
func badEntries(n int) func(b *testing.B, srv *redistest.Server) func(stop <-chan struct{}) {
	return func(b *testing.B, srv *redistest.Server) func(stop <-chan struct{}) {
		ctx := context.Background()
		rdb := srv.Client()
		b.Cleanup(func() { _ = rdb.Close() })
		deadline := float64(time.Now().Add(time.Hour).UnixMilli())
		for start := 0; start < n; start += 1000 {
			_, err := rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
				for i := start; i < min(n, start+1000); i++ {
					id := fmt.Sprintf("big-%06d", i)
					p.Set(ctx, "roster:{big}:i:"+id, fmt.Sprintf(`{"id":%q,"service":"big","address":"10.%d.%d.%d:80","weight":100}`, id, i>>16&255, i>>8&255, i&255), time.Hour)
					p.ZAdd(ctx, "roster:{big}:idx", goredis.Z{Score: deadline, Member: id})
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		rdb.Set(ctx, "roster:{big}:rev", 1, time.Hour)
		return func(stop <-chan struct{}) {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				rdb.XAdd(ctx, &goredis.XAddArgs{Stream: "roster:{big}:log", Values: []string{"rev", "1", "op", "del", "id", "x"}})
			}
		}
	}
}

// watchIdle opens procs registries, each watching n empty services.
func watchIdle(n, procs int) func(b *testing.B, srv *redistest.Server, query string) func() {
	return func(b *testing.B, srv *redistest.Server, query string) func() {
		return watchAll(b, srv, query, procs, n, func(i int) string { return fmt.Sprintf("idle-%04d", i) })
	}
}

// watchBig opens procs registries, each watching the service "big".
func watchBig(procs int) func(b *testing.B, srv *redistest.Server, query string) func() {
	return func(b *testing.B, srv *redistest.Server, query string) func() {
		return watchAll(b, srv, query, procs, 1, func(int) string { return "big" })
	}
}

func watchAll(b *testing.B, srv *redistest.Server, query string, procs, n int, name func(int) string) func() {
	ctx := context.Background()
	var closers []func() error
	for range procs {
		r, err := registry.Open(ctx, "redis://"+srv.Addr()+"/0?"+query)
		if err != nil {
			b.Fatal(err)
		}
		closers = append(closers, r.Close)
		for i := range n {
			w, err := r.Watch(ctx, name(i))
			if err != nil {
				b.Fatal(err)
			}
			closers = append(closers, w.Close)
			if _, err := w.Next(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	return func() {
		for i := len(closers) - 1; i >= 0; i-- {
			_ = closers[i]()
		}
	}
}

// tenant lists a small unrelated service every 10ms, from its own
// process, recording each call's latency.
type tenant struct {
	mu  sync.Mutex
	lat []time.Duration
}

func startTenant(b *testing.B, srv *redistest.Server) *tenant {
	ctx, cancel := context.WithCancel(context.Background())
	r, err := registry.Open(ctx, "redis://"+srv.Addr()+"/0")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := r.Register(ctx, registry.Instance{Service: "tenant", Address: "10.8.0.1:80"}, registry.WithTTL(time.Minute)); err != nil {
		b.Fatal(err)
	}
	tn := &tenant{}
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			start := time.Now()
			if _, err := r.Lookup(ctx, "tenant"); err == nil {
				tn.mu.Lock()
				tn.lat = append(tn.lat, time.Since(start))
				tn.mu.Unlock()
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	b.Cleanup(func() { cancel(); wg.Wait(); _ = r.Close() })
	return tn
}

// take returns the latencies recorded since the last take.
func (tn *tenant) take() []time.Duration {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	l := tn.lat
	tn.lat = nil
	return l
}

// pubsubClients counts the server's connections in pub/sub mode.
func pubsubClients(ctx context.Context, b testing.TB, rdb *goredis.Client) int {
	list, err := rdb.ClientList(ctx).Result()
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "sub="); ok {
				if k, _ := strconv.Atoi(v); k > 0 {
					n++
				}
			}
			if v, ok := strings.CutPrefix(f, "psub="); ok {
				if k, _ := strconv.Atoi(v); k > 0 {
					n++
				}
			}
		}
	}
	return n
}
