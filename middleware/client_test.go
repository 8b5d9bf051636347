package middleware_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
	"github.com/roster-go/roster/selector"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backend is a real HTTP instance on loopback.
type backend struct {
	srv    *httptest.Server
	lease  *registry.Lease
	hits   atomic.Int64
	status atomic.Int32 // HTTP status to answer; 200 by default
	flaky  atomic.Bool  // answer 503 to 3 requests in 10, spread out
	killed atomic.Bool
}

func startBackend(t *testing.T, reg *registry.Registry, svc string, weight uint32) *backend {
	t.Helper()
	return startZoned(t, reg, svc, weight, "")
}

// startZoned is startBackend with the instance registered in zone.
func startZoned(t *testing.T, reg *registry.Registry, svc string, weight uint32, zone string) *backend {
	t.Helper()
	return startLocated(t, reg, svc, weight, zone, "")
}

// startLocated is startBackend with the instance registered in zone of
// region.
func startLocated(t *testing.T, reg *registry.Registry, svc string, weight uint32, zone, region string) *backend {
	t.Helper()
	b := &backend{}
	b.status.Store(200)
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := b.hits.Add(1); b.flaky.Load() && n%10%3 == 0 && n%10 != 9 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(int(b.status.Load()))
	}))
	t.Cleanup(b.kill)
	l, err := reg.Register(context.Background(), registry.Instance{
		Service: svc, Address: b.srv.Listener.Addr().String(), Weight: weight, Zone: zone, Region: region,
	}, registry.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b.lease = l
	return b
}

// kill stops the server without deregistering, as a crash would.
func (b *backend) kill() {
	if b.killed.CompareAndSwap(false, true) {
		b.srv.CloseClientConnections()
		b.srv.Close()
	}
}

func (b *backend) id() string { return b.lease.Instance().ID }

var httpClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}

// get is the call: a GET whose non-2xx answers are errors (5xx retryable).
func get(ctx context.Context, in registry.Instance) error {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+in.Address+"/", nil)
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 500:
		return fmt.Errorf("status %d", resp.StatusCode)
	case resp.StatusCode >= 400:
		return middleware.BusinessError(fmt.Errorf("status %d", resp.StatusCode))
	}
	return nil
}

type env struct {
	srv    *memory.Server
	writer *registry.Registry // where instances register
	reader *registry.Registry // what the client discovers through
	link   *memory.Driver
}

func newEnv(t *testing.T) *env {
	srv := memory.NewServer()
	d := memory.NewDriver(srv)
	e := &env{srv: srv, writer: registry.New(memory.NewDriver(srv)), reader: registry.New(d), link: d}
	t.Cleanup(func() { e.reader.Close(); e.writer.Close(); httpClient.CloseIdleConnections() })
	return e
}

func newClient(t *testing.T, reg *registry.Registry, opts ...middleware.Option) *middleware.Client {
	t.Helper()
	c, err := middleware.NewClient(reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// load runs n calls from workers goroutines and returns the failures.
func load(c *middleware.Client, svc string, workers, n int, midway func()) []error {
	var (
		mu    sync.Mutex
		errs  []error
		count atomic.Int64
		once  sync.Once
		wg    sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := count.Add(1)
				if i > int64(n) {
					return
				}
				if i == int64(n/2) && midway != nil {
					once.Do(midway)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				err := c.Do(ctx, svc, get)
				cancel()
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return errs
}

func TestKilledInstanceNoFailedCalls(t *testing.T) {
	for _, st := range []selector.Strategy{selector.RoundRobin, selector.P2CEWMA, selector.LeastRequest} {
		t.Run(string(st), func(t *testing.T) {
			e := newEnv(t)
			bs := []*backend{startBackend(t, e.writer, "api", 100), startBackend(t, e.writer, "api", 100), startBackend(t, e.writer, "api", 100)}
			q := middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: 2, BaseEjection: time.Minute, MaxEjectedPercent: 50})
			c := newClient(t, e.reader, middleware.WithQuarantine(q), middleware.WithSelector(selector.WithStrategy(st)))
			victim := bs[1]
			errs := load(c, "api", 4, 1500, victim.kill)
			if len(errs) > 0 {
				t.Fatalf("%d calls failed after an instance was killed; first: %v", len(errs), errs[0])
			}
			if bs[0].hits.Load() == 0 || victim.hits.Load() == 0 || bs[2].hits.Load() == 0 {
				t.Fatalf("hits %d/%d/%d: load was not spread", bs[0].hits.Load(), victim.hits.Load(), bs[2].hits.Load())
			}
			if st != selector.RoundRobin {
				return // latency-aware strategies may steer away before quarantine triggers
			}
			// Round robin keeps offering the dead instance: quarantine must take it out.
			ej := q.Ejected("api")
			if len(ej) != 1 || ej[0] != victim.id() {
				t.Fatalf("quarantined %v, want exactly the killed instance %s", ej, victim.id())
			}
		})
	}
}

func TestRegistryUnreachableServesStale(t *testing.T) {
	e := newEnv(t)
	startBackend(t, e.writer, "api", 100)
	startBackend(t, e.writer, "api", 100)
	c := newClient(t, e.reader)
	if err := c.Do(context.Background(), "api", get); err != nil {
		t.Fatal(err)
	}
	e.link.SetReachable(false) // the client's registry connection is down
	deadline := time.Now().Add(3 * time.Second)
	for {
		s, _ := c.Snapshot("api")
		if s.Stale {
			if len(s.Instances) != 2 {
				t.Fatalf("stale snapshot holds %d instances, want the last good 2", len(s.Instances))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("client never noticed the registry outage")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if errs := load(c, "api", 2, 200, nil); len(errs) > 0 {
		t.Fatalf("%d calls failed while serving from the stale cache: %v", len(errs), errs[0])
	}
}

func TestMaxStaleness(t *testing.T) {
	e := newEnv(t)
	startBackend(t, e.writer, "api", 100)
	c := newClient(t, e.reader, middleware.WithMaxStaleness(100*time.Millisecond))
	if err := c.Do(context.Background(), "api", get); err != nil {
		t.Fatal(err)
	}
	e.link.SetReachable(false)
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := c.Do(context.Background(), "api", get)
		if errors.Is(err, middleware.ErrStale) {
			if !errors.Is(err, registry.ErrUnavailable) {
				t.Fatalf("ErrStale %v does not wrap ErrUnavailable", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls still served (%v) long after the max staleness", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.link.SetReachable(true)
	deadline = time.Now().Add(3 * time.Second)
	for c.Do(context.Background(), "api", get) != nil {
		if time.Now().After(deadline) {
			t.Fatal("calls did not recover with the registry")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStaleServedForTheWholeOutage: with default options, an outage of
// the registry far longer than any old bound (a day, on the clock
// staleness is measured on) leaves calls going to the instances last
// listed; only an explicit WithMaxStaleness ends them.
func TestStaleServedForTheWholeOutage(t *testing.T) {
	e := newEnv(t)
	startBackend(t, e.writer, "api", 100)
	plain := newClient(t, e.reader)
	bounded := newClient(t, e.reader, middleware.WithMaxStaleness(time.Hour))
	for _, c := range []*middleware.Client{plain, bounded} {
		if err := c.Do(context.Background(), "api", get); err != nil {
			t.Fatal(err)
		}
	}
	e.link.SetReachable(false)
	waitStale(t, plain, "api")
	waitStale(t, bounded, "api")
	middleware.SkipClock(24 * time.Hour)
	if err := plain.Do(context.Background(), "api", get); err != nil {
		t.Errorf("default client, a day into the outage: %v", err)
	}
	if err := bounded.Do(context.Background(), "api", get); !errors.Is(err, middleware.ErrStale) {
		t.Errorf("WithMaxStaleness(1h), a day into the outage: %v, want ErrStale", err)
	}
}

// waitStale waits until c serves svc from a stale list.
func waitStale(t *testing.T, c *middleware.Client, svc string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		if snap, ok := c.Snapshot(svc); ok && snap.Stale {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("client never noticed the registry outage")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestFailingInstanceQuarantinedThenReadmitted(t *testing.T) {
	e := newEnv(t)
	good := startBackend(t, e.writer, "api", 100)
	bad := startBackend(t, e.writer, "api", 100)
	_ = good
	bad.status.Store(503)
	q := middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: 3, BaseEjection: time.Second, MaxEjectedPercent: 50})
	// Round robin keeps sending the failing instance its share; P2C-EWMA
	// would starve it before it fails 3 times in a row.
	c := newClient(t, e.reader, middleware.WithQuarantine(q), middleware.WithSelector(selector.WithStrategy(selector.RoundRobin)))
	if errs := load(c, "api", 2, 200, nil); len(errs) > 0 {
		t.Fatalf("%d calls failed with one of two instances answering 503: %v", len(errs), errs[0])
	}
	if ej := q.Ejected("api"); len(ej) != 1 || ej[0] != bad.id() {
		t.Fatalf("ejected %v, want the failing instance", ej)
	}
	bad.status.Store(200)
	hits := bad.hits.Load()
	deadline := time.Now().Add(5 * time.Second)
	for bad.hits.Load() < hits+20 {
		if time.Now().After(deadline) {
			t.Fatalf("recovered instance not readmitted: %d hits since recovery, ejected %v", bad.hits.Load()-hits, q.Ejected("api"))
		}
		if err := c.Do(context.Background(), "api", get); err != nil {
			t.Fatal(err)
		}
	}
	if ej := q.Ejected("api"); len(ej) != 0 {
		t.Fatalf("still ejected after recovery: %v", ej)
	}
}

func TestBusinessErrorsNeitherRetriedNorCounted(t *testing.T) {
	e := newEnv(t)
	b := startBackend(t, e.writer, "api", 100)
	b.status.Store(404)
	q := middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: 2})
	c := newClient(t, e.reader, middleware.WithQuarantine(q))
	for i := 0; i < 20; i++ {
		if err := c.Do(context.Background(), "api", get); err == nil {
			t.Fatal("404 reported as success")
		}
	}
	if got := b.hits.Load(); got != 20 {
		t.Fatalf("%d attempts for 20 calls answering 404: business errors must not be retried", got)
	}
	if ej := q.Ejected("api"); len(ej) != 0 {
		t.Fatalf("business errors ejected %v", ej)
	}
}

func TestSingleInstanceNeverGoesDark(t *testing.T) {
	e := newEnv(t)
	b := startBackend(t, e.writer, "api", 100)
	b.status.Store(503)
	q := middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: 2, BaseEjection: time.Minute})
	c := newClient(t, e.reader, middleware.WithQuarantine(q))
	for i := 0; i < 10; i++ {
		_ = c.Do(context.Background(), "api", get)
	}
	b.status.Store(200)
	// Ejected, but it is the only instance: panic mode keeps it in use.
	if err := c.Do(context.Background(), "api", get); err != nil {
		t.Fatalf("a recovered single instance is unreachable through quarantine: %v", err)
	}
}

func TestCancellationIsNotRetried(t *testing.T) {
	e := newEnv(t)
	startBackend(t, e.writer, "api", 100)
	startBackend(t, e.writer, "api", 100)
	c := newClient(t, e.reader)
	if err := c.Do(context.Background(), "api", get); err != nil { // warm the cache
		t.Fatal(err)
	}
	var calls atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	err := c.Do(ctx, "api", func(ctx context.Context, in registry.Instance) error {
		calls.Add(1)
		cancel()
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) || calls.Load() != 1 {
		t.Fatalf("cancelled call: err %v after %d attempts; want context.Canceled after 1", err, calls.Load())
	}
}

func TestRetryTriesEachInstanceOnce(t *testing.T) {
	e := newEnv(t)
	for range 3 {
		startBackend(t, e.writer, "api", 100)
	}
	c := newClient(t, e.reader, middleware.WithMiddleware(middleware.Retry(middleware.RetryConfig{
		MaxAttempts: 3, BaseBackoff: time.Millisecond, BudgetRatio: 1, BudgetMinPerSecond: 100,
	})))
	if err := c.Do(context.Background(), "api", get); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		seen := map[string]int{}
		err := c.Do(context.Background(), "api", func(ctx context.Context, in registry.Instance) error {
			seen[in.ID]++
			return errors.New("unavailable")
		})
		if err == nil || len(seen) != 3 {
			t.Fatalf("3 attempts went to %v; want 3 different instances", seen)
		}
	}
}

func TestRetryBudgetBoundsAmplification(t *testing.T) {
	e := newEnv(t)
	for range 3 {
		startBackend(t, e.writer, "api", 100)
	}
	// 20% of calls, at least 5 per 10s window.
	c := newClient(t, e.reader, middleware.WithMiddleware(middleware.Retry(middleware.RetryConfig{MaxAttempts: 3, BaseBackoff: time.Microsecond,
		BudgetRatio: 0.2, BudgetMinPerSecond: 0.5})))
	var attempts atomic.Int64
	exhausted := 0
	const calls = 500
	for i := 0; i < calls; i++ {
		err := c.Do(context.Background(), "api", func(context.Context, registry.Instance) error {
			attempts.Add(1)
			return errors.New("outage")
		})
		if errors.Is(err, middleware.ErrBudgetExhausted) {
			exhausted++
		}
	}
	if a := attempts.Load(); float64(a) > 1.25*calls {
		t.Fatalf("%d attempts for %d calls during a full outage: retries amplified load %.2f×", a, calls, float64(a)/calls)
	}
	if exhausted == 0 {
		t.Fatal("the budget never refused a retry")
	}
}

func TestZeroProtection(t *testing.T) {
	e := newEnv(t)
	b := startBackend(t, e.writer, "api", 100)
	c := newClient(t, e.reader, middleware.WithZeroProtection(300*time.Millisecond))
	if err := c.Do(context.Background(), "api", get); err != nil {
		t.Fatal(err)
	}
	// An operator wipes the service by mistake: the client keeps the list.
	e.srv.Delete("api", b.id())
	b.lease.Abandon()
	// Wait until the client's (shared) watch cache holds the empty answer.
	waitEmpty := time.Now().Add(3 * time.Second)
	for {
		s, err := e.reader.Lookup(context.Background(), "api")
		if err == nil && len(s.Instances) == 0 {
			break
		}
		if time.Now().After(waitEmpty) {
			t.Fatal("the empty answer never reached the client's watch cache")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.Do(context.Background(), "api", get); err != nil {
		t.Fatalf("call failed inside the zero-instance protection window: %v", err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		s, _ := c.Snapshot("api")
		if len(s.Instances) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("empty answer never applied after the protection window")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// persisted starts a backend of "api", calls it once through a client
// persisting snapshots in a new directory, and closes that client.
func persisted(t *testing.T) (*env, string) {
	t.Helper()
	dir := t.TempDir()
	e := newEnv(t)
	startBackend(t, e.writer, "api", 100)
	c := newClient(t, e.reader, middleware.WithSnapshotDir(dir))
	if err := c.Do(context.Background(), "api", get); err != nil {
		t.Fatal(err)
	}
	c.Close()
	return e, dir
}

func TestSnapshotDirColdStartDuringOutage(t *testing.T) {
	e, dir := persisted(t)
	// A new process starts while its registry is unreachable.
	d := memory.NewDriver(e.srv)
	d.SetReachable(false)
	cold := registry.New(d)
	defer cold.Close()
	c2 := newClient(t, cold, middleware.WithSnapshotDir(dir))
	if err := c2.Do(context.Background(), "api", get); err != nil {
		t.Fatalf("cold start during an outage with a snapshot dir: %v", err)
	}
	if s, _ := c2.Snapshot("api"); !s.Stale || len(s.Instances) != 1 {
		t.Fatalf("cold-start snapshot %+v, want the persisted instance marked stale", s)
	}
}

// TestSnapshotDirRefusesAlteredFiles: a persisted snapshot is held to
// what the registry serves from a backend. A file altered on disk — an
// address that is not host:port, a control character, another service's
// instance, a repeated ID — is not served at a cold start.
func TestSnapshotDirRefusesAlteredFiles(t *testing.T) {
	good := `{"id":"a1","service":"api","address":"127.0.0.1:1","weight":100}`
	for name, inst := range map[string]string{
		"address":       `{"id":"a2","service":"api","address":"evil host:80","weight":100}`,
		"control":       `{"id":"a2","service":"api","address":"127.0.0.1:2","weight":100,"version":"1\u001b[2J"}`,
		"other service": `{"id":"a2","service":"billing","address":"127.0.0.1:2","weight":100}`,
		"repeated ID":   good,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			file := `{"format":1,"snapshot":{"service":"api","revision":1,"instances":[` + good + `,` + inst + `]}}`
			if err := os.WriteFile(filepath.Join(dir, "api.json"), []byte(file), 0o600); err != nil {
				t.Fatal(err)
			}
			d := memory.NewDriver(memory.NewServer())
			d.SetReachable(false)
			cold := registry.New(d)
			defer cold.Close()
			c := newClient(t, cold, middleware.WithSnapshotDir(dir), middleware.WithFirstSnapshotTimeout(200*time.Millisecond))
			if err := c.Do(context.Background(), "api", get); err == nil {
				t.Fatal("a call went to an instance of an altered snapshot file")
			}
			if s, _ := c.Snapshot("api"); len(s.Instances) != 0 {
				t.Fatalf("served %d instances of an altered snapshot file", len(s.Instances))
			}
		})
	}
}

func TestUnknownStrategyFailsAtConstruction(t *testing.T) {
	e := newEnv(t)
	_, err := middleware.NewClient(e.reader, middleware.WithSelector(selectorStrategy("bogus")))
	if err == nil {
		t.Fatal("NewClient accepted an unknown strategy")
	}
}

func selectorStrategy(name string) selector.Option {
	return selector.WithStrategy(selector.Strategy(name))
}

func memDriver(e *env) driver.Driver { return memory.NewDriver(e.srv) }

// TestSnapshotDirAgeCountsFromLastConfirmation: a service whose instances
// have not changed for longer than the maximum staleness, but which the
// registry confirmed until just before the outage, is usable at a cold
// start: its age counts from the last confirmation, not the last change.
func TestSnapshotDirAgeCountsFromLastConfirmation(t *testing.T) {
	dir := t.TempDir()
	const maxStale = time.Second
	e := newEnv(t)
	startBackend(t, e.writer, "api", 100)
	c := newClient(t, e.reader, middleware.WithSnapshotDir(dir), middleware.WithMaxStaleness(maxStale))
	if err := c.Do(context.Background(), "api", get); err != nil {
		t.Fatal(err)
	}
	snap, _ := c.Snapshot("api")
	// Stay fresh, unchanged, for longer than the maximum staleness.
	file := filepath.Join(dir, "api.json")
	deadline := time.Now().Add(5 * time.Second)
	for {
		fi, err := os.Stat(file)
		if err == nil && fi.ModTime().Sub(snap.At) > 2*maxStale {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot file never confirmed past %v after its change (stat: %v)", 2*maxStale, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.Close()
	d := memory.NewDriver(e.srv)
	d.SetReachable(false)
	cold := registry.New(d)
	defer cold.Close()
	c2 := newClient(t, cold, middleware.WithSnapshotDir(dir), middleware.WithMaxStaleness(maxStale))
	if err := c2.Do(context.Background(), "api", get); err != nil {
		t.Fatalf("cold start from a snapshot confirmed moments ago, changed %v ago: %v", time.Since(snap.At), err)
	}
}

// TestSnapshotDirFromTheFutureIsNotFresh: a persisted snapshot dated
// after now (the clock went back since, or the file was set by hand) has
// an unknown age: under a bound it is too old, not newer than new.
func TestSnapshotDirFromTheFutureIsNotFresh(t *testing.T) {
	e, dir := persisted(t)
	file := filepath.Join(dir, "api.json")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(240 * time.Hour)
	f["snapshot"].(map[string]any)["at"] = future
	if b, err = json.Marshal(f); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(file, future, future); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts []middleware.Option
		want error
	}{
		{"bounded", []middleware.Option{middleware.WithMaxStaleness(time.Hour)}, middleware.ErrStale},
		{"default", nil, nil},
	} {
		d := memory.NewDriver(e.srv)
		d.SetReachable(false)
		cold := registry.New(d)
		c := newClient(t, cold, append(tc.opts, middleware.WithSnapshotDir(dir))...)
		if err := c.Do(context.Background(), "api", get); !errors.Is(err, tc.want) {
			t.Errorf("%s: cold start from a snapshot dated %v ahead: %v, want %v", tc.name, time.Until(future).Round(time.Hour), err, tc.want)
		}
		c.Close()
		cold.Close()
	}
}

// TestExtremeOptionsNeverPanic: durations up to math.MaxInt64 in retry
// and quarantine settings give long waits, never a wrapped negative one.
func TestExtremeOptionsNeverPanic(t *testing.T) {
	e := newEnv(t)
	b := startBackend(t, e.writer, "api", 100)
	startBackend(t, e.writer, "api", 100)
	b.status.Store(503)
	q := middleware.NewQuarantine(middleware.QuarantineConfig{
		ConsecutiveFailures: 1, BaseEjection: math.MaxInt64 - 1, MaxEjection: math.MaxInt64,
	})
	c := newClient(t, e.reader, middleware.WithQuarantine(q), middleware.WithMiddleware(
		middleware.Retry(middleware.RetryConfig{MaxAttempts: 100, BaseBackoff: time.Nanosecond, MaxBackoff: math.MaxInt64,
			BudgetRatio: 1, BudgetMinPerSecond: 1e6}),
		q.Middleware()))
	for range 50 {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_ = c.Do(ctx, "api", get) // may fail: the point is that nothing panics
		cancel()
	}
	if !slices.Contains(q.Ejected("api"), b.id()) {
		t.Error("the failing instance was never ejected")
	}
}
