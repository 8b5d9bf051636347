package consul

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/hashicorp/consul/api"

	"github.com/roster-go/roster/registry/driver"
)

// health reads the passing instances of service, through gates.
func (d *Driver) health(ctx context.Context, service string, gates []gate) (driver.Snapshot, uint64, error) {
	q := &api.QueryOptions{Datacenter: d.o.Datacenter, AllowStale: d.o.AllowStale}
	var entries []*api.ServiceEntry
	var meta *api.QueryMeta
	_, err := d.run(ctx, gates, d.o.Timeout, func(ctx context.Context) (err error) {
		entries, meta, err = d.client.Health().Service(service, "", true, q.WithContext(ctx))
		return err
	})
	if err != nil {
		return driver.Snapshot{}, 0, err
	}
	cands := make([]backend.Candidate, 0, len(entries))
	for _, e := range entries {
		if e.Service == nil || e.Service.Service != service {
			continue
		}
		cands = append(cands, backend.Candidate{Instance: fromConsul(e), Standing: standing(e)})
	}
	snap := driver.Snapshot{Service: service, Instances: backend.Resolve(service, cands), At: time.Now()}
	snap.Revision = meta.LastIndex
	return snap, meta.LastIndex, nil
}

// List implements driver.Driver: the passing instances, read through
// /v1/health/service/<name>?passing (never the catalog, which has no
// health).
func (d *Driver) List(ctx context.Context, service string) (driver.Snapshot, error) {
	s, _, err := d.health(ctx, service, []gate{d.bulk, d.calls})
	if err != nil {
		return driver.Snapshot{}, d.wrap(ctx, "list "+service, err)
	}
	return s, nil
}

// Services implements driver.Driver: the catalog's service names that
// Roster can address (valid service names) and that have at least one
// passing instance. Names whose every check passes need no further
// query; only names with a failing check are confirmed one by one.
func (d *Driver) Services(ctx context.Context) ([]string, error) {
	var names map[string][]string
	var checks api.HealthChecks
	_, err := d.call(ctx, func(ctx context.Context) (err error) {
		if names, _, err = d.client.Catalog().Services(d.query(ctx)); err != nil {
			return err
		}
		checks, _, err = d.client.Health().State(api.HealthAny, d.query(ctx))
		return err
	})
	if err != nil {
		return nil, d.wrap(ctx, "services", err)
	}
	out, doubtful := sortOut(names, checks)
	confirmed, err := d.confirmPassing(ctx, doubtful)
	if err != nil {
		return nil, d.wrap(ctx, "services", err)
	}
	out = append(out, confirmed...)
	slices.Sort(out)
	return out, nil
}

// sortOut splits the valid service names into those whose every check
// passes and the doubtful ones, which have a failing check (possibly
// only on some instances) or live on a node whose own check fails.
func sortOut(names map[string][]string, checks api.HealthChecks) (passing, doubtful []string) {
	suspect := map[string]bool{}
	allSuspect := false
	for _, c := range checks {
		if c.Status == api.HealthPassing {
			continue
		}
		if c.ServiceID == "" {
			allSuspect = true // a failing node check hides every service on that node
		}
		suspect[c.ServiceName] = true
	}
	for n := range names {
		switch {
		case backend.ValidateService(n) != nil:
		case allSuspect || suspect[n]:
			doubtful = append(doubtful, n)
		default:
			passing = append(passing, n)
		}
	}
	return passing, doubtful
}

// confirmPassing returns those of names that have a passing instance,
// asking a few at a time.
func (d *Driver) confirmPassing(ctx context.Context, names []string) ([]string, error) {
	var (
		mu       sync.Mutex
		out      []string
		firstErr error
		wg       sync.WaitGroup
	)
	sem := make(chan struct{}, 8)
	for _, n := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s, _, err := d.health(ctx, n, []gate{d.bulk, d.calls})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && firstErr == nil:
				firstErr = err
			case err == nil && len(s.Instances) > 0:
				out = append(out, n)
			}
		}()
	}
	wg.Wait()
	return out, firstErr
}

// block runs one blocking query on the pool of blocking queries, within
// wait + wait/16 (Consul's jitter) + 5s; see run.
func (d *Driver) block(ctx context.Context, req func(ctx context.Context) error) error {
	_, err := d.run(ctx, []gate{d.watches}, d.o.Wait+d.o.Wait/16+5*time.Second, req)
	return err
}

// Watch implements driver.Driver: the driver's hub follows the whole
// catalog with two blocking queries and wakes the stream when its service
// may have changed; the stream then reads the service.
func (d *Driver) Watch(ctx context.Context, service string) (driver.Stream, error) {
	st := &stream{d: d, service: service, closed: make(chan struct{}), wake: make(chan struct{}, 1), bucket: newBucket(watchBurst, watchEvery)}
	d.hub.add(st)
	return st, nil
}

// The rate limit of a watch's reads and of each hub query: a burst of 5,
// then one per 50ms. A healthy watch reads once per change of its service,
// far below it; the limit only bites in a storm of changes, which it
// coalesces.
const (
	watchBurst = 5
	watchEvery = 50 * time.Millisecond
)

type stream struct {
	d       *Driver
	service string
	last    *driver.Snapshot
	bucket  *bucket
	wake    chan struct{} // 1-buffered: the service may have changed
	closed  chan struct{}
	once    sync.Once

	// guarded by d.hub.mu
	print   uint64 // fingerprint of the service's checks, as last seen by the hub
	printed bool
	held    bool  // the last state has instances
	err     error // a failed hub query, not yet reported
}

// Next implements driver.Stream: the first call returns the current
// state at once; later calls wait for the hub to wake the stream, then
// read the service. The state may be the last one again.
func (st *stream) Next(outer context.Context) (driver.Snapshot, error) {
	// Close (of the stream or the driver) must release a pending read at
	// once: it cancels the read's context.
	ctx, cancel := context.WithCancel(outer)
	defer cancel()
	go func() {
		select {
		case <-st.closed:
		case <-st.d.life.Done():
		case <-ctx.Done():
		}
		cancel()
	}()
	for {
		if err := st.ctxErr(outer); err != nil {
			return driver.Snapshot{}, err
		}
		if st.last != nil {
			if err := st.await(ctx); err != nil {
				return driver.Snapshot{}, cmpErr(st.ctxErr(outer), err)
			}
			if err := st.bucket.take(ctx); err != nil {
				return driver.Snapshot{}, st.ctxErr(outer)
			}
		}
		snap, _, err := st.d.health(ctx, st.service, []gate{st.d.hub.reads, st.d.bulk, st.d.calls})
		if err != nil {
			if cerr := st.ctxErr(outer); cerr != nil {
				return driver.Snapshot{}, cerr
			}
			// The registry marks its cache stale and reopens the watch.
			return driver.Snapshot{}, st.d.wrap(outer, "watch "+st.service, err)
		}
		if st.last != nil && snap.Revision < st.last.Revision {
			st.poke() // a stale server answered (allow_stale): read again
			continue
		}
		st.last = &snap // changed or not: Registry drops repeats
		st.d.hub.mu.Lock()
		st.held = len(snap.Instances) > 0
		st.d.hub.mu.Unlock()
		return snap, nil
	}
}

// await waits for a wake, and returns the hub's error if its queries
// failed since the last call.
func (st *stream) await(ctx context.Context) error {
	select {
	case <-st.wake:
	case <-ctx.Done():
		return ctx.Err()
	}
	st.d.hub.mu.Lock()
	defer st.d.hub.mu.Unlock()
	err := st.err
	st.err = nil
	return err
}

func cmpErr(first, second error) error {
	if first != nil {
		return first
	}
	return second
}

// poke wakes the stream.
func (st *stream) poke() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// fail records a failed hub query and wakes the stream; d.hub.mu is held.
func (st *stream) fail(err error) {
	if st.err == nil {
		st.err = err
	}
	st.poke()
}

// ctxErr reports why the stream must stop, if it must: closed, or the
// caller's context ended.
func (st *stream) ctxErr(ctx context.Context) error {
	select {
	case <-st.closed:
		return fmt.Errorf("consul: watch %s: %w", st.service, driver.ErrClosed)
	case <-st.d.life.Done():
		return fmt.Errorf("consul: watch %s: %w", st.service, driver.ErrClosed)
	default:
	}
	return ctx.Err()
}

// Close implements driver.Stream; a pending Next returns ErrClosed.
func (st *stream) Close() error {
	st.once.Do(func() {
		close(st.closed)
		st.d.hub.remove(st)
	})
	return nil
}

// bucket is a token bucket: up to burst tokens, one more every period.
type bucket struct {
	mu     sync.Mutex
	tokens float64
	burst  float64
	every  time.Duration
	at     time.Time
}

func newBucket(burst int, every time.Duration) *bucket {
	return &bucket{tokens: float64(burst), burst: float64(burst), every: every, at: time.Now()}
}

// take waits for a token.
func (b *bucket) take(ctx context.Context) error {
	b.mu.Lock()
	now := time.Now()
	b.tokens = min(b.burst, b.tokens+float64(now.Sub(b.at))/float64(b.every))
	b.at = now
	b.tokens--
	deficit := -b.tokens
	b.mu.Unlock()
	if deficit <= 0 {
		return nil
	}
	return sleep(ctx, time.Duration(deficit*float64(b.every)), nil)
}
