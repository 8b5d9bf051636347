package middleware_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/policy"
	"github.com/roster-go/roster/registry"
)

// slowBackend is a real HTTP instance whose answers take delay and carry
// status.
type slowBackend struct {
	*backend
	delay atomic.Int64
}

func startSlow(t *testing.T, reg *registry.Registry, svc string, delay time.Duration, version string) *slowBackend {
	t.Helper()
	b := &slowBackend{backend: &backend{}}
	b.status.Store(200)
	b.delay.Store(int64(delay))
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		select {
		case <-time.After(time.Duration(b.delay.Load())):
		case <-r.Context().Done():
		}
		w.WriteHeader(int(b.status.Load()))
	}))
	t.Cleanup(b.kill)
	l, err := reg.Register(context.Background(), registry.Instance{
		Service: svc, Address: b.srv.Listener.Addr().String(), Version: version,
	}, registry.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b.lease = l
	return b
}

func mustPolicy(t *testing.T, s string) policy.Policy {
	t.Helper()
	p, err := policy.Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPolicyPerService: one Client calls service A by consistent hash
// (a key sticks to one instance for 1,000 calls, keys spread) and
// service B by P2C (load spreads over the fast instances, the slow one
// is starved), with one quarantine, throttle and metric set.
func TestPolicyPerService(t *testing.T) {
	e := newEnv(t)
	var as, bs []*slowBackend
	for range 4 {
		as = append(as, startSlow(t, e.writer, "a", 0, ""))
		bs = append(bs, startSlow(t, e.writer, "b", 0, ""))
	}
	bs[0].delay.Store(int64(100 * time.Millisecond))
	c := newClient(t, e.reader,
		middleware.WithPolicy("a", mustPolicy(t, `{"strategy": "consistent_hash"}`)),
		middleware.WithPolicy("b", mustPolicy(t, `{"strategy": "p2c_ewma"}`)))
	ctx := context.Background()
	var mu sync.Mutex
	var picked string
	call := func(ctx context.Context, in registry.Instance) error {
		mu.Lock()
		picked = in.ID
		mu.Unlock()
		return get(ctx, in)
	}
	var first string
	for i := range 1000 {
		if err := c.DoKey(ctx, "a", "user-7", call); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = picked
		} else if picked != first {
			t.Fatalf("call %d with key user-7 went to %s, the first to %s", i, picked, first)
		}
	}
	owners := map[string]bool{}
	for i := range 200 {
		if err := c.DoKey(ctx, "a", "user-"+string(rune('A'+i%50))+string(rune('a'+i/50)), call); err != nil {
			t.Fatal(err)
		}
		owners[picked] = true
	}
	if len(owners) < 3 {
		t.Errorf("200 keys went to %d of 4 instances, want them spread", len(owners))
	}

	var wg sync.WaitGroup
	var errs atomic.Int64
	for range 8 {
		wg.Go(func() {
			for range 125 {
				if err := c.Do(ctx, "b", get); err != nil {
					errs.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if errs.Load() > 0 {
		t.Fatalf("%d calls to b failed", errs.Load())
	}
	for i, b := range bs[1:] {
		if n := b.hits.Load(); n < 150 {
			t.Errorf("fast instance %d of b got %d of 1000 calls, want ≥ 150 (p2c spreads load)", i+1, n)
		}
	}
	// Its fair share is 250; a loaded machine slows the fast ones too.
	if n := bs[0].hits.Load(); n > 125 {
		t.Errorf("the slow instance of b got %d of 1000 calls, want ≤ 125, half its share (p2c_ewma avoids it)", n)
	}
}

// TestSetPolicyKeepsState: changing a service's policy live keeps the
// quarantine's ejection, the throttle's window and the selector's
// latency estimates.
func TestSetPolicyKeepsState(t *testing.T) {
	e := newEnv(t)
	var bs []*slowBackend
	for i := range 5 {
		bs = append(bs, startSlow(t, e.writer, "api", 0, []string{"v1", "v2"}[i%2]))
	}
	slow, bad := bs[1], bs[2]
	slow.delay.Store(int64(40 * time.Millisecond))
	bad.status.Store(503)
	q := middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: 2, BaseEjection: time.Minute, MaxEjectedPercent: 50})
	thr, reject := middleware.NewThrottle(middleware.ThrottleConfig{})
	c := newClient(t, e.reader, middleware.WithQuarantine(q),
		middleware.WithMiddleware(thr, middleware.Retry(middleware.RetryConfig{}), q.Middleware()),
		middleware.WithPolicy("api", mustPolicy(t, `{"strategy": "p2c_ewma"}`)))
	ctx := context.Background()
	for range 300 {
		if err := c.Do(ctx, "api", get); err != nil {
			t.Fatal(err)
		}
	}
	if ej := q.Ejected("api"); len(ej) != 1 || ej[0] != bad.id() {
		t.Fatalf("ejected %v, want the failing instance %s", ej, bad.id())
	}
	now := time.Now()
	before := reject("api", now)
	if err := c.SetPolicy("api", mustPolicy(t, `{"strategy": "p2c_ewma", "split": [{"version": "v2", "percent": 50}], "retry": {"attempts": 2}}`)); err != nil {
		t.Fatal(err)
	}
	if got, ok := c.Policy("api"); !ok || len(got.Split) != 1 {
		t.Fatalf("Policy = %+v, %v: not the new one", got, ok)
	}
	if after := reject("api", now); after != before {
		t.Errorf("throttle reject probability %v before SetPolicy, %v after", before, after)
	}
	if ej := q.Ejected("api"); len(ej) != 1 || ej[0] != bad.id() {
		t.Errorf("after SetPolicy ejected %v, want %s still", ej, bad.id())
	}
	slowHits, badHits := slow.hits.Load(), bad.hits.Load()
	for range 200 {
		if err := c.Do(ctx, "api", get); err != nil {
			t.Fatal(err)
		}
	}
	// v2 (bs[1] slow, bs[3]) gets half the calls: the slow one would take
	// about 50 of them without its estimate.
	if n := slow.hits.Load() - slowHits; n > 10 {
		t.Errorf("the slow instance got %d of 200 calls after SetPolicy, want ≤ 10 (its latency estimate was lost)", n)
	}
	if n := bad.hits.Load() - badHits; n != 0 {
		t.Errorf("the ejected instance got %d calls after SetPolicy, want 0", n)
	}
}

// TestSetPolicyRejects: an invalid policy is a FieldError and changes
// nothing; nor does a zone change for a service already called.
func TestSetPolicyRejects(t *testing.T) {
	e := newEnv(t)
	startBackend(t, e.writer, "api", 100)
	c := newClient(t, e.reader, middleware.WithPolicy("api", mustPolicy(t, `{"strategy": "round_robin"}`)))
	if err := c.Do(context.Background(), "api", get); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]policy.Policy{
		"split":   {Split: []policy.SplitEntry{{Version: "v2", Percent: 120}}},
		"outlier": {Outlier: &policy.Outlier{ConsecutiveFailures: 3}},
		"zone":    {Locality: &policy.Locality{Zone: "b"}},
	} {
		err := c.SetPolicy("api", p)
		var fe *policy.FieldError
		if !errors.As(err, &fe) || !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("%s: SetPolicy = %v, want a *policy.FieldError", name, err)
		}
		if got, _ := c.Policy("api"); got.Strategy != "round_robin" {
			t.Errorf("%s: a rejected policy replaced the service's: %+v", name, got)
		}
	}
	if err := c.SetPolicy("api", mustPolicy(t, `{"strategy": "round_robin"}`).WithDefaults()); err != nil {
		t.Errorf("SetPolicy of a policy WithDefaults = %v, want its default outlier section accepted", err)
	}
	if _, err := middleware.NewClient(e.reader, middleware.WithPolicy("x", policy.Policy{Strategy: "fastest"})); err == nil {
		t.Error("NewClient with an invalid policy succeeded")
	}
}

// refusedAddr returns a loopback address nothing listens on.
func refusedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// generous is the default chain but with a retry budget these tests,
// which fail on purpose, do not exhaust.
func generous(q *middleware.Quarantine) []middleware.Option {
	return []middleware.Option{middleware.WithQuarantine(q), middleware.WithMiddleware(
		middleware.Retry(middleware.RetryConfig{BudgetMinPerSecond: 1000}), q.Middleware())}
}

// TestNotIdempotent: a call that may not run twice is retried only when
// it cannot have reached an instance (connection refused), never after
// an instance answered; the client's setting, a policy's and a call's
// context each decide, the most specific winning.
func TestNotIdempotent(t *testing.T) {
	e := newEnv(t)
	failing := startSlow(t, e.writer, "api", 0, "")
	failing.status.Store(503)
	ok := startSlow(t, e.writer, "api", 0, "")
	if _, err := e.writer.Register(context.Background(), registry.Instance{Service: "api", Address: refusedAddr(t)}); err != nil {
		t.Fatal(err)
	}
	q := middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: 1000})
	rr := mustPolicy(t, `{"strategy": "round_robin"}`)
	run := func(c *middleware.Client, ctx context.Context) (fails int) {
		for range 60 {
			if err := c.Do(ctx, "api", get); err != nil {
				fails++
			}
		}
		return fails
	}
	ctx := context.Background()
	once := newClient(t, e.reader, append(generous(q), middleware.WithIdempotent(false), middleware.WithPolicy("api", rr))...)
	before := failing.hits.Load()
	fails := run(once, ctx)
	sent := failing.hits.Load() - before
	// Round robin: a third of the calls start on the failing instance,
	// a third on the refused address (retried, so some of those end on
	// the failing one too). Every call that reached it failed there.
	if fails == 0 || int64(fails) != sent {
		t.Errorf("not idempotent: %d calls failed, %d reached the failing instance: want equal and > 0", fails, sent)
	}
	if ok.hits.Load() == 0 {
		t.Error("no call reached the healthy instance")
	}
	if n := run(once, middleware.Idempotent(ctx, true)); n != 0 {
		t.Errorf("Idempotent(ctx, true): %d calls failed, want 0 (retried elsewhere)", n)
	}
	byPolicy := newClient(t, e.reader, append(generous(q),
		middleware.WithPolicy("api", mustPolicy(t, `{"strategy": "round_robin", "retry": {"idempotent": false}}`)))...)
	if n := run(byPolicy, ctx); n == 0 {
		t.Error("policy retry.idempotent false: no call failed, want the failing instance's answers returned")
	}
	if n := run(byPolicy, middleware.Idempotent(ctx, true)); n != 0 {
		t.Errorf("the call's Idempotent(ctx, true) over the policy: %d failed, want 0", n)
	}
	if n := run(newClient(t, e.reader, append(generous(q), middleware.WithPolicy("api", rr))...), ctx); n != 0 {
		t.Errorf("default (idempotent): %d calls failed, want 0", n)
	}
}

// TestPolicyRetryOnAndTimeouts: retry_on narrows what is retried, a
// per-try timeout cuts a slow attempt and retries elsewhere, a timeout
// bounds the whole call.
func TestPolicyRetryOnAndTimeouts(t *testing.T) {
	e := newEnv(t)
	failing := startSlow(t, e.writer, "api", 0, "")
	failing.status.Store(503)
	startSlow(t, e.writer, "api", 0, "")
	q := middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: 1000})
	c := newClient(t, e.reader, append(generous(q),
		middleware.WithPolicy("api", mustPolicy(t, `{"strategy": "round_robin", "retry": {"retry_on": ["connection"]}}`)))...)
	fails := 0
	for range 40 {
		if err := c.Do(context.Background(), "api", get); err != nil {
			fails++
		}
	}
	if fails < 10 {
		t.Errorf("retry_on [connection]: %d of 40 calls failed, want the 503s (≈20) not retried", fails)
	}
	if err := c.SetPolicy("api", mustPolicy(t, `{"strategy": "round_robin"}`)); err != nil {
		t.Fatal(err)
	}
	for range 40 {
		if err := c.Do(context.Background(), "api", get); err != nil {
			t.Fatalf("default retry_on: %v", err)
		}
	}

	t2 := newEnv(t)
	slow := startSlow(t, t2.writer, "api", 2*time.Second, "")
	startSlow(t, t2.writer, "api", 0, "")
	c2 := newClient(t, t2.reader, middleware.WithQuarantine(middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: 1000})),
		middleware.WithPolicy("api", mustPolicy(t, `{"strategy": "round_robin", "retry": {"per_try_timeout": "50ms"}}`)))
	for range 10 {
		start := time.Now()
		if err := c2.Do(context.Background(), "api", get); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("a call took %v with a per-try timeout of 50ms", d)
		}
	}
	if slow.hits.Load() == 0 {
		t.Fatal("no call tried the slow instance: the per-try timeout was not exercised")
	}
	if err := c2.SetPolicy("api", mustPolicy(t, `{"strategy": "round_robin", "timeout": "30ms", "retry": {"attempts": 1}}`)); err != nil {
		t.Fatal(err)
	}
	deadlined := 0
	for range 10 {
		start := time.Now()
		err := c2.Do(context.Background(), "api", get)
		if d := time.Since(start); d > time.Second {
			t.Fatalf("a call took %v with a timeout of 30ms", d)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			deadlined++
		}
	}
	if deadlined == 0 {
		t.Error("no call ended by the policy's timeout")
	}
}

// TestPolicyHedge: a policy's hedge delay hedges idempotent calls in the
// default chain, and never a call that may not run twice.
func TestPolicyHedge(t *testing.T) {
	e := newEnv(t)
	slow := startSlow(t, e.writer, "api", 300*time.Millisecond, "")
	startSlow(t, e.writer, "api", 0, "")
	c := newClient(t, e.reader, middleware.WithQuarantine(middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: 1000})),
		middleware.WithPolicy("api", mustPolicy(t, `{"strategy": "round_robin", "hedge": {"delay": "20ms"}}`)))
	worst := time.Duration(0)
	for range 10 {
		start := time.Now()
		if err := c.Do(context.Background(), "api", get); err != nil {
			t.Fatal(err)
		}
		worst = max(worst, time.Since(start))
	}
	if slow.hits.Load() == 0 {
		t.Fatal("no call started on the slow instance")
	}
	if worst > 200*time.Millisecond {
		t.Errorf("slowest hedged call %v, want < 200ms (hedged after 20ms)", worst)
	}
	worst = 0
	for range 4 {
		start := time.Now()
		if err := c.Do(middleware.Idempotent(context.Background(), false), "api", get); err != nil {
			t.Fatal(err)
		}
		worst = max(worst, time.Since(start))
	}
	if worst < 300*time.Millisecond {
		t.Errorf("slowest non-idempotent call %v, want ≥ 300ms (never hedged)", worst)
	}
}
