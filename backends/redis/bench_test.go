package redis_test

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	rredis "github.com/roster-go/roster/backends/redis"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

// Benchmarks run against a private redis-server on loopback. Throughput:
//
//	go test -run '^$' -bench 'Register|Heartbeat|Lookup' ./backends/redis/
//
// Propagation (each iteration waits for a watcher; p50/p99 reported):
//
//	go test -run '^$' -bench 'Propagation' -benchtime 100x ./backends/redis/

var layouts = []struct{ name, query string }{
	{"hash", "layout=hash"},
	{"keys", "layout=keys&notify=off"},
}

func benchDriver(b *testing.B, srv *redistest.Server, query string) *rredis.Driver {
	u, _ := url.Parse("redis://" + srv.Addr() + "/0?" + query)
	d, err := rredis.OpenURL(context.Background(), u)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Close() })
	return d
}

func BenchmarkRegister(b *testing.B) {
	for _, lay := range layouts {
		b.Run(lay.name, func(b *testing.B) {
			srv := redistest.Start(b)
			d := benchDriver(b, srv, lay.query)
			ctx := context.Background()
			b.ResetTimer()
			for i := range b.N {
				in := registry.Instance{ID: fmt.Sprintf("i%d", i), Service: "bench", Address: fmt.Sprintf("10.0.%d.%d:80", i/250%250, i%250), Weight: 100, Version: "1.2.0", Zone: "hz-1"}
				if _, err := d.Register(ctx, in, time.Minute); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkHeartbeat(b *testing.B) {
	for _, lay := range layouts {
		b.Run(lay.name, func(b *testing.B) {
			srv := redistest.Start(b)
			d := benchDriver(b, srv, lay.query)
			ctx := context.Background()
			reg, err := d.Register(ctx, registry.Instance{ID: "hb", Service: "bench", Address: "10.0.0.1:80", Weight: 100}, time.Minute)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if err := reg.Heartbeat(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLookup1000 lists a service of 1,000 instances (the keys layout
// also holds 1,000 instances of another service in the same database:
// SCAN walks them too).
func BenchmarkLookup1000(b *testing.B) {
	for _, lay := range layouts {
		b.Run(lay.name, func(b *testing.B) {
			srv := redistest.Start(b)
			d := benchDriver(b, srv, lay.query)
			ctx := context.Background()
			for _, svc := range []string{"big", "other"} {
				for i := range 1000 {
					in := registry.Instance{ID: fmt.Sprintf("%s-%d", svc, i), Service: svc, Address: fmt.Sprintf("10.0.%d.%d:80", i/250, i%250), Weight: 100, Metadata: map[string]string{"zone": "hz-1"}}
					if _, err := d.Register(ctx, in, 10*time.Minute); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ResetTimer()
			for range b.N {
				s, err := d.List(ctx, "big")
				if err != nil || len(s.Instances) != 1000 {
					b.Fatalf("List = %d instances, %v", len(s.Instances), err)
				}
			}
		})
	}
}

// report adds p50/p99 of the samples as benchmark metrics.
func report(b *testing.B, unit string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	q := func(p float64) float64 {
		return float64(d[min(len(d)-1, int(p*float64(len(d))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(0.50), unit+"-p50-ms")
	b.ReportMetric(q(0.99), unit+"-p99-ms")
	b.ReportMetric(0, "ns/op")
}

var propLayouts = []struct{ name, query, args string }{
	{"hash", "layout=hash", ""},
	{"keys-poll200ms", "layout=keys&notify=off&poll=200ms", ""},
	{"keys-notify", "layout=keys&notify=on", "Eg$x"},
}

// nextMatching reads w until pred holds.
func nextMatching(b *testing.B, w *registry.Watcher, pred func(registry.Snapshot) bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		s, err := w.Next(ctx)
		if err != nil && !s.Stale {
			b.Fatal(err)
		}
		if !s.Stale && pred(s) {
			return
		}
	}
}

// BenchmarkPropagationDeregister: Deregister is called → a watcher in
// another registry delivers the removal.
func BenchmarkPropagationDeregister(b *testing.B) {
	for _, lay := range propLayouts {
		b.Run(lay.name, func(b *testing.B) {
			var args []string
			if lay.args != "" {
				args = []string{"--notify-keyspace-events", lay.args}
			}
			srv := redistest.Start(b, args...)
			ctx := context.Background()
			r, _ := registry.Open(ctx, "redis://"+srv.Addr()+"/0?"+lay.query)
			obs, _ := registry.Open(ctx, "redis://"+srv.Addr()+"/0?"+lay.query)
			defer r.Close()
			defer obs.Close()
			w, err := obs.Watch(ctx, "prop")
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			var samples []time.Duration
			b.ResetTimer()
			for range b.N {
				l, err := r.Register(ctx, registry.Instance{Service: "prop", Address: "10.0.0.1:80"}, registry.WithTTL(time.Minute))
				if err != nil {
					b.Fatal(err)
				}
				nextMatching(b, w, func(s registry.Snapshot) bool { return len(s.Instances) == 1 })
				start := time.Now() // the removal may reach the watcher before Deregister returns
				if err := l.Deregister(ctx); err != nil {
					b.Fatal(err)
				}
				nextMatching(b, w, func(s registry.Snapshot) bool { return len(s.Instances) == 0 })
				samples = append(samples, time.Since(start))
			}
			report(b, "dereg", samples)
		})
	}
}

// BenchmarkPropagationCrash: an instance stops heartbeating; the samples
// are from the moment its record expired in Redis (PTTL read right after
// the crash) to the watcher's delivery of its removal.
func BenchmarkPropagationCrash(b *testing.B) {
	for _, lay := range propLayouts {
		b.Run(lay.name, func(b *testing.B) {
			var args []string
			if lay.args != "" {
				args = []string{"--notify-keyspace-events", lay.args}
			}
			srv := redistest.Start(b, args...)
			rdb := srv.Client()
			defer rdb.Close()
			ctx := context.Background()
			r, _ := registry.Open(ctx, "redis://"+srv.Addr()+"/0?"+lay.query)
			obs, _ := registry.Open(ctx, "redis://"+srv.Addr()+"/0?"+lay.query)
			defer r.Close()
			defer obs.Close()
			w, err := obs.Watch(ctx, "crash")
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			ttl := 300 * time.Millisecond
			if lay.name != "hash" {
				ttl = time.Second // whole seconds in the keys layout
			}
			var samples []time.Duration
			b.ResetTimer()
			for range b.N {
				l, err := r.Register(ctx, registry.Instance{Service: "crash", Address: "10.0.0.1:80"}, registry.WithTTL(ttl))
				if err != nil {
					b.Fatal(err)
				}
				nextMatching(b, w, func(s registry.Snapshot) bool { return len(s.Instances) == 1 })
				l.Abandon()
				key := "roster:{crash}:i:" + l.Instance().ID
				if lay.name != "hash" {
					key = "service:crash:10.0.0.1:80"
				}
				pttl := rdb.PTTL(ctx, key).Val()
				expiry := time.Now().Add(pttl)
				nextMatching(b, w, func(s registry.Snapshot) bool { return len(s.Instances) == 0 })
				samples = append(samples, time.Since(expiry))
			}
			report(b, "expiry", samples)
		})
	}
}

// BenchmarkWatchersSweepLoad: P registries (processes) watch the same S
// services (one instance each) with the default sweep interval (1s); one
// iteration is one second of MONITOR output. Reported per second: sweep
// and claim scripts, service sweeps per service (at most one per interval
// is the bound across all processes), the most processes that swept any
// one service, snapshots (the watches' quiet relists), all commands
// clients sent, and the commands their scripts ran inside Redis.
//
//	go test -run '^$' -bench WatchersSweepLoad -benchtime 10x ./backends/redis/
func BenchmarkWatchersSweepLoad(b *testing.B) {
	for _, c := range []struct{ procs, services int }{{1, 1}, {10, 1}, {50, 1}, {100, 100}} {
		b.Run(fmt.Sprintf("processes=%d/services=%d", c.procs, c.services), func(b *testing.B) {
			srv := redistest.Start(b)
			ctx := context.Background()
			owner, _ := registry.Open(ctx, "redis://"+srv.Addr())
			defer owner.Close()
			svc := func(i int) string { return fmt.Sprintf("load-%03d", i) }
			for i := range c.services {
				if _, err := owner.Register(ctx, registry.Instance{Service: svc(i), Address: "10.0.0.1:80"}, registry.WithTTL(time.Minute)); err != nil {
					b.Fatal(err)
				}
			}
			for range c.procs {
				r, err := registry.Open(ctx, "redis://"+srv.Addr())
				if err != nil {
					b.Fatal(err)
				}
				defer r.Close()
				for i := range c.services {
					w, err := r.Watch(ctx, svc(i))
					if err != nil {
						b.Fatal(err)
					}
					defer w.Close()
					if _, err := w.Next(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
			time.Sleep(4 * time.Second) // past the first claims and a lease
			rdb := srv.Client()
			defer rdb.Close()
			before := commandStats(ctx, b, rdb)
			mon := startMonitor(b, srv.Addr())
			b.ResetTimer()
			time.Sleep(time.Duration(b.N) * time.Second) // the measuring window
			b.StopTimer()
			lines, _ := mon.since(0)
			after := commandStats(ctx, b, rdb)
			sweepLoad(b, lines, c.services)
			reportCommandStats(b, before, after)
		})
	}
}

// sweepLoad reports what MONITOR lines cost per second of b.N.
func sweepLoad(b *testing.B, lines []monitorLine, services int) {
	count := map[string]float64{}
	sweepers := map[string]map[string]bool{} // service key → clients that swept it
	for _, l := range lines {
		switch {
		case l.client == "lua":
			count["in-script-cmds"]++
			continue
		case l.isScript(rredis.SweepScriptSHA):
			count["sweep-scripts"]++
			for _, k := range scriptKeys(l) {
				if strings.HasSuffix(k, ":sweeper") {
					count["svc-sweeps"]++
					if sweepers[k] == nil {
						sweepers[k] = map[string]bool{}
					}
					sweepers[k][l.client] = true
				}
			}
		case l.isScript(rredis.SweeperClaimScriptSHA):
			count["claim-scripts"]++
		case l.isScript(rredis.SnapshotScriptSHA):
			count["snapshots"]++
		}
		count["cmds"]++
	}
	most := 0
	for _, cs := range sweepers {
		most = max(most, len(cs))
	}
	for _, k := range []string{"sweep-scripts", "claim-scripts", "snapshots", "cmds", "in-script-cmds"} {
		b.ReportMetric(count[k]/float64(b.N), k+"/s")
	}
	b.ReportMetric(count["svc-sweeps"]/float64(b.N)/float64(services), "sweeps/svc/s")
	b.ReportMetric(float64(most), "max-sweepers/svc")
	b.ReportMetric(0, "ns/op")
}

// commandStats reads INFO commandstats: calls per command (commands run
// by scripts included).
func commandStats(ctx context.Context, b testing.TB, rdb *goredis.Client) map[string]float64 {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		n, _ := strconv.ParseFloat(calls, 64)
		out[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return out
}

// reportCommandStats reports the server's commands per second between two
// INFO commandstats readings (the INFO and MONITOR calls themselves
// left out), and logs the five most frequent.
func reportCommandStats(b *testing.B, before, after map[string]float64) {
	type stat struct {
		name string
		rate float64
	}
	var all []stat
	total := 0.0
	for name, n := range after {
		if name == "info" || name == "monitor" {
			continue
		}
		r := (n - before[name]) / float64(b.N)
		total += r
		all = append(all, stat{name, r})
	}
	slices.SortFunc(all, func(x, y stat) int { return cmp.Compare(y.rate, x.rate) })
	b.Logf("server commands/s (INFO commandstats): %.0f; top: %v", total, all[:min(5, len(all))])
	b.ReportMetric(total, "server-cmds/s")
}

// scriptKeys returns the KEYS of an EVALSHA line.
func scriptKeys(l monitorLine) []string {
	if len(l.args) < 3 {
		return nil
	}
	n, err := strconv.Atoi(l.args[2])
	if err != nil || len(l.args) < 3+n {
		return nil
	}
	return l.args[3 : 3+n]
}
