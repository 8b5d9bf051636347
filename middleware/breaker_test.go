package middleware_test

import (
	"context"
	"errors"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
)

// TestBreakerSimulation walks a circuit through its states on a fake
// clock: it opens after MinRequests calls of which half failed, rejects
// without calling during OpenTimeout, lets one probe through, opens again
// when the probe fails, and closes when it succeeds.
func TestBreakerSimulation(t *testing.T) {
	br := middleware.NewBreaker(middleware.BreakerConfig{}) // 20 calls, 50%, 5s open, 1 probe
	s := newSim(br.Middleware())
	step := 10 * time.Millisecond
	expect := func(want middleware.BreakerState) {
		t.Helper()
		if got := br.State("api"); got != want {
			t.Fatalf("at %v the circuit is %v, want %v", s.now, got, want)
		}
	}
	for range 1000 { // healthy: closed
		if err := s.call(); err != nil {
			t.Fatal(err)
		}
		s.now = s.now.Add(step)
	}
	expect(middleware.BreakerClosed)

	// Failing after 1,000 successes over the 10 s window: as failures come
	// in, successes leave the window, so it is half failures after about
	// 500 (± a 1 s bucket, 100 calls).
	s.down = true
	opened := 0
	for br.State("api") == middleware.BreakerClosed {
		if err := s.call(); !errors.Is(err, errDown) {
			t.Fatalf("closed circuit, service down: %v", err)
		}
		opened++
		s.now = s.now.Add(step)
	}
	if opened < 400 || opened > 600 {
		t.Fatalf("opened after %d failures, want about 500 (half the window)", opened)
	}
	t.Logf("opened after %d failures", opened)
	expect(middleware.BreakerOpen)

	// Open: nothing reaches the service for OpenTimeout.
	sent := s.sent
	for end := s.now.Add(5*time.Second - step); s.now.Before(end); s.now = s.now.Add(step) {
		if err := s.call(); !errors.Is(err, middleware.ErrCircuitOpen) {
			t.Fatalf("open circuit: %v, want ErrCircuitOpen", err)
		}
	}
	if s.sent != sent {
		t.Fatalf("%d calls reached the service while the circuit was open", s.sent-sent)
	}

	// Half-open with the service still down: one probe, which reopens it.
	s.now = s.now.Add(step)
	if err := s.call(); !errors.Is(err, errDown) {
		t.Fatalf("probe: %v, want the service's error", err)
	}
	expect(middleware.BreakerOpen)
	if err := s.call(); !errors.Is(err, middleware.ErrCircuitOpen) {
		t.Fatalf("after a failed probe: %v, want ErrCircuitOpen", err)
	}

	// Back up: the next probe closes the circuit, and calls flow.
	s.down = false
	s.now = s.now.Add(5 * time.Second)
	if err := s.call(); err != nil {
		t.Fatalf("probe: %v", err)
	}
	expect(middleware.BreakerClosed)
	for range 100 {
		if err := s.call(); err != nil {
			t.Fatalf("closed again: %v", err)
		}
	}
}

// TestBreakerRatio: below FailureRatio the circuit stays closed, above it
// it opens; below MinRequests it never opens. (Failures are spread out: a
// burst in a window of few calls can reach the ratio, as in Hystrix.)
func TestBreakerRatio(t *testing.T) {
	for _, tc := range []struct {
		failPer10, calls int
		want             middleware.BreakerState
	}{
		{4, 1000, middleware.BreakerClosed},
		{6, 1000, middleware.BreakerOpen},
		{10, 19, middleware.BreakerClosed}, // under MinRequests
	} {
		br := middleware.NewBreaker(middleware.BreakerConfig{})
		s := newSim(br.Middleware())
		for i := range tc.calls {
			s.down = (i+1)*tc.failPer10/10 > i*tc.failPer10/10 // evenly spread
			s.call()
			s.now = s.now.Add(time.Millisecond)
		}
		if got := br.State("api"); got != tc.want {
			t.Errorf("%d failures in 10, %d calls: %v, want %v", tc.failPer10, tc.calls, got, tc.want)
		}
	}
}

// TestBreakerHalfOpenAdmitsOnlyProbes: while the probe is in flight every
// other call is rejected; a probe the caller cancels does not count, and
// the next call probes instead.
func TestBreakerHalfOpenAdmitsOnlyProbes(t *testing.T) {
	br := middleware.NewBreaker(middleware.BreakerConfig{MinRequests: 5, OpenTimeout: time.Second})
	now := time.Unix(1_700_000_000, 0)
	release := make(chan error)
	var inFlight bool
	h := middleware.Chain(func(ctx context.Context, req *middleware.Request) error {
		if inFlight {
			return <-release
		}
		return errDown
	}, br.Middleware())
	do := func(ctx context.Context) error { return h(ctx, &middleware.Request{Service: "api", Start: now}) }
	for range 5 {
		do(context.Background())
	}
	if br.State("api") != middleware.BreakerOpen {
		t.Fatalf("state %v after 5 failures, want open", br.State("api"))
	}
	now = now.Add(time.Second)
	inFlight = true
	probe := make(chan error)
	cancelled, cancel := context.WithCancel(context.Background())
	go func() { probe <- do(cancelled) }()
	for br.State("api") != middleware.BreakerHalfOpen {
		time.Sleep(time.Millisecond) // until the probe is admitted
	}
	if err := do(context.Background()); !errors.Is(err, middleware.ErrCircuitOpen) {
		t.Fatalf("second call while the probe is in flight: %v, want ErrCircuitOpen", err)
	}
	cancel()
	release <- context.Canceled
	<-probe
	if br.State("api") != middleware.BreakerHalfOpen {
		t.Fatalf("a cancelled probe moved the circuit to %v", br.State("api"))
	}
	inFlight = false
	h = middleware.Chain(func(context.Context, *middleware.Request) error { return nil }, br.Middleware())
	if err := do(context.Background()); err != nil {
		t.Fatalf("next probe: %v", err)
	}
	if br.State("api") != middleware.BreakerClosed {
		t.Fatalf("state %v after a successful probe, want closed", br.State("api"))
	}
}

// TestBreakerThroughClient: WithBreaker puts a breaker in the default
// chain over the memory registry; an open circuit fails calls with
// ErrCircuitOpen without calling any instance, reports its state in
// roster.client.breaker.state, and closes once a probe succeeds.
func TestBreakerThroughClient(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	br := middleware.NewBreaker(middleware.BreakerConfig{OpenTimeout: 20 * time.Millisecond})
	c := chainClient(t, 3, middleware.WithMeterProvider(mp), middleware.WithBreaker(br), middleware.WithThrottle(nil))
	down, sent := true, 0
	call := func(ctx context.Context, in registry.Instance) error {
		sent++
		if down {
			return errDown
		}
		return nil
	}
	for br.State("api") != middleware.BreakerOpen {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond) // spares the retries' backoff
		c.Do(ctx, "api", call)
		cancel()
		if sent > 100 {
			t.Fatalf("circuit still %v after %d failed attempts", br.State("api"), sent)
		}
	}
	if got := breakerGauge(t, reader); got != int64(middleware.BreakerOpen) {
		t.Fatalf("roster.client.breaker.state = %d, want %d (open)", got, middleware.BreakerOpen)
	}
	sent = 0
	err := c.Do(context.Background(), "api", call)
	if !errors.Is(err, middleware.ErrCircuitOpen) || sent != 0 {
		t.Fatalf("open circuit: %v after %d attempts, want ErrCircuitOpen and none", err, sent)
	}
	if got := rejections(t, reader, "circuit_open"); got < 1 {
		t.Fatalf("roster.client.rejections{reason=circuit_open} = %d", got)
	}
	down = false
	deadline := time.Now().Add(5 * time.Second)
	for br.State("api") != middleware.BreakerClosed {
		if time.Now().After(deadline) {
			t.Fatalf("circuit still %v with the service back", br.State("api"))
		}
		time.Sleep(5 * time.Millisecond)
		c.Do(context.Background(), "api", call)
	}
	if got := breakerGauge(t, reader); got != int64(middleware.BreakerClosed) {
		t.Fatalf("roster.client.breaker.state = %d, want %d (closed)", got, middleware.BreakerClosed)
	}
}

func breakerGauge(t *testing.T, r *sdkmetric.ManualReader) int64 {
	t.Helper()
	m, ok := collect(t, r)["roster.client.breaker.state"]
	if !ok {
		t.Fatal("no roster.client.breaker.state metric")
	}
	pts := m.Data.(metricdata.Gauge[int64]).DataPoints
	if len(pts) != 1 {
		t.Fatalf("%d breaker state points, want 1", len(pts))
	}
	return pts[0].Value
}
