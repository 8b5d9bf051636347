package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/otelkey"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
)

var errDown = errors.New("connection refused")

// simBackend is a service seen through a chain, on a fake clock: each
// call is one Request started at the clock's time.
type simBackend struct {
	down  bool
	sent  int // calls that reached the service
	chain middleware.Handler
	now   time.Time
}

func newSim(mw middleware.Middleware) *simBackend {
	s := &simBackend{now: time.Unix(1_700_000_000, 0)}
	s.chain = middleware.Chain(func(context.Context, *middleware.Request) error {
		s.sent++
		if s.down {
			return errDown
		}
		return nil
	}, mw)
	return s
}

func (s *simBackend) call() error {
	return s.chain(context.Background(), &middleware.Request{Service: "api", Start: s.now})
}

// run makes calls every step for d and returns how many it made, how many
// were rejected locally with ErrThrottled, and when the last one was.
func (s *simBackend) run(t *testing.T, d, step time.Duration) (calls, rejected int, last time.Time) {
	t.Helper()
	for end := s.now.Add(d); s.now.Before(end); s.now = s.now.Add(step) {
		calls++
		err := s.call()
		switch {
		case errors.Is(err, middleware.ErrThrottled):
			rejected++
			last = s.now
		case err != nil && !errors.Is(err, errDown):
			t.Fatalf("unexpected error %v", err)
		}
	}
	return calls, rejected, last
}

// TestThrottleSimulation: a healthy service is never throttled; a service
// that is down gets ≥ 85% of the calls rejected locally once the window
// has filled; when it is back, rejections stop within 2 windows — at 10,
// 100 and 1,000 calls a second. Throttling rejects deterministically, so
// one run of each is the result.
func TestThrottleSimulation(t *testing.T) {
	for _, rate := range []int{10, 100, 1000} {
		t.Run(fmt.Sprintf("rate=%d", rate), func(t *testing.T) {
			step := time.Second / time.Duration(rate)
			s := newSim(middleware.Throttle(middleware.ThrottleConfig{}))
			if _, rej, _ := s.run(t, time.Minute, step); rej != 0 {
				t.Fatalf("%d calls rejected while the service is healthy", rej)
			}
			s.down = true
			s.run(t, 10*time.Second, step) // the window fills with failures
			calls, rej, _ := s.run(t, 50*time.Second, step)
			if float64(rej) < 0.85*float64(calls) {
				t.Fatalf("%d of %d calls rejected locally while the service is down, want ≥ 85%%", rej, calls)
			}
			s.down = false
			back := s.now
			_, _, last := s.run(t, 2*time.Minute, step)
			if took := last.Sub(back); took > 20*time.Second {
				t.Fatalf("last rejection %v after the service came back, want ≤ 20s (2 windows)", took)
			}
			t.Logf("%.1f%% rejected while down, last rejection %v after recovery", 100*float64(rej)/float64(calls), last.Sub(back))
		})
	}
}

// TestThrottleNeverRejectsMinorityFailures: with K = 2, a service failing
// up to half its calls, spread out, is never throttled. (A burst of
// failures in a window with few calls can be: 9 failures in a row after
// 20 calls with 9 failures make 18 of 29.)
func TestThrottleNeverRejectsMinorityFailures(t *testing.T) {
	s := newSim(middleware.Throttle(middleware.ThrottleConfig{}))
	rejected := 0
	for i := range 20000 {
		s.down = i%2 == 0 && i%20 != 0 // 45% of the calls fail
		if errors.Is(s.call(), middleware.ErrThrottled) {
			rejected++
		}
		s.now = s.now.Add(time.Millisecond)
	}
	if rejected != 0 {
		t.Fatalf("%d calls rejected with 45%% failing, want 0", rejected)
	}
}

// TestThrottleQuietClient: fewer calls than MinRequests in the window are
// never rejected, even if they all fail.
func TestThrottleQuietClient(t *testing.T) {
	mw, rejectProbability := middleware.NewThrottle(middleware.ThrottleConfig{MinRequests: 20})
	s := newSim(mw)
	s.down = true
	if _, rej, _ := s.run(t, time.Minute, time.Second); rej != 0 { // 10 calls per 10 s window
		t.Fatalf("%d calls of a quiet client rejected", rej)
	}
	if p := rejectProbability("api", s.now); p != 0 {
		t.Fatalf("reject probability %v for a quiet client, want 0", p)
	}
}

// TestThrottleThroughClient runs the default client (throttling is on by
// default) over the memory registry: no rejection while healthy; while
// every instance fails, most calls are rejected locally with ErrThrottled
// — not retried, not counted against an instance — and counted in
// roster.client.rejections.
func TestThrottleThroughClient(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	c := chainClient(t, 3, middleware.WithMeterProvider(mp))
	ctx := context.Background()
	down := false
	sent := 0
	call := func(ctx context.Context, in registry.Instance) error {
		sent++
		if down {
			return errDown
		}
		return nil
	}
	for range 100 {
		if err := c.Do(ctx, "api", call); err != nil {
			t.Fatalf("healthy service: %v", err)
		}
	}
	down, sent = true, 0
	rejected, late := 0, 0 // late: in the last 500 calls
	const calls = 1000
	for i := range calls {
		// A short deadline spares the test the retries' backoff.
		cctx, cancel := context.WithTimeout(ctx, 2*time.Millisecond)
		err := c.Do(cctx, "api", call)
		cancel()
		switch {
		case errors.Is(err, middleware.ErrThrottled):
			rejected++
			if i >= calls-500 {
				late++
			}
		case !errors.Is(err, errDown):
			t.Fatalf("service down: %v", err)
		}
	}
	// The 100 accepted calls still in the window allow 200 requests: the
	// rejection probability is (R − 200)/(R + 1), ≥ 0.66 in the last 500.
	if late < 500*6/10 {
		t.Fatalf("%d of the last 500 calls rejected locally while every instance fails, want ≥ 60%%", late)
	}
	if sent > 2*(calls-rejected) { // the retry budget bounds retries
		t.Fatalf("%d attempts reached the instances for %d calls let through", sent, calls-rejected)
	}
	if got := rejections(t, reader, "throttled"); got != int64(rejected) {
		t.Fatalf("roster.client.rejections{reason=throttled} = %d, want %d", got, rejected)
	}
}

// rejections sums roster.client.rejections for a reason.
func rejections(t *testing.T, r *sdkmetric.ManualReader, reason string) int64 {
	t.Helper()
	m, ok := collect(t, r)["roster.client.rejections"]
	if !ok {
		return 0
	}
	var n int64
	for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
		if v, _ := p.Attributes.Value(otelkey.RejectionReason); v.AsString() == reason {
			n += p.Value
		}
	}
	return n
}

// TestThrottleLateOutcomeKeepsCounts: the outcome of a call that started
// more than a window ago does not reset the bucket now in use.
func TestThrottleLateOutcomeKeepsCounts(t *testing.T) {
	mw, rejectProbability := middleware.NewThrottle(middleware.ThrottleConfig{})
	s := newSim(mw)
	s.down = true
	s.run(t, 10*time.Second, 10*time.Millisecond)
	before := rejectProbability("api", s.now)
	late := &middleware.Request{Service: "api", Start: s.now.Add(-15 * time.Second)}
	if err := s.chain(context.Background(), late); !errors.Is(err, errDown) {
		t.Fatal(err)
	}
	if after := rejectProbability("api", s.now); after != before || before == 0 {
		t.Fatalf("reject probability %v before a late outcome, %v after", before, after)
	}
}
