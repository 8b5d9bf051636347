package conformance

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// TB is the part of testing.TB the checks use, so that the suite also
// runs outside "go test" (the roster CLI's conformance command).
type TB interface {
	Helper()
	Name() string
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Fatal(args ...any)
	Skipf(format string, args ...any)
	Failed() bool
	Cleanup(func())
	Context() context.Context
}

// check is one named contract.
type check struct {
	name     string
	fault    bool // uses fault hooks or a backend-wide effect: never run in parallel
	run      func(t TB, s *suite)
	needs    string // optional hook name, for the skip message
	needsOK  func(h Harness) bool
	describe string
}

// Names returns the names of all checks, in run order.
func Names() []string {
	var n []string
	for _, c := range checks {
		n = append(n, c.name)
	}
	return n
}

type suite struct {
	h   Harness
	cfg Config
	// maxTTL, when set, is the longest TTL the run may write
	// (MaxRecordTTL under RunChecks): its drivers refuse longer ones.
	maxTTL time.Duration
}

// Run runs every check as a subtest of t, named after the check
// (-run 'TestConformance/LimitsAtAndPast' runs one). Fault checks, which
// affect the whole backend, run one at a time first; the checks that need
// no fault hook then run in parallel with each other (Go starts parallel
// subtests once Run returns, so the two kinds never overlap).
func Run(t *testing.T, h Harness) {
	s := &suite{h: h, cfg: h.Config().withDefaults()}
	for _, c := range checks {
		if c.fault {
			t.Run(c.name, func(t *testing.T) { s.runOne(t, c) })
		}
	}
	for _, c := range checks {
		if !c.fault {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				s.runOne(t, c)
			})
		}
	}
}

func (s *suite) runOne(t TB, c check) {
	if reason, ok := s.cfg.Skip[c.name]; ok {
		t.Skipf("declared by the harness: %s", reason)
	}
	if ro, ok := s.h.(ReadOnly); ok {
		s.runReadOnly(t, c, ro)
		return
	}
	if c.needsOK != nil && !c.needsOK(s.h) {
		t.Skipf("harness has no %s hook", c.needs)
	}
	c.run(t, s)
}

// Result is the outcome of one check when run by RunChecks.
type Result struct {
	Name     string
	Passed   bool
	Skipped  bool
	Reason   string // failure or skip messages
	Duration time.Duration
}

// RunChecks runs the checks outside "go test", one at a time, and reports
// each result to report as it finishes. Names filters the checks to run
// (all when empty). It is what "roster conformance URL" uses.
//
// Every record it writes has a TTL of at most [MaxRecordTTL], and the
// run's marker tells other runs that its records are live, so that
// [CleanLeftovers] leaves them alone. So TTLEdges checks only the TTLs
// within that bound, and a Config.TTL above it fails every check.
func RunChecks(ctx context.Context, h Harness, names []string, report func(Result)) []Result {
	s := &suite{h: h, cfg: h.Config().withDefaults(), maxTTL: MaxRecordTTL}
	if r, err := s.newRegistry(ctx); err == nil {
		// Without the marker, other runs may clean this run's records
		// after two minutes; the checks then fail, which says enough.
		_ = holdMarker(ctx, r)
		defer r.Close()
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []Result
	for _, c := range checks {
		if len(want) > 0 && !want[c.name] {
			continue
		}
		r := runStandalone(ctx, s, c)
		out = append(out, r)
		if report != nil {
			report(r)
		}
	}
	return out
}

func runStandalone(ctx context.Context, s *suite, c check) Result {
	ctx, cancel := context.WithCancel(ctx)
	t := &standaloneT{name: c.name, ctx: ctx}
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("panic: %v", p)
			}
		}()
		s.runOne(t, c)
	}()
	<-done
	cancel()
	t.runCleanups()
	r := Result{Name: c.name, Duration: time.Since(start)}
	t.mu.Lock()
	defer t.mu.Unlock()
	r.Passed, r.Skipped = !t.failed && !t.skipped, t.skipped
	r.Reason = strings.Join(t.msgs, "; ")
	return r
}

type standaloneT struct {
	name     string
	ctx      context.Context
	mu       sync.Mutex
	failed   bool
	skipped  bool
	msgs     []string
	cleanups []func()
}

func (t *standaloneT) Helper()                  {}
func (t *standaloneT) Name() string             { return t.name }
func (t *standaloneT) Context() context.Context { return t.ctx }
func (t *standaloneT) Logf(string, ...any)      {}
func (t *standaloneT) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}
func (t *standaloneT) Errorf(f string, a ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed = true
	t.msgs = append(t.msgs, fmt.Sprintf(f, a...))
}
func (t *standaloneT) Fatalf(f string, a ...any) { t.Errorf(f, a...); runtime.Goexit() }
func (t *standaloneT) Fatal(a ...any)            { t.Errorf("%s", fmt.Sprint(a...)); runtime.Goexit() }
func (t *standaloneT) Skipf(f string, a ...any) {
	t.mu.Lock()
	t.skipped = true
	t.msgs = append(t.msgs, fmt.Sprintf(f, a...))
	t.mu.Unlock()
	runtime.Goexit()
}
func (t *standaloneT) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}
func (t *standaloneT) runCleanups() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

// ---- helpers shared by the checks ----

// options are the Registry options the harness declared. Loopback is
// allowed: the checks register 127.0.0.1 addresses that nobody dials,
// and "roster conformance" runs them against remote deployments too.
func (s *suite) options() []registry.Option {
	opts := []registry.Option{registry.AllowLoopback()}
	if s.cfg.ResyncInterval == 0 {
		return opts
	}
	return append(opts, registry.WithResyncInterval(s.cfg.ResyncInterval))
}

// wrap makes a Registry of a driver the harness made, as a user would.
func (s *suite) wrap(d driver.Driver, err error) (*registry.Registry, error) {
	if err != nil {
		return nil, err
	}
	if s.maxTTL > 0 {
		d = boundedDriver{d, s.maxTTL}
	}
	return registry.New(d, s.options()...), nil
}

// boundedDriver refuses to write a record that would outlive a killed
// run by more than max.
type boundedDriver struct {
	driver.Driver
	max time.Duration
}

func (d boundedDriver) Register(ctx context.Context, inst driver.Instance, ttl time.Duration) (driver.Registration, error) {
	if ttl > d.max {
		return nil, fmt.Errorf("conformance: %s/%s: TTL %v is above the run's bound of %v, not written: %w",
			inst.Service, inst.ID, ttl, d.max, registry.ErrInvalid)
	}
	return d.Driver.Register(ctx, inst, ttl)
}

// newRegistry wraps a new driver of the harness.
func (s *suite) newRegistry(ctx context.Context) (*registry.Registry, error) {
	r, err := s.wrap(s.h.MakeDriver(ctx))
	if err != nil {
		return nil, fmt.Errorf("Harness.MakeDriver: %w", err)
	}
	return r, nil
}

// open makes a registry and closes it at cleanup.
func (s *suite) open(t TB) *registry.Registry {
	t.Helper()
	return s.openWith(t, s.newRegistry)
}

// observer is open, but by URL when the harness has one: the registry
// that watches and looks up in most checks.
func (s *suite) observer(t TB) *registry.Registry {
	t.Helper()
	u, ok := s.h.(URLOpener)
	if !ok {
		return s.open(t)
	}
	return s.openWith(t, func(ctx context.Context) (*registry.Registry, error) {
		return registry.Open(ctx, u.URL(), s.options()...)
	})
}

func (s *suite) openWith(t TB, open func(context.Context) (*registry.Registry, error)) *registry.Registry {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r, err := open(ctx)
	if err != nil {
		t.Fatalf("open a registry: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

var portMu sync.Mutex
var nextPort = 20000

func addr() string {
	portMu.Lock()
	defer portMu.Unlock()
	nextPort++
	if nextPort > 60000 {
		nextPort = 20001
	}
	return fmt.Sprintf("127.0.0.1:%d", nextPort)
}

func (s *suite) inst(svc string) registry.Instance {
	return registry.Instance{Service: svc, Address: addr()}
}

// register registers and fails the check on error.
func (s *suite) register(t TB, r *registry.Registry, in registry.Instance, opts ...registry.RegisterOption) *registry.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	opts = append([]registry.RegisterOption{registry.WithTTL(s.cfg.TTL)}, opts...)
	l, err := r.Register(ctx, in, opts...)
	if err != nil {
		t.Fatalf("Register(%s at %s): %v", in.Service, in.Address, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.Deregister(ctx)
	})
	return l
}

func (s *suite) watch(t TB, r *registry.Registry, svc string) *registry.Watcher {
	t.Helper()
	w, err := r.Watch(t.Context(), svc)
	if err != nil {
		t.Fatalf("Watch(%s): %v", svc, err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// next calls Next with a deadline.
func next(t TB, w *registry.Watcher, d time.Duration) (registry.Snapshot, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	return w.Next(ctx)
}

// waitWatch reads the watcher until pred holds for a fresh snapshot,
// checking on the way that revisions never go back and that no two
// successive deliveries are identical. It returns the matching snapshot.
func waitWatch(t TB, w *registry.Watcher, d time.Duration, what string, pred func(registry.Snapshot) bool) registry.Snapshot {
	t.Helper()
	deadline := time.Now().Add(d)
	var last *registry.Snapshot
	for {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("watcher: %s not delivered within %v (last delivered: %s)", what, d, describe(last))
		}
		s, err := next(t, w, left)
		if err != nil && !s.Stale {
			if t.Context().Err() == nil && time.Now().After(deadline) {
				t.Fatalf("watcher: %s not delivered within %v (last delivered: %s)", what, d, describe(last))
			}
			if time.Now().Before(deadline) {
				t.Fatalf("watcher: Next failed while waiting for %s: %v", what, err)
			}
			continue
		}
		if last != nil {
			if s.Revision < last.Revision {
				t.Fatalf("watcher: revision went back from %d to %d", last.Revision, s.Revision)
			}
			if s.Stale == last.Stale && s.SameInstances(*last) {
				t.Fatalf("watcher: delivered the same state twice in a row (%s)", describe(&s))
			}
		}
		last = &s
		if !s.Stale && pred(s) {
			return s
		}
	}
}

// converge waits until the watcher's state satisfies pred, after a fault.
// Unlike waitWatch it does not demand a new delivery: a backend may heal a
// restart, wipe or external delete before the watcher could notice, and a
// Watcher delivers only changes. The last delivered state (prev at first)
// counts once the watcher has been quiet for a moment and a direct read of
// the backend (lookup) agrees; deliveries on the way are checked as in
// waitWatch.
func converge(t TB, w *registry.Watcher, prev registry.Snapshot, lookup func() (registry.Snapshot, error), d time.Duration, what string, pred func(registry.Snapshot) bool) registry.Snapshot {
	t.Helper()
	deadline := time.Now().Add(d)
	last := prev
	for {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("watcher: %s not reached within %v (last delivered: %s)", what, d, describe(&last))
		}
		s, err := next(t, w, min(left, 250*time.Millisecond))
		if err != nil && !s.Stale {
			if !errors.Is(err, context.DeadlineExceeded) || t.Context().Err() != nil {
				t.Fatalf("watcher: Next failed while waiting for %s: %v", what, err)
			}
			if !last.Stale && pred(last) {
				if cur, err := lookup(); err == nil && !cur.Stale && pred(cur) {
					return last
				}
			}
			continue
		}
		if s.Revision < last.Revision {
			t.Fatalf("watcher: revision went back from %d to %d", last.Revision, s.Revision)
		}
		if s.Stale == last.Stale && s.SameInstances(last) {
			t.Fatalf("watcher: delivered the same state twice in a row (%s)", describe(&s))
		}
		last = s
		if !s.Stale && pred(s) {
			return s
		}
	}
}

// lookupFn reads svc through r, which must not watch it (so that the read
// reaches the backend).
func lookupFn(t TB, r *registry.Registry, svc string) func() (registry.Snapshot, error) {
	return func() (registry.Snapshot, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		return r.Lookup(ctx, svc)
	}
}

// eventually polls cond every 20ms until it holds or d passes.
func eventually(t TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	var detail string
	for {
		ok, msg := cond()
		if ok {
			return
		}
		detail = msg
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true within %v: %s", what, d, detail)
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatalf("%s: %v", what, t.Context().Err())
		}
	}
}

// pair opens a registry to act on and one to observe with, and names a
// new service after name: the setup of most checks.
func (s *suite) pair(t TB, name string) (r, obs *registry.Registry, svc string) {
	return s.open(t), s.observer(t), service(name)
}

// wantReleased waits up to 2s for the error of a Next that was blocked
// when cause (a Close, a cancel) happened, and wants it to be want.
func wantReleased(t TB, errc <-chan error, want error, cause string) {
	t.Helper()
	select {
	case err := <-errc:
		if !errors.Is(err, want) {
			t.Fatalf("Next released by %s = %v, want %v", cause, err, want)
		}
	case <-time.After(2 * time.Second):
		t.Fatalf("%s did not release a pending Next within 2s", cause)
	}
}

// registerWatched registers an instance of svc on r, watches svc on obs
// and waits until the watcher shows the instance; it returns the lease,
// the watcher and the snapshot that showed it.
func (s *suite) registerWatched(t TB, r, obs *registry.Registry, svc string) (*registry.Lease, *registry.Watcher, registry.Snapshot) {
	t.Helper()
	l := s.register(t, r, s.inst(svc))
	w := s.watch(t, obs, svc)
	id := l.Instance().ID
	return l, w, waitWatch(t, w, s.cfg.Propagation, "instance", func(sn registry.Snapshot) bool { return has(sn, id) })
}

// waitCount waits, within the suite's propagation bound, until a lookup
// of svc on r returns n instances; what names the state in a failure.
func (s *suite) waitCount(t TB, r *registry.Registry, svc string, n int, what string) {
	t.Helper()
	eventually(t, s.cfg.Propagation, what, func() (bool, string) {
		got, err := lookupIDs(t, r, svc)
		return err == nil && len(got) == n, fmt.Sprint(got, err)
	})
}

func lookupIDs(t TB, r *registry.Registry, svc string) ([]string, error) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	s, err := r.Lookup(ctx, svc)
	if err != nil {
		return nil, err
	}
	return ids(s), nil
}

func ids(s registry.Snapshot) []string {
	out := make([]string, 0, len(s.Instances))
	for _, in := range s.Instances {
		out = append(out, in.ID)
	}
	return out
}

func has(s registry.Snapshot, id string) bool {
	_, ok := s.Find(id)
	return ok
}

func describe(s *registry.Snapshot) string {
	if s == nil {
		return "nothing"
	}
	return fmt.Sprintf("rev %d stale=%v %v", s.Revision, s.Stale, ids(*s))
}

func sortedEqual(a, b []string) bool {
	a, b = append([]string(nil), a...), append([]string(nil), b...)
	sort.Strings(a)
	sort.Strings(b)
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
