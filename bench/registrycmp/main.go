// Command registrycmp compares Roster's registry with go-zero's
// core/discov and go-kit's sd/etcdv3 and sd/consul, on one etcd and one
// Consul agent in the same run, every registration with a TTL of 5 s:
//
//   - registration time of N instances from one process (N = 100, 1,000,
//     5,000), until the calls return and until a watcher sees all N;
//   - graceful deregister → the library's own watcher, p50 / p99, with
//     1,000 registered;
//   - crash (SIGKILL of a child process holding one registration) → the
//     watcher drops it;
//   - the CPU of keeping 1,000 registrations alive for 60 s: the client
//     is a child process doing only that (its getrusage over the hold),
//     the server is etcd in a child process (/proc/<pid>/stat);
//   - etcd killed and restarted empty, 12 rounds: whether and when each
//     library's watcher sees its instances again.
//
// It is run by hand; CI only compiles it:
//
//	cd bench && go run ./registrycmp -consul $HOME/.cache/roster/consul-1.13.9
//
// Without -consul (or ROSTER_CONSUL_BIN) the Consul rows are skipped.
// The results and their reading are in ../docs/benchmarks.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/roster-go/roster/internal/loopback"
	"github.com/roster-go/roster/internal/servers/consultest"
)

var (
	childMode  = flag.String("child", "", "internal: run as a child process of this mode")
	consulBin  = flag.String("consul", os.Getenv("ROSTER_CONSUL_BIN"), "Consul binary (empty: skip Consul)")
	sizesFlag  = flag.String("n", "100,1000,5000", "registration counts on etcd")
	consulN    = flag.String("consul-n", "100,1000", "registration counts on Consul")
	samples    = flag.Int("samples", 200, "deregistrations timed per implementation")
	crashes    = flag.Int("crashes", 3, "crash rounds")
	holdFor    = flag.Duration("hold", 60*time.Second, "how long the 1,000 registrations are kept alive for the CPU figures")
	holdN      = flag.Int("hold-n", 1000, "registrations kept alive for the CPU figures")
	rounds     = flag.Int("rounds", 12, "etcd restarts")
	regTimeout = flag.Duration("reg-timeout", 60*time.Second, "give up on registering N after this long")
	deregN     = flag.Int("dereg-n", 1000, "registration count at which deregistrations are timed")
	only       = flag.String("only", "", "comma-separated phases to run (reg,dereg,crash,cpu,restart); empty: all")
	implFlag   = flag.String("impl", "", "comma-separated implementations to run (backend/name, e.g. etcd/roster); empty: all")
)

func main() {
	flag.DurationVar(&ttl, "ttl", ttl, "TTL of every registration, whole seconds (go-zero's unit)")
	flag.Parse()
	if *childMode != "" {
		runChild(*childMode, flag.Args())
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "registrycmp:", err)
		os.Exit(1)
	}
}

func phase(name string) bool {
	return *only == "" || slices.Contains(strings.Split(*only, ","), name)
}

// etcdServer is etcd in a child process, restartable on the same port.
type etcdServer struct {
	dir, addr string
	p         *proc
}

func (e *etcdServer) start() error {
	p, err := startChild("etcd", e.dir, e.addr)
	if err != nil {
		return err
	}
	if _, err := p.expect("ready", time.Minute); err != nil {
		p.kill()
		return fmt.Errorf("etcd: %w", err)
	}
	e.p = p
	return nil
}

// restartEmpty kills etcd, removes its data and starts it again on the
// same address.
func (e *etcdServer) restartEmpty() error {
	e.p.kill()
	if err := os.RemoveAll(e.dir); err != nil {
		return err
	}
	return e.start()
}

func (e *etcdServer) url() string { return "etcd://" + e.addr }

func run() error {
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "registrycmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	port, err := loopback.FreePort()
	if err != nil {
		return err
	}
	etcd := &etcdServer{dir: filepath.Join(tmp, "etcd"), addr: "127.0.0.1:" + strconv.Itoa(port)}
	if err := etcd.start(); err != nil {
		return err
	}
	defer func() { etcd.p.kill() }()

	var consulAddr string
	if *consulBin != "" {
		os.Setenv("ROSTER_CONSUL_BIN", *consulBin)
		a, err := consultest.NewAgent("")
		if err != nil {
			return err
		}
		defer a.Close()
		consulAddr = a.Addr()
	}
	impls := implsFor(etcd.url(), []string{etcd.addr}, consulAddr)
	if *implFlag != "" {
		impls = slices.DeleteFunc(impls, func(im impl) bool {
			return !slices.Contains(strings.Split(*implFlag, ","), label(im))
		})
	}
	fmt.Printf("# registrycmp %s, TTL %v, etcd %s, consul %q\n", time.Now().UTC().Format(time.RFC3339), ttl, etcd.addr, consulAddr)

	if phase("reg") || phase("dereg") {
		for _, im := range impls {
			sizes := *sizesFlag
			if im.backend() == "consul" {
				sizes = *consulN
			}
			for _, f := range strings.Split(sizes, ",") {
				n, _ := strconv.Atoi(f)
				if err := registerPhase(ctx, im, n); err != nil {
					fmt.Printf("%-14s register n=%d: %v\n", label(im), n, err)
				}
			}
		}
	}
	if phase("crash") {
		crashPhase(ctx, impls, etcd.url(), consulAddr)
	}
	if phase("cpu") {
		for _, im := range impls {
			if im.backend() == "etcd" {
				if err := cpuPhase(im, etcd); err != nil {
					fmt.Printf("%-14s cpu: %v\n", label(im), err)
				}
			}
		}
	}
	if phase("restart") {
		if err := restartPhase(ctx, impls, etcd); err != nil {
			return err
		}
	}
	return nil
}

func fakeAddr(i int) string { return fmt.Sprintf("10.1.%d.%d:8080", i/250, i%250+1) }

// registerPhase registers n instances, sequentially as one process
// would, times it, and at n = -dereg-n times deregistrations as seen by the
// library's watcher.
func registerPhase(ctx context.Context, im impl, n int) error {
	service := fmt.Sprintf("reg-%s-%d", strings.ReplaceAll(im.name(), "-", ""), n)
	v, err := im.watch(ctx, service)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer v.stop()
	c, err := im.open(ctx)
	if err != nil {
		return err
	}
	defer c.close()
	hs := make([]handle, 0, n)
	defer func() { deregisterAll(ctx, hs) }()
	start := time.Now()
	deadline := start.Add(*regTimeout)
	for i := range n {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d registered after %v", i, *regTimeout)
		}
		h, err := c.register(ctx, service, fakeAddr(i))
		if err != nil {
			return fmt.Errorf("register %d: %w", i, err)
		}
		hs = append(hs, h)
	}
	calls := time.Since(start)
	seen := v.wait(time.Until(deadline)+time.Second, func(s map[string]bool) bool { return len(s) >= n })
	visible := time.Since(start)
	vis := fmt.Sprintf("%.3f s", visible.Seconds())
	if !seen {
		vis = fmt.Sprintf("not all (%d)", v.count())
	}
	if phase("reg") {
		fmt.Printf("%-14s register n=%-5d calls %.3f s, watcher sees all %s\n", label(im), n, calls.Seconds(), vis)
	}
	if n != *deregN || !phase("dereg") || !seen {
		return nil
	}
	k := min(*samples, n)
	lat := make([]time.Duration, 0, k)
	missed := 0
	for i := range k {
		a := fakeAddr(i)
		t0 := time.Now()
		if err := hs[i].deregister(ctx); err != nil {
			return fmt.Errorf("deregister: %w", err)
		}
		if !v.wait(10*time.Second, func(s map[string]bool) bool { return !s[a] }) {
			missed++
			continue
		}
		t, _ := v.gone(a)
		lat = append(lat, t.Sub(t0))
	}
	hs = hs[k:]
	slices.Sort(lat)
	fmt.Printf("%-14s deregister→watcher (n=%d, %d samples): p50 %s p99 %s max %s, missed %d\n",
		label(im), n, len(lat), ms(pct(lat, 50)), ms(pct(lat, 99)), ms(pct(lat, 100)), missed)
	return nil
}

func deregisterAll(ctx context.Context, hs []handle) {
	var wg sync.WaitGroup
	ch := make(chan handle)
	for range 16 {
		wg.Go(func() {
			for h := range ch {
				_ = h.deregister(ctx)
			}
		})
	}
	for _, h := range hs {
		ch <- h
	}
	close(ch)
	wg.Wait()
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := (len(d)*p + 99) / 100
	return d[max(0, min(len(d)-1, i-1))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

// crashPhase starts one child per implementation holding one
// registration, kills them all at once and times each watcher's drop.
func crashPhase(ctx context.Context, impls []impl, etcdURL, consulAddr string) {
	drops := map[string][]time.Duration{}
	never := map[string]int{}
	for r := range *crashes {
		type run struct {
			im impl
			v  *view
			p  *proc
			a  string
		}
		var runs []run
		for _, im := range impls {
			service := fmt.Sprintf("crash-%s-%d", strings.ReplaceAll(im.name(), "-", ""), r)
			v, err := im.watch(ctx, service)
			if err != nil {
				fmt.Printf("%-14s crash: watch: %v\n", label(im), err)
				continue
			}
			p, err := startChild("crash", im.name(), im.backend(), etcdURL, consulAddr, service, "1", "0s")
			if err != nil {
				v.stop()
				fmt.Printf("%-14s crash: %v\n", label(im), err)
				continue
			}
			if _, err := p.expect("registered", 30*time.Second); err != nil {
				p.kill()
				v.stop()
				fmt.Printf("%-14s crash: %v\n", label(im), err)
				continue
			}
			a := fakeAddr(0)
			if !v.wait(10*time.Second, func(s map[string]bool) bool { return s[a] }) {
				fmt.Printf("%-14s crash: watcher never saw the instance\n", label(im))
			}
			runs = append(runs, run{im, v, p, a})
		}
		t0 := time.Now()
		for _, x := range runs {
			x.p.kill()
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, x := range runs {
			wg.Go(func() {
				defer x.v.stop()
				ok := x.v.wait(4*ttl, func(s map[string]bool) bool { return !s[x.a] })
				mu.Lock()
				defer mu.Unlock()
				if !ok {
					never[label(x.im)]++
					return
				}
				t, _ := x.v.gone(x.a)
				drops[label(x.im)] = append(drops[label(x.im)], t.Sub(t0))
			})
		}
		wg.Wait()
	}
	for _, im := range impls {
		d := drops[label(im)]
		slices.Sort(d)
		var parts []string
		for _, x := range d {
			parts = append(parts, fmt.Sprintf("%.2f", x.Seconds()))
		}
		fmt.Printf("%-14s crash→watcher drop (TTL %v): [%s] s, not dropped within %v: %d of %d\n",
			label(im), ttl, strings.Join(parts, " "), 4*ttl, never[label(im)], *crashes)
	}
}

// cpuPhase keeps holdN registrations alive in a child process for the
// hold period and reports the child's and etcd's CPU over it.
func cpuPhase(im impl, etcd *etcdServer) error {
	service := "hold-" + strings.ReplaceAll(im.name(), "-", "")
	p, err := startChild("hold", im.name(), im.backend(), etcd.url(), "", service, strconv.Itoa(*holdN), holdFor.String())
	if err != nil {
		return err
	}
	if _, err := p.expect("registered", 2*time.Minute); err != nil {
		p.kill()
		return err
	}
	srv0, reads0 := etcd.p.cpu(), etcdRanges(etcd.addr)
	l, err := p.expect("cpu ", *holdFor+time.Minute)
	srv1, reads1 := etcd.p.cpu(), etcdRanges(etcd.addr)
	if err != nil {
		p.kill()
		return err
	}
	_ = p.wait()
	ns, _ := strconv.ParseInt(strings.TrimPrefix(l, "cpu "), 10, 64)
	cl, sv := time.Duration(ns), srv1-srv0
	reads := "?"
	if reads0 >= 0 && reads1 >= 0 {
		reads = fmt.Sprintf("%.1f", float64(reads1-reads0)/holdFor.Seconds())
	}
	fmt.Printf("%-14s keep %d alive %v: client %.2f CPU-s (%.1f%% of a core), etcd %.2f CPU-s (%.1f%%), etcd range reads/s %s\n",
		label(im), *holdN, *holdFor, cl.Seconds(), 100*cl.Seconds()/holdFor.Seconds(),
		sv.Seconds(), 100*sv.Seconds()/holdFor.Seconds(), reads)
	return nil
}

// restartPhase registers a few instances with every etcd implementation,
// then kills etcd and restarts it empty, round after round, and reports
// per round how long each watcher showed zero instances and when it saw
// all of them again.
func restartPhase(ctx context.Context, impls []impl, etcd *etcdServer) error {
	const k = 10
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.addr}, DialTimeout: time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	type sub struct {
		service string
		im      impl
		v       *view
		c       client
		back    []time.Duration // per recovered round, from the kill
		afterUp []time.Duration // the same, from etcd serving again
		zero    int             // rounds in which the watcher showed zero
		lost    int             // rounds not recovered
	}
	var subs []*sub
	for _, im := range impls {
		if im.backend() != "etcd" {
			continue
		}
		service := "restart-" + strings.ReplaceAll(im.name(), "-", "")
		v, err := im.watch(ctx, service)
		if err != nil {
			return err
		}
		defer stopWithin(im, v, 5*time.Second)
		c, err := im.open(ctx)
		if err != nil {
			return err
		}
		defer c.close()
		for i := range k {
			if _, err := c.register(ctx, service, fakeAddr(i)); err != nil {
				return err
			}
		}
		if !v.wait(10*time.Second, func(s map[string]bool) bool { return len(s) == k }) {
			return fmt.Errorf("%s: watcher sees %d of %d", label(im), v.count(), k)
		}
		subs = append(subs, &sub{service: service, im: im, v: v, c: c})
	}
	limit := 4 * ttl
	for r := range *rounds {
		t0 := time.Now()
		if err := etcd.restartEmpty(); err != nil {
			return err
		}
		up := time.Since(t0)
		var wg sync.WaitGroup
		for _, s := range subs {
			wg.Go(func() {
				// Back: all k keys in etcd again, and the watcher shows
				// all k.
				ok := false
				// The limit runs from etcd serving again: on a loaded
				// machine etcd itself took up to 18 s to start.
				for time.Since(t0) < up+limit {
					if etcdKeys(cli, s.service) == k && s.v.count() == k {
						ok = true
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				zeroFor := time.Duration(0)
				var zeroAt time.Time
				for _, p := range s.v.since(t0) {
					if p.n == 0 && zeroAt.IsZero() {
						zeroAt = p.at
					} else if p.n > 0 && !zeroAt.IsZero() {
						zeroFor += p.at.Sub(zeroAt)
						zeroAt = time.Time{}
					}
				}
				if !zeroAt.IsZero() {
					zeroFor += time.Since(zeroAt)
				}
				shown := false
				for _, p := range s.v.since(t0) {
					shown = shown || p.n == 0
				}
				if shown {
					s.zero++
				}
				if ok {
					s.back = append(s.back, time.Since(t0))
					s.afterUp = append(s.afterUp, time.Since(t0)-up)
				} else {
					s.lost++
				}
				fmt.Printf("  round %2d %-14s etcd up after %.2f s; all %d back: %v; zero shown for %.2f s\n",
					r+1, label(s.im), up.Seconds(), k, ok, zeroFor.Seconds())
			})
		}
		wg.Wait()
	}
	for _, s := range subs {
		slices.Sort(s.back)
		slices.Sort(s.afterUp)
		fmt.Printf("%-14s etcd restarted empty, %d rounds: all back in %d (median %s after the kill, %s after etcd served again), zero instances shown in %d, never back (%v after etcd served) in %d\n",
			label(s.im), *rounds, len(s.back), ms(pct(s.back, 50)), ms(pct(s.afterUp, 50)), s.zero, limit, s.lost)
	}
	return nil
}

// etcdRanges returns etcd's count of range requests so far
// (etcd_mvcc_range_total on its /metrics), or -1.
func etcdRanges(addr string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	total, found := 0.0, false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "etcd_mvcc_range_total") {
			f := strings.Fields(l)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err == nil {
				total, found = total+v, true
			}
		}
	}
	if !found {
		return -1
	}
	return total
}

// etcdKeys counts the keys in etcd whose name contains service, read
// directly, or -1 when etcd does not answer.
func etcdKeys(cli *clientv3.Client, service string) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithKeysOnly())
	if err != nil {
		return -1
	}
	n := 0
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Key), service) {
			n++
		}
	}
	return n
}

// stopWithin stops v, giving up after d: after etcd restarts, go-zero's
// Subscriber.Close was seen blocked on its connection registry's lock.
func stopWithin(im impl, v *view, d time.Duration) {
	done := make(chan struct{})
	go func() { defer close(done); v.stop() }()
	select {
	case <-done:
	case <-time.After(d):
		fmt.Printf("%-14s watcher did not stop within %v\n", label(im), d)
	}
}
