package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/roster-go/roster/backends/etcd/etcdlocal"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

func newDemo() *cobra.Command {
	var (
		duration time.Duration
		strategy string
		workers  int
		plain    bool
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run 5 instances and a client on an embedded etcd, and break things",
		Long: `demo shows Roster at work, with nothing to install.

It starts an embedded etcd (or uses --registry), 5 HTTP instances of the
service "demo-api" on loopback (different weights, one 3× slower, one that
fails now and then) and a client that calls them through the full middleware
chain (retry elsewhere, quarantine, stale cache) for --duration. At 40% of the
run it kills one instance without deregistering it, at 60% it stops another
gracefully (deregister, drain, stop). The view shows picks per instance,
latencies, retries, quarantined instances and the snapshot revision; the run
ends with a summary and exits 0 if no call failed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := selector.ParseStrategy(strategy)
			if err != nil {
				return err
			}
			live := !plain && isTerminal(cmd.OutOrStdout())
			return runDemo(cmd.Context(), cmd.OutOrStdout(), registryURL(cmd), duration, st, workers, live)
		},
	}
	durationVar(cmd.Flags(), &duration, "duration", 20*time.Second, time.Second, 24*time.Hour, "how long the client runs (1s to 24h)")
	cmd.Flags().StringVar(&strategy, "strategy", string(selector.P2CEWMA), "selection strategy: "+strategyNames())
	intVar(cmd.Flags(), &workers, "workers", 4, 1, maxWorkers, fmt.Sprintf("concurrent callers (1 to %d)", maxWorkers))
	cmd.Flags().BoolVar(&plain, "plain", false, "plain line output even on a terminal")
	return cmd
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

const demoService = "demo-api"

// plainStatusEvery is how often the plain output prints a status line.
var plainStatusEvery = 2 * time.Second

// demoInstance is one HTTP instance of the demo service.
type demoInstance struct {
	name     string
	weight   uint32
	delay    time.Duration // mean service time
	failRate float64       // share of requests answered 503

	srv   *http.Server
	ln    net.Listener
	lease *registry.Lease
	id    string
	state atomic.Value // string: up, killed, draining, stopped

	mu        sync.Mutex
	picks     int
	failures  int
	latencies []time.Duration
}

func (d *demoInstance) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Service time: the mean ±50%, so latencies have a spread.
	time.Sleep(time.Duration(float64(d.delay) * (0.5 + rand.Float64())))
	if rand.Float64() < d.failRate {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (d *demoInstance) start(ctx context.Context, reg *registry.Registry) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	d.ln, d.srv = ln, &http.Server{Handler: d, ReadHeaderTimeout: 5 * time.Second}
	go d.srv.Serve(ln)
	d.state.Store("up")
	l, err := reg.Register(ctx, registry.Instance{
		Service: demoService, Address: ln.Addr().String(), Weight: d.weight,
		Version: "1.0.0", Zone: "local", Metadata: map[string]string{"name": d.name},
	}, registry.WithTTL(3*time.Second))
	if err != nil {
		d.srv.Close()
		return err
	}
	d.lease, d.id = l, l.Instance().ID
	return nil
}

// kill crashes the instance: no deregistration, connections dropped.
func (d *demoInstance) kill() {
	d.state.Store("killed")
	d.lease.Abandon()
	d.srv.Close()
}

// stop leaves gracefully: deregister, let clients see it, then stop.
func (d *demoInstance) stop(drain time.Duration) {
	d.state.Store("draining")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = d.lease.Deregister(ctx)
	time.Sleep(drain)
	_ = d.srv.Shutdown(ctx)
	d.state.Store("stopped")
}

func (d *demoInstance) record(lat time.Duration, err error) {
	d.mu.Lock()
	d.picks++
	if err != nil {
		d.failures++
	} else {
		d.latencies = append(d.latencies, lat)
	}
	d.mu.Unlock()
}

func (d *demoInstance) stats() (picks, failures int, p50, p99 time.Duration) {
	d.mu.Lock()
	lat := slices.Clone(d.latencies)
	picks, failures = d.picks, d.failures
	d.mu.Unlock()
	if len(lat) == 0 {
		return picks, failures, 0, 0
	}
	slices.Sort(lat)
	return picks, failures, lat[len(lat)*50/100], lat[min(len(lat)-1, len(lat)*99/100)]
}

type demo struct {
	out    io.Writer
	live   bool
	start  time.Time
	insts  []*demoInstance
	byAddr map[string]*demoInstance
	client *middleware.Client
	q      *middleware.Quarantine
	httpc  *http.Client
	// Counted when a call finishes, retries included, so that every
	// figure only grows and the summary is the sum of what was shown.
	calls   atomic.Int64
	failed  atomic.Int64
	retries atomic.Int64 // attempts after a call's first, of finished calls
	lastErr atomic.Value

	mu     sync.Mutex
	events []string
}

func (dm *demo) event(format string, a ...any) {
	line := fmt.Sprintf("%5.1fs  ", time.Since(dm.start).Seconds()) + fmt.Sprintf(format, a...)
	dm.mu.Lock()
	dm.events = append(dm.events, line)
	dm.mu.Unlock()
	if !dm.live {
		fmt.Fprintln(dm.out, line)
	}
}

func runDemo(ctx context.Context, out io.Writer, url string, duration time.Duration, st selector.Strategy, workers int, live bool) error {
	began := time.Now()
	if url == "" {
		local, stop, err := startLocalEtcd(ctx, out, began)
		if err != nil {
			return err
		}
		defer stop()
		url = local
	}
	// The instances and the client open two registries; on "mem://" each
	// would get a private server and the client would find nobody.
	url, _ = sharedMem(url)
	// Two registries, as two processes would have: one for the instances,
	// one for the client.
	servers, err := registry.Open(ctx, url)
	if err != nil {
		return err
	}
	defer servers.Close()
	clients, err := registry.Open(ctx, url)
	if err != nil {
		return err
	}
	defer clients.Close()
	dm := &demo{out: out, live: live}
	stopAll, err := dm.setUp(ctx, servers, clients, st, workers)
	defer stopAll()
	if err != nil {
		return err
	}
	dm.start = time.Now()
	dm.event("%s registered; %s, strategy %s, for %v", plural(len(dm.insts), "instance"), plural(workers, "caller"), st, duration)
	if err := dm.run(ctx, clients, duration, workers); err != nil {
		return err
	}
	dm.render(dm.q, true)
	fmt.Fprintf(out, "\ntotal %.1fs including the registry's start\n", time.Since(began).Seconds())
	if n := dm.failed.Load(); n > 0 {
		fmt.Fprintf(out, "%s failed; last error: %s\n", plural(int(n), "call"), escapeControls(fmt.Sprint(dm.lastErr.Load())))
		return exitError{1}
	}
	return nil
}

// startLocalEtcd starts the demo's own registry: a free port and
// throwaway data, so that it never clashes with a "roster dev" or an etcd
// on 2379.
func startLocalEtcd(ctx context.Context, out io.Writer, began time.Time) (string, func(), error) {
	fmt.Fprintln(out, "starting an embedded etcd…")
	srv, err := etcdlocal.Start(ctx, etcdlocal.Config{Addr: "127.0.0.1:0"})
	if err != nil {
		return "", nil, fmt.Errorf("embedded etcd: %w", err)
	}
	url := srv.URL() + "?prefix=/roster-demo"
	fmt.Fprintf(out, "embedded etcd ready in %.1fs at %s\n", time.Since(began).Seconds(), url)
	return url, func() { srv.Close() }, nil
}

// setUp starts the five instances and the client; the returned function
// stops what was started, even after an error.
func (dm *demo) setUp(ctx context.Context, servers, clients *registry.Registry, st selector.Strategy, workers int) (func(), error) {
	var stops []func()
	stopAll := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	dm.insts = []*demoInstance{
		{name: "alpha", weight: 100, delay: 2 * time.Millisecond},
		{name: "bravo", weight: 100, delay: 2 * time.Millisecond},
		{name: "charlie", weight: 200, delay: 2 * time.Millisecond},
		{name: "delta", weight: 100, delay: 6 * time.Millisecond}, // 3× slower
		{name: "echo", weight: 50, delay: 2 * time.Millisecond, failRate: 0.05},
	}
	dm.byAddr = map[string]*demoInstance{}
	for _, d := range dm.insts {
		if err := d.start(ctx, servers); err != nil {
			return stopAll, fmt.Errorf("start %s: %w", d.name, err)
		}
		stops = append(stops, func() { d.srv.Close() })
		dm.byAddr[d.ln.Addr().String()] = d
	}
	dm.q = middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: 3, BaseEjection: 10 * time.Second, MaxEjectedPercent: 40})
	// Four attempts: a call can meet the crashed instance, a 503 from echo
	// and a connection closed by the graceful stop in a row.
	c, err := middleware.NewClient(clients, middleware.WithSelector(selector.WithStrategy(st)),
		middleware.WithQuarantine(dm.q), middleware.WithMiddleware(middleware.Retry(middleware.RetryConfig{MaxAttempts: 4}), dm.q.Middleware()))
	if err != nil {
		return stopAll, err
	}
	dm.client = c
	stops = append(stops, func() { c.Close() })
	dm.httpc = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers * 2}}
	stops = append(stops, dm.httpc.CloseIdleConnections)
	return stopAll, nil
}

// call is one attempt: a GET to the picked instance.
func (dm *demo) call(ctx context.Context, in registry.Instance) error {
	d := dm.byAddr[in.Address]
	start := time.Now()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+in.Address+"/", nil)
	resp, err := dm.httpc.Do(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s answered %s", d.name, resp.Status)
		}
	}
	if d != nil && ctx.Err() == nil { // a call cut short by its caller says nothing of the instance
		d.record(time.Since(start), err)
	}
	return err
}

// run drives the callers, the fault script and the event log for
// duration, redrawing the status meanwhile.
func (dm *demo) run(ctx context.Context, clients *registry.Registry, duration time.Duration, workers int) error {
	runCtx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { dm.caller(ctx, runCtx) })
	}
	wg.Go(func() { dm.script(runCtx, duration) })
	wg.Go(func() { dm.observe(runCtx, clients, dm.q) })
	every := plainStatusEvery
	if dm.live {
		every = 250 * time.Millisecond // a redraw
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
loop:
	for {
		select {
		case <-runCtx.Done():
			break loop
		case <-tick.C:
			dm.render(dm.q, false)
		}
	}
	wg.Wait()
	return ctx.Err()
}

// caller makes calls until runCtx ends.
func (dm *demo) caller(ctx, runCtx context.Context) {
	for runCtx.Err() == nil {
		// Calls get their own deadline, not the demo's: one started just
		// before the end runs to completion (retries included) instead of
		// being cut short and misread as a failure.
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		var attempts atomic.Int64
		err := dm.client.Do(cctx, demoService, func(ctx context.Context, in registry.Instance) error {
			attempts.Add(1)
			return dm.call(ctx, in)
		})
		ccancel()
		if ctx.Err() != nil {
			return // interrupted
		}
		dm.retries.Add(max(0, attempts.Load()-1))
		dm.calls.Add(1)
		if err != nil {
			dm.failed.Add(1)
			dm.lastErr.Store(err.Error())
		}
	}
}

// script is the demo's faults: a crash at 40%, a graceful stop at 60%.
func (dm *demo) script(runCtx context.Context, duration time.Duration) {
	killed, stopped := dm.insts[1], dm.insts[2]
	if !sleepCtx(runCtx, duration*4/10) {
		return
	}
	killed.kill()
	dm.event("killed %s (crash: no deregistration; it stays registered until its TTL of 3s runs out)", killed.name)
	if !sleepCtx(runCtx, duration*2/10) {
		return
	}
	dm.event("stopping %s gracefully: deregister, drain 500ms, stop", stopped.name)
	stopped.stop(500 * time.Millisecond)
	dm.event("%s stopped", stopped.name)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// observe logs registry changes and quarantine entries and exits.
func (dm *demo) observe(ctx context.Context, reg *registry.Registry, q *middleware.Quarantine) {
	w, err := reg.Watch(ctx, demoService)
	if err != nil {
		return
	}
	defer w.Close()
	names := map[string]string{}
	for _, d := range dm.insts {
		names[d.id] = d.name
	}
	var prev *registry.Snapshot
	ejected := map[string]bool{}
	snaps := make(chan registry.Snapshot)
	go func() {
		defer close(snaps)
		for {
			s, err := w.Next(ctx)
			if err != nil && !s.Stale {
				return
			}
			select {
			case snaps <- s:
			case <-ctx.Done():
				return
			}
		}
	}()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			for range snaps {
			}
			return
		case s, ok := <-snaps:
			if !ok {
				return
			}
			if prev != nil {
				for _, in := range prev.Instances {
					if _, ok := s.Find(in.ID); !ok {
						dm.event("%s left the registry (revision %d)", nameOf(names, in.ID), s.Revision)
					}
				}
			}
			prev = &s
		case <-t.C:
			now := map[string]bool{}
			for _, id := range q.Ejected(demoService) {
				now[id] = true
				if !ejected[id] {
					dm.event("%s quarantined by the client after consecutive failures", nameOf(names, id))
				}
			}
			ejected = now
		}
	}
}

// nameOf names a demo instance by its ID; an instance of the service that
// the demo did not start (another process's, on a shared --registry) is
// shown by its ID, escaped.
func nameOf(names map[string]string, id string) string {
	if n, ok := names[id]; ok {
		return n
	}
	return "instance " + quote(id)
}

// render draws the live view (or, on a plain output, one status line).
func (dm *demo) render(q *middleware.Quarantine, final bool) {
	snap, _ := dm.client.Snapshot(demoService)
	ejected := map[string]bool{}
	for _, id := range q.Ejected(demoService) {
		ejected[id] = true
	}
	calls, failed, retries := dm.calls.Load(), dm.failed.Load(), dm.retries.Load()
	elapsed := time.Since(dm.start).Seconds()
	if !dm.live && !final {
		fmt.Fprintf(dm.out, "%5.1fs  calls %d  failed %d  retries %d  revision %d  instances %d  quarantined %d\n",
			elapsed, calls, failed, retries, snap.Revision, len(snap.Instances), len(ejected))
		return
	}
	var b strings.Builder
	if dm.live && !final {
		b.WriteString("\x1b[H\x1b[2J")
	}
	if final {
		b.WriteString("\nsummary\n")
	}
	fmt.Fprintf(&b, "roster demo — service %s — %.1fs\n", demoService, elapsed)
	fmt.Fprintf(&b, "calls %d   failed %d   retries %d   snapshot revision %d   instances %d   stale %v\n\n",
		calls, failed, retries, snap.Revision, len(snap.Instances), snap.Stale)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "instance\tweight\tstate\tregistered\tpicks\tshare\tfailures\tp50\tp99\t")
	var total int
	for _, d := range dm.insts {
		p, _, _, _ := d.stats()
		total += p
	}
	for _, d := range dm.insts {
		p, f, p50, p99 := d.stats()
		_, inSnap := snap.Find(d.id)
		state := d.state.Load().(string)
		if ejected[d.id] {
			state += ", quarantined"
		}
		share := 0.0
		if total > 0 {
			share = 100 * float64(p) / float64(total)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%v\t%d\t%.1f%%\t%d\t%s\t%s\t\n", d.name, d.weight, state, yesNo(inSnap), p, share, f,
			p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond))
	}
	tw.Flush()
	dm.mu.Lock()
	events := slices.Clone(dm.events)
	dm.mu.Unlock()
	if dm.live || final {
		b.WriteString("\nevents\n")
		for _, e := range events {
			b.WriteString("  " + e + "\n")
		}
	}
	if final {
		fmt.Fprintf(&b, "\n%s, %d failed, %s on another instance\n", plural(int(calls), "call"), failed, plural(int(retries), "retry"))
	}
	io.WriteString(dm.out, b.String())
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
