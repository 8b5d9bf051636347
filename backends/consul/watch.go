package consul

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/roster-go/roster/registry/driver"
)

func isNotFound(err error) bool { return errors.Is(err, driver.ErrNotFound) }

// health reads the passing instances of service. wait > 0 makes it a
// blocking query on index, on the pool of blocking queries.
func (d *Driver) health(ctx context.Context, service string, index uint64, wait time.Duration) (driver.Snapshot, uint64, error) {
	q := &api.QueryOptions{Datacenter: d.o.Datacenter, AllowStale: d.o.AllowStale}
	var entries []*api.ServiceEntry
	var meta *api.QueryMeta
	read := func(c *api.Client) func(ctx context.Context) error {
		return func(ctx context.Context) (err error) {
			entries, meta, err = c.Health().Service(service, "", true, q.WithContext(ctx))
			return err
		}
	}
	var err error
	if wait > 0 {
		q.WaitIndex, q.WaitTime = index, wait
		err = d.block(ctx, read(d.watchClient))
	} else {
		_, err = d.call(ctx, read(d.client))
	}
	if err != nil {
		return driver.Snapshot{}, 0, err
	}
	snap := driver.Snapshot{Service: service, Instances: make([]driver.Instance, 0, len(entries)), At: time.Now()}
	for _, e := range entries {
		if e.Service == nil || e.Service.Service != service {
			continue
		}
		snap.Instances = append(snap.Instances, fromConsul(e))
	}
	driver.SortInstances(snap.Instances)
	snap.Revision = meta.LastIndex
	return snap, meta.LastIndex, nil
}

// List implements driver.Driver: the passing instances, read through
// /v1/health/service/<name>?passing (never the catalog, which has no
// health).
func (d *Driver) List(ctx context.Context, service string) (driver.Snapshot, error) {
	if err := d.enter(ctx); err != nil {
		return driver.Snapshot{}, err
	}
	s, _, err := d.health(ctx, service, 0, 0)
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
	if err := d.enter(ctx); err != nil {
		return nil, err
	}
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
		case driver.ValidateService(n) != nil:
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
			s, _, err := d.health(ctx, n, 0, 0)
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

// Watch implements driver.Driver with blocking queries.
func (d *Driver) Watch(ctx context.Context, service string) (driver.Stream, error) {
	if err := d.enter(ctx); err != nil {
		return nil, err
	}
	return &stream{d: d, service: service, closed: make(chan struct{}), bucket: newBucket(watchBurst, watchEvery)}, nil
}

// The blocking loop's rate limit: a burst of 5, then one query per 50ms.
// A healthy watch makes one query per change (or per wait), far below it;
// the limit only bites when Consul wakes the watch in a storm (writes to
// other services, index resets), which would otherwise be a busy loop.
const (
	watchBurst = 5
	watchEvery = 50 * time.Millisecond
)

type stream struct {
	d       *Driver
	service string
	index   uint64 // 0: the next read does not block
	last    *driver.Snapshot
	bucket  *bucket
	closed  chan struct{}
	once    sync.Once
}

// Next implements driver.Stream: the first call returns the current
// state at once; later calls block on the index until the passing set
// differs from the last one returned.
func (st *stream) Next(outer context.Context) (driver.Snapshot, error) {
	// Close (of the stream or the driver) must release a blocking query at
	// once: it cancels the query's context.
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
		wait := time.Duration(0)
		if st.last != nil {
			// Every query after the first is rate limited, including the
			// non-blocking re-read after an index reset.
			if err := st.bucket.take(ctx); err != nil {
				return driver.Snapshot{}, st.ctxErr(outer)
			}
			if st.index > 0 {
				wait = st.d.o.Wait
			}
		}
		snap, index, err := st.d.health(ctx, st.service, st.index, wait)
		if err != nil {
			if cerr := st.ctxErr(outer); cerr != nil {
				return driver.Snapshot{}, cerr
			}
			// The registry marks its cache stale and reopens the watch.
			return driver.Snapshot{}, st.d.wrap(outer, "watch "+st.service, err)
		}
		switch {
		case index < st.index:
			// The index went backwards (agent restarted, snapshot
			// restored): forget it and read afresh without blocking.
			st.index = 0
			continue
		case index < 1:
			st.index = 1 // index 0 would make every query return at once
		default:
			st.index = index
		}
		if st.last != nil && st.last.SameInstances(snap) {
			continue // woken without a change of the passing set
		}
		st.last = &snap
		return snap, nil
	}
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
	st.once.Do(func() { close(st.closed) })
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
	t := time.NewTimer(time.Duration(deficit * float64(b.every)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
