package loadgen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roster-go/roster/registry"
)

// bench is the state of one run.
type bench struct {
	c        Config
	run      string
	procs    []*registry.Registry // registering processes
	watchers []*registry.Registry
	leases   []*registry.Lease // instance i is in service i % Services
	gone     []bool            // deregistered or crashed

	mu      sync.Mutex
	seen    [][]map[string]bool // [watcher][service] → IDs of the latest snapshot
	changed chan struct{}       // closed and replaced on every update of seen
	wg      sync.WaitGroup
	stop    context.CancelFunc

	holding atomic.Bool  // the hold step runs
	flaps   atomic.Int64 // during the hold: leases leaving healthy, instances leaving a watcher's view
}

func (b *bench) service(i int) string { return fmt.Sprintf("bench-%s-s%04d", b.run, i%b.c.Services) }

func (b *bench) open(ctx context.Context, rep *Report) error {
	base := serverConns(b.c.URL)
	for range b.c.Processes {
		r, err := registry.Open(ctx, b.c.URL)
		if err != nil {
			return err
		}
		b.procs = append(b.procs, r)
	}
	// Registries open lazily: ask once, so that an unreachable or
	// refusing one is the error, not the watch step's timeout.
	if _, err := b.procs[0].Lookup(ctx, b.service(0)); err != nil {
		return fmt.Errorf("the registry does not answer: %w", err)
	}
	rep.serverBase = base
	rep.Server = serverStats(ctx, b.procs[0])
	return nil
}

func (b *bench) register(ctx context.Context, rep *Report) error {
	b.mu.Lock()
	b.leases = make([]*registry.Lease, b.c.Instances)
	b.gone = make([]bool, b.c.Instances)
	b.mu.Unlock()
	start := time.Now()
	err := parallel(ctx, b.c.Workers, b.c.Instances, func(ctx context.Context, i int) error {
		inst := registry.Instance{Service: b.service(i), Address: fmt.Sprintf("127.0.0.1:%d", 1024+i)}
		l, err := b.procs[i%len(b.procs)].Register(ctx, inst, registry.WithTTL(b.c.TTL), registry.WithStateHook(b.leaseState))
		b.mu.Lock()
		b.leases[i] = l
		b.mu.Unlock()
		return err
	})
	el := time.Since(start)
	rep.RegisterMS = ms(el)
	rep.RegisterPerSec = float64(b.c.Instances) / el.Seconds()
	if err != nil {
		return err
	}
	_, err = b.until(ctx, b.c.TTL+30*time.Second, b.allSeen)
	rep.WatchConvergeMS = ms(time.Since(start))
	rep.ConnsRegistering = delta(serverConns(b.c.URL), rep.serverBase+rep.ConnsWatching)
	return err
}

// parallel runs do(0…n-1) on workers goroutines; the first error stops it.
func parallel(ctx context.Context, workers, n int, do func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := do(ctx, i); err != nil {
					cancel(err)
				}
			}
		}()
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}

// watch opens the watching processes, each watching every service, and
// waits until each has a first snapshot of every service.
func (b *bench) watch(ctx context.Context, rep *Report) error {
	before := serverConns(b.c.URL)
	heap := heapInUse()
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	b.stop = stop
	b.changed = make(chan struct{})
	b.seen = make([][]map[string]bool, b.c.Watchers)
	start := time.Now()
	for wi := range b.c.Watchers {
		r, err := registry.Open(ctx, b.c.URL)
		if err != nil {
			return err
		}
		b.watchers = append(b.watchers, r)
		b.seen[wi] = make([]map[string]bool, b.c.Services)
		for s := range b.c.Services {
			w, err := r.Watch(ctx, b.service(s))
			if err != nil {
				return err
			}
			b.wg.Add(1)
			go b.follow(wctx, w, wi, s)
		}
	}
	_, err := b.until(ctx, b.c.TTL+30*time.Second, b.allFirst)
	rep.WatchOpenMS = ms(time.Since(start))
	rep.ConnsWatching = delta(serverConns(b.c.URL), before)
	rep.HeapPerWatchedServiceBytes = max(heapInUse()-heap, 0) / int64(b.c.Watchers*b.c.Services)
	return err
}

// follow records each snapshot of w until ctx ends.
func (b *bench) follow(ctx context.Context, w *registry.Watcher, wi, s int) {
	defer b.wg.Done()
	defer w.Close()
	for {
		sn, err := w.Next(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil && len(sn.Instances) == 0 {
			continue // stale, nothing cached yet: Next waits for the backend
		}
		ids := make(map[string]bool, len(sn.Instances))
		for _, in := range sn.Instances {
			ids[in.ID] = true
		}
		b.mu.Lock()
		if b.holding.Load() {
			b.countDropped(b.seen[wi][s], ids)
		}
		b.seen[wi][s] = ids
		close(b.changed)
		b.changed = make(chan struct{})
		b.mu.Unlock()
	}
}

// until waits for pred (called with b.mu held) to hold, up to timeout.
func (b *bench) until(ctx context.Context, timeout time.Duration, pred func() bool) (time.Duration, error) {
	start := time.Now()
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		b.mu.Lock()
		ok, ch := pred(), b.changed
		b.mu.Unlock()
		if ok {
			return time.Since(start), nil
		}
		select {
		case <-ch:
		case <-t.C:
			return time.Since(start), fmt.Errorf("%w within %v", errTimeout, timeout)
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		}
	}
}

// allFirst reports whether every watcher has a snapshot of every service.
func (b *bench) allFirst() bool {
	for _, byService := range b.seen {
		for _, ids := range byService {
			if ids == nil {
				return false
			}
		}
	}
	return true
}

// allSeen reports whether every watcher holds every live instance.
func (b *bench) allSeen() bool {
	for i, l := range b.leases {
		if b.gone[i] || l == nil {
			continue
		}
		if !b.seenBy(i, l.Instance().ID) {
			return false
		}
	}
	return true
}

// seenBy reports whether every watcher lists id (instance i).
func (b *bench) seenBy(i int, id string) bool {
	for wi := range b.seen {
		if !b.seen[wi][i%b.c.Services][id] {
			return false
		}
	}
	return true
}

// goneFromAll reports whether no watcher lists instance i any more.
func (b *bench) goneFromAll(i int, id string) func() bool {
	return func() bool {
		for wi := range b.seen {
			if b.seen[wi][i%b.c.Services][id] {
				return false
			}
		}
		return true
	}
}

// leaseState counts a lease leaving the healthy state during the hold.
func (b *bench) leaseState(s registry.LeaseState, _ error) {
	if s != registry.LeaseHealthy && b.holding.Load() {
		b.flaps.Add(1)
	}
}

// countDropped counts the instances of before that after lacks: during
// the hold nothing is deregistered, so each one is a flap.
func (b *bench) countDropped(before, after map[string]bool) {
	for id := range before {
		if !after[id] {
			b.flaps.Add(1)
		}
	}
}

func (b *bench) hold(ctx context.Context, rep *Report) error {
	cpu0, cmds0 := cpuTime(), b.commands(ctx)
	start := time.Now()
	b.holding.Store(true)
	select {
	case <-time.After(b.c.Hold):
	case <-ctx.Done():
		return ctx.Err()
	}
	b.holding.Store(false)
	rep.Flaps = int(b.flaps.Load())
	el := time.Since(start)
	rep.HoldMS = ms(el)
	rep.ClientCPUPercent = 100 * (cpuTime() - cpu0).Seconds() / el.Seconds()
	if cmds1 := b.commands(ctx); cmds0 >= 0 && cmds1 >= cmds0 {
		rep.ServerCommandsPerSec = float64(cmds1-cmds0) / el.Seconds()
	}
	for _, l := range b.leases {
		if l.State() != registry.LeaseHealthy {
			rep.UnhealthyLeases++
		}
	}
	rep.ConnsTotal = delta(serverConns(b.c.URL), rep.serverBase)
	return nil
}

func (b *bench) commands(ctx context.Context) int64 { return serverCommands(ctx, b.procs[0]) }

func (b *bench) lookup(ctx context.Context, rep *Report) error {
	d := make([]time.Duration, 0, b.c.Probes)
	for range b.c.Probes {
		svc := b.service(rand.IntN(b.c.Services))
		start := time.Now()
		if _, err := b.procs[0].Lookup(ctx, svc); err != nil {
			return err
		}
		d = append(d, time.Since(start))
	}
	rep.Lookup = summarize(d)
	return nil
}

// deregister times deregistration → every watcher, one instance at a
// time, spread over the services.
func (b *bench) deregister(ctx context.Context, rep *Report) error {
	d, err := b.remove(ctx, min(b.c.Probes, b.c.Instances/2), 30*time.Second, func(l *registry.Lease) {
		_ = l.Deregister(ctx)
	})
	rep.Deregister = summarize(d)
	return err
}

// crash times an abandoned lease (a crashed process: no deregistration)
// → every watcher.
func (b *bench) crash(ctx context.Context, rep *Report) error {
	n := min(max(b.c.Probes/10, 1), b.c.Instances/4)
	d, err := b.remove(ctx, n, 3*b.c.TTL+30*time.Second, (*registry.Lease).Abandon)
	rep.Crash = summarize(d)
	return err
}

// remove applies leave to n live instances in turn, timing each until no
// watcher lists it.
func (b *bench) remove(ctx context.Context, n int, timeout time.Duration, leave func(*registry.Lease)) ([]time.Duration, error) {
	var out []time.Duration
	for i := 0; i < len(b.leases) && len(out) < n; i++ {
		if b.gone[i] {
			continue
		}
		l := b.leases[i]
		id := l.Instance().ID
		b.mu.Lock()
		b.gone[i] = true
		b.mu.Unlock()
		start := time.Now()
		leave(l)
		if _, err := b.until(ctx, timeout, b.goneFromAll(i, id)); err != nil {
			return out, fmt.Errorf("%s: %w", id, err)
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// close deregisters what is left and closes every registry.
func (b *bench) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = parallel(ctx, max(b.c.Workers, 1), len(b.leases), func(ctx context.Context, i int) error {
		if l := b.leases[i]; l != nil && !b.gone[i] {
			_ = l.Deregister(ctx)
		}
		return nil
	})
	if b.stop != nil {
		b.stop()
	}
	for _, r := range slices.Concat(b.watchers, b.procs) {
		_ = r.Close()
	}
	b.wg.Wait()
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
