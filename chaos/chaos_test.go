package chaos

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
)

// The scenario of issue #12.
const (
	service        = "chaos-echo"
	numInstances   = 5
	ttl            = 3 * time.Second // etcd's floor is 2s
	callersPerKind = 2               // callers through Do, and as many through contrib/rosterhttp
	pace           = 5 * time.Millisecond
	attemptTimeout = time.Second     // one HTTP attempt
	callTimeout    = 2 * time.Second // a whole call, retries included
	drainWindow    = time.Second     // an instance's wait between deregistering and stopping

	// outage is how long a crashed registry stays down: the 10s of the
	// issue, over three TTLs, so that every lease has given up
	// heartbeating and is re-registering with backoff when it comes back.
	outage = 10 * time.Second
	// partition is how long the client is cut off from the registry:
	// longer than the TTL.
	partition = ttl + 2*time.Second
	// recoveryBound: after a restart, every instance is listed again
	// within TTL + 1s of the server being ready.
	recoveryBound = ttl + time.Second
	// settle keeps the load on after a fault has healed, to catch late
	// failures.
	settle = time.Second
	// convergeTimeout bounds the wait for the client to pick from exactly
	// the live instances again (a harness deadline, not a guarantee).
	convergeTimeout = 20 * time.Second
)

// envRepeat sets how many times each fault runs (default 3).
const envRepeat = "ROSTER_CHAOS_REPEAT"

// TestMain runs an instance instead of the tests in the processes the
// suite starts, and checks the tests' process for leaked goroutines.
func TestMain(m *testing.M) {
	if os.Getenv(envInstance) != "" {
		os.Exit(runInstance())
	}
	goleak.VerifyTestMain(withRosterCleanup{m})
}

func repeats(t *testing.T) int {
	s := os.Getenv(envRepeat)
	if s == "" {
		return 3
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", envRepeat, s)
	}
	return n
}

// A fault is applied to a fixture whose load runs; it records its events
// in p and fails t on a broken guarantee.
type fault struct {
	name  string
	apply func(fx *fixture, t *testing.T, p *phase)
}

var faults = []fault{
	{"crash-empty", (*fixture).crashEmpty},
	{"restart-empty", (*fixture).restartEmpty},
	{"restart-keep", (*fixture).restartKeep},
	{"kill-instance", (*fixture).killInstance},
	{"rolling-restart", (*fixture).rollingRestart},
	{"partition", (*fixture).partition},
}

type backend struct {
	name   string
	start  func(t *testing.T) server
	faults []fault // nil: every fault of faults
}

var backends = []backend{
	{"etcd", startEtcd, nil},
	{"redis-hash", startRedis(""), nil},
	{"redis-keys", startRedis("?layout=keys"), nil},
	{"consul", startConsul, nil},
	{"zookeeper", startZooKeeper, nil},
	{"zookeeper-ensemble", startZooKeeperEnsemble, ensembleFaults},
	{"kubernetes", startKubernetes, nil},
	{"dual", startDual, dualFaults},
	{"dnssrv", startDNSSRV, dnsFaults},
}

// faultsOf returns the faults applied to b.
func (b backend) faultsOf() []fault {
	if b.faults != nil {
		return b.faults
	}
	return faults
}

// TestChaos runs every fault, repeatedly, on every backend: the backends
// in parallel, each backend's faults one after another on one server, one
// set of instances and one client. Select with -run, e.g.
// -run 'TestChaos/redis-keys/crash-empty'.
func TestChaos(t *testing.T) {
	n := repeats(t)
	var sum tally
	// Parallel subtests run after this function returns; cleanups after
	// they all end.
	t.Cleanup(func() {
		t.Logf("chaos: %d run(s) of each fault, TTL %v, outage %v, partition %v, %d callers on each of %d paths every %v\n%s",
			n, ttl, outage, partition, callersPerKind, len(kinds), pace, sum.table())
	})
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			if raceEnabled && strings.HasPrefix(b.name, "zookeeper") {
				// The race detector stops every test at a reconnect of
				// go-zookeeper v1.0.4 (lastZxid, go-zookeeper/zk#35), which
				// these faults cause by design; scripts/test.sh runs them
				// without it. backends/zookeeper's restarts run under it.
				t.Skip("go-zookeeper#35: a data race in the client library at reconnect; run without -race")
			}
			t.Parallel()
			fx := newFixture(t, b.start(t))
			fx.tally = func(fault string, p *phase) { sum.add(b.name, fault, p) }
			for rep := 1; rep <= n && !fx.broken; rep++ {
				for _, f := range b.faultsOf() {
					t.Run(fmt.Sprintf("%s-%d", f.name, rep), func(t *testing.T) { fx.run(t, f) })
					if fx.broken {
						t.Errorf("stopping after a harness failure in %s-%d", f.name, rep)
						break
					}
				}
			}
		})
	}
}

// fixture is one backend under test: its server, the instance processes
// and the client under load.
type fixture struct {
	srv   server
	dir   string
	insts []*instance
	mc    *middleware.Client
	q     *middleware.Quarantine // mc's
	cut   func(connected bool)
	load  *load

	victim int  // the next instance kill-instance kills
	broken bool // a harness step failed: later faults would prove nothing
	tally  func(fault string, p *phase)
}

func newFixture(t *testing.T, srv server) *fixture { return newFixtureWith(t, srv, defaultLoad) }

// newFixtureWith is newFixture with a load of the given shape.
func newFixtureWith(t *testing.T, srv server, shape loadShape) *fixture {
	fx := &fixture{srv: srv, dir: t.TempDir()}
	t.Cleanup(fx.killInstances)
	for range numInstances {
		in, err := startInstance(srv.url(), fx.dir)
		if err != nil {
			t.Fatal(err)
		}
		fx.insts = append(fx.insts, in)
	}
	if _, err := fx.waitListed(time.Now(), 30*time.Second); err != nil {
		t.Fatal(err)
	}

	url, cut, closeLink, err := srv.link()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeLink)
	fx.cut = cut
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg, err := registry.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	fx.q = middleware.NewQuarantine(middleware.QuarantineConfig{}) // the default, kept to count ejections
	if fx.mc, err = middleware.NewClient(reg, middleware.WithQuarantine(fx.q)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fx.mc.Close() })
	warm := newPhase("warm-up")
	if fx.load, err = newLoad(fx.mc, fx.q, reg, url, fx.dir, warm, shape); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fx.load.close)
	if err := fx.converge(warm); err != nil {
		t.Fatal(err)
	}
	return fx
}

func (fx *fixture) killInstances() {
	for _, in := range fx.insts {
		in.kill()
	}
}

// run applies one fault: the calls made since the previous fault, then
// the fault's own (until it has healed and settled), must all succeed.
func (fx *fixture) run(t *testing.T, f fault) {
	p := newPhase(t.Name()[strings.LastIndex(t.Name(), "/")+1:])
	fx.check(t, fx.load.begin(p))
	completed := false
	defer func() {
		fx.broken = fx.broken || !completed
		fx.check(t, fx.load.begin(newPhase("between faults")))
		fx.tally(f.name, p)
	}()
	f.apply(fx, t, p)
	time.Sleep(settle)
	completed = true
}

// check fails t if a call of the ended phase p failed, with the report
// that says when and how; it logs the report otherwise.
func (fx *fixture) check(t *testing.T, p *phase) {
	t.Helper()
	calls, failed := p.total()
	switch {
	case failed > 0:
		t.Errorf("%d of %d calls failed\n%s%s", failed, calls, p.report(), fx.load.agentLog(p))
	case calls == 0 && p.ended.Sub(p.start) > 100*time.Millisecond:
		t.Errorf("no call was made: the load is not running\n%s", p.report())
	case len(p.events) > 0: // a fault, not the moments between two
		t.Log(p.report())
	}
}

// ---- faults ----

// crashEmpty kills the registry server, leaves it down longer than the
// TTL, and starts it again with no data.
func (fx *fixture) crashEmpty(t *testing.T, p *phase) {
	sawStale := fx.watchStale(p)
	if err := fx.srv.crash(); err != nil {
		t.Fatal(err)
	}
	p.event("registry server killed; down for %v", outage)
	time.Sleep(outage)
	if !sawStale() {
		t.Errorf("the client never saw its registry fail during a %v outage: the fault had no effect", outage)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p.event("starting the registry server, empty")
	if err := fx.srv.startEmpty(ctx); err != nil {
		t.Fatal(err)
	}
	ready := p.event("registry server ready")
	fx.checkRecovery(t, p, ready)
	fx.mustConverge(t, p)
}

// restartEmpty kills the registry server and starts it again at once,
// with no data (a supervisor restarting a crashed Redis without
// persistence): the outage is so short that a polling client may never
// see an error, only a server that lost everything.
func (fx *fixture) restartEmpty(t *testing.T, p *phase) {
	if err := fx.srv.crash(); err != nil {
		t.Fatal(err)
	}
	p.event("registry server killed; restarting at once, empty")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := fx.srv.startEmpty(ctx); err != nil {
		t.Fatal(err)
	}
	ready := p.event("registry server ready")
	fx.checkRecovery(t, p, ready)
	fx.mustConverge(t, p)
}

// restartKeep restarts the registry server keeping its data.
func (fx *fixture) restartKeep(t *testing.T, p *phase) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p.event("restarting the registry server with its data")
	if err := fx.srv.restart(ctx); err != nil {
		t.Fatal(err)
	}
	ready := p.event("registry server ready")
	fx.checkRecovery(t, p, ready)
	fx.mustConverge(t, p)
}

// killInstance kills one instance (no deregistration) and starts a
// replacement, as an orchestrator would.
func (fx *fixture) killInstance(t *testing.T, p *phase) {
	i := fx.victim % len(fx.insts)
	fx.victim++
	in := fx.insts[i]
	in.kill()
	p.event("instance %s killed", in.addr)
	fx.replace(t, p, i)
	fx.mustConverge(t, p)
}

// rollingRestart stops every instance in turn in the graceful order
// (SIGTERM: deregister, drain, stop) and starts its replacement.
func (fx *fixture) rollingRestart(t *testing.T, p *phase) {
	for i, in := range fx.insts {
		p.event("SIGTERM to %s", in.addr)
		if err := in.terminate(20 * time.Second); err != nil {
			t.Error(err)
		}
		p.event("%s exited", in.addr)
		fx.replace(t, p, i)
	}
	fx.mustConverge(t, p)
}

// partition cuts the client off from the registry for longer than the
// TTL; the instances keep their own connections.
func (fx *fixture) partition(t *testing.T, p *phase) {
	sawStale := fx.watchStale(p)
	fx.cut(false)
	p.event("client cut off from the registry for %v", partition)
	time.Sleep(partition)
	if !sawStale() {
		t.Errorf("the client never saw its registry fail during a %v partition: the cut had no effect", partition)
	}
	fx.cut(true)
	p.event("link restored")
	fx.mustConverge(t, p)
}

// watchStale follows the client's view of the service until the returned
// function is called, which reports whether the view went stale (the
// client saw its registry fail); the first time it did is an event of p.
func (fx *fixture) watchStale(p *phase) (stop func() bool) {
	done := make(chan struct{})
	saw := make(chan bool, 1)
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				saw <- false
				return
			case <-tick.C:
			}
			if snap, _ := fx.mc.Snapshot(service); snap.Stale {
				p.event("client's view of the service stale (%d instances)", len(snap.Instances))
				<-done
				saw <- true
				return
			}
		}
	}()
	return func() bool { close(done); return <-saw }
}

// replace starts a new instance in slot i.
func (fx *fixture) replace(t *testing.T, p *phase, i int) {
	in, err := startInstance(fx.srv.url(), fx.dir)
	if err != nil {
		t.Fatal(err)
	}
	fx.insts[i] = in
	p.event("replacement %s registered", in.addr)
}

// ---- recovery and convergence ----

// ids are the live instances' IDs as the client reads them.
func (fx *fixture) ids() []string {
	ids := make([]string, len(fx.insts))
	for i, in := range fx.insts {
		ids[i] = readID(fx.srv, in)
	}
	return ids
}

// checkRecovery measures how long after ready a fresh Lookup lists every
// instance again, and fails t past its bound (recoveryBound unless the
// backend documents another).
func (fx *fixture) checkRecovery(t *testing.T, p *phase, ready time.Time) {
	t.Helper()
	listed, err := fx.waitListed(ready, 30*time.Second)
	if err != nil {
		t.Errorf("%v\n%s", err, fx.leaseLogs(nil))
		return
	}
	var last time.Duration
	for _, at := range listed {
		last = max(last, at.Sub(ready))
	}
	p.recovery = last
	bound := boundOf(fx.srv)
	p.event("every instance listed again, %v after ready (bound %v)", last.Round(10*time.Millisecond), bound)
	if last > bound {
		t.Errorf("recovery took %v after the server was ready, over the bound of %v; listed at:\n%s",
			last.Round(10*time.Millisecond), bound, fx.leaseLogs(func(in *instance) string {
				return "+" + listed[readID(fx.srv, in)].Sub(ready).Round(10*time.Millisecond).String() + " after ready"
			}))
	}
}

// leaseLogs returns each instance's log tail (its lease's state changes),
// headed by note(in) if note is not nil.
func (fx *fixture) leaseLogs(note func(*instance) string) string {
	var b strings.Builder
	for _, in := range fx.insts {
		head := in.addr
		if note != nil {
			head += " " + note(in)
		}
		fmt.Fprintf(&b, "  %s:\n    %s\n", head, strings.ReplaceAll(in.logTail(600), "\n", "\n    "))
	}
	return b.String()
}

// waitListed polls a fresh Registry's Lookup until it lists every
// instance, and returns when each was first seen listed. A new Registry
// for every poll keeps a client's reconnection backoff out of the figure.
func (fx *fixture) waitListed(since time.Time, timeout time.Duration) (map[string]time.Time, error) {
	listed := map[string]time.Time{}
	var lastErr error
	for {
		snap, err := fx.lookup()
		now := time.Now()
		if err == nil {
			for _, in := range snap.Instances {
				if _, ok := listed[in.ID]; !ok {
					listed[in.ID] = now
				}
			}
		}
		lastErr = err
		missing := slices.DeleteFunc(fx.ids(), func(id string) bool { _, ok := listed[id]; return ok })
		if len(missing) == 0 {
			return listed, nil
		}
		if now.Sub(since) > timeout {
			return listed, fmt.Errorf("%d instances not listed %v after the server was ready (last lookup error: %v): %v",
				len(missing), timeout, lastErr, missing)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (fx *fixture) lookup() (registry.Snapshot, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	reg, err := registry.Open(ctx, readURL(fx.srv))
	if err != nil {
		return registry.Snapshot{}, err
	}
	defer reg.Close()
	return reg.Lookup(ctx, service)
}

func (fx *fixture) mustConverge(t *testing.T, p *phase) {
	t.Helper()
	if err := fx.converge(p); err != nil {
		t.Fatal(err)
	}
}

// converge waits until the client picks from exactly the live instances,
// from a fresh snapshot, and then until every one of them has answered a
// call: the client has recovered and spreads its load again.
func (fx *fixture) converge(p *phase) error {
	want := fx.ids()
	slices.Sort(want)
	deadline := time.Now().Add(convergeTimeout)
	for {
		snap, ok := fx.mc.Snapshot(service)
		var have []string
		for _, in := range snap.Instances {
			have = append(have, in.ID)
		}
		if ok && !snap.Stale && slices.Equal(have, want) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v the client picks from %v (stale %v), want %v", convergeTimeout, have, snap.Stale, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.event("client picks from exactly the %d live instances, fresh", len(want))
	base := fx.load.servedBy()
	for {
		served := fx.load.servedBy()
		// Instances answer with the ID they registered.
		var idle []string
		for _, in := range fx.insts {
			if served[in.id] <= base[in.id] {
				idle = append(idle, in.id)
			}
		}
		if len(idle) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v these instances answered no call: %v", convergeTimeout, idle)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.event("every live instance answered calls")
	return nil
}
