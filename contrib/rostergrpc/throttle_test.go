package rostergrpc_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	rostergrpc "github.com/roster-go/roster/contrib/rostergrpc"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// TestThrottleInAnOutage: every instance answers Unavailable. The
// adaptive throttle, on by default, rejects most calls locally (an
// Unavailable that matches middleware.ErrThrottled), so the servers see
// a fraction of the calls. When the service is back the rejections stop
// within a few windows.
func TestThrottleInAnOutage(t *testing.T) {
	const calls = 400
	reg := openMem(t)
	a := startServer(t, reg, "echo", "a", 0)
	b := startServer(t, reg, "echo", "b", 0)
	cl := dial(t, reg, "echo", rostergrpc.WithStrategy(selector.RoundRobin),
		rostergrpc.WithThrottle(middleware.ThrottleConfig{Window: time.Second}))
	waitAnswered(t, cl, "a", "b")
	a.fail.Store(true)
	b.fail.Store(true)
	attempts := func() int64 { return a.calls.Load() + b.calls.Load() }
	start := attempts()
	throttled := 0
	for range calls {
		_, err := call(context.Background(), cl)
		if err == nil {
			t.Fatal("a call succeeded with every instance failing")
		}
		if errors.Is(err, middleware.ErrThrottled) {
			throttled++
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("a throttled call: %v, want Unavailable", err)
			}
		}
	}
	sent := attempts() - start
	t.Logf("outage: %d of %d calls throttled, %d attempts reached the servers", throttled, calls, sent)
	// After MinRequests (20) calls, 90% (MaxRejectProbability) are
	// rejected: about 58 calls go out, each with up to three attempts.
	if throttled < calls*3/4 {
		t.Errorf("%d of %d calls throttled in an outage, want ≥ 75%%", throttled, calls)
	}
	if sent > calls/2 {
		t.Errorf("%d attempts reached the servers for %d calls", sent, calls)
	}

	a.fail.Store(false)
	b.fail.Store(false)
	back := time.Now()
	ok := 0
	waitFor(t, 20*time.Second, "the throttle lets every call through again", func() bool {
		if _, err := call(context.Background(), cl); err != nil {
			ok = 0
			return false
		}
		ok++
		return ok == 50
	})
	t.Logf("50 calls in a row succeed %v after the service is back", time.Since(back).Round(10*time.Millisecond))
}

// TestResendCommittedIdempotent: one instance sends its response headers
// and then fails with Unavailable, which gRPC never retries. A method
// named by WithIdempotent is sent again, to the other instance: no call
// fails. Without it, the calls that reached that instance fail.
func TestResendCommittedIdempotent(t *testing.T) {
	run := func(t *testing.T, opts ...rostergrpc.Option) (failed int, bad int64) {
		reg := openMem(t)
		b := startServer(t, reg, "echo", "bad", 0)
		startServer(t, reg, "echo", "good", 0)
		// A quarantine that never ejects, and no throttle: the re-send
		// alone.
		q := middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: 1 << 30})
		cl := dial(t, reg, "echo", append([]rostergrpc.Option{rostergrpc.WithStrategy(selector.RoundRobin),
			rostergrpc.WithQuarantine(q), rostergrpc.WithThrottle(middleware.ThrottleConfig{MinRequests: math.MaxInt})}, opts...)...)
		waitAnswered(t, cl, "bad", "good")
		b.commit.Store(true)
		n := b.calls.Load()
		for range 40 {
			if _, err := call(context.Background(), cl); err != nil {
				failed++
			}
		}
		return failed, b.calls.Load() - n
	}
	failed, bad := run(t)
	t.Logf("not idempotent: %d of 40 calls failed, %d reached the committing instance", failed, bad)
	if failed == 0 || int64(failed) != bad {
		t.Errorf("not idempotent: %d of 40 calls failed and %d reached the committing instance; want each of those to fail", failed, bad)
	}
	failed, bad = run(t, rostergrpc.WithIdempotent("/grpc.testing.TestService/UnaryCall"))
	t.Logf("idempotent: %d of 40 calls failed, %d reached the committing instance", failed, bad)
	if failed != 0 || bad < 10 {
		t.Errorf("idempotent: %d of 40 calls failed, %d reached the committing instance; want 0 failed, ≥ 10 re-sent", failed, bad)
	}
}

// TestThrottleIgnoresContainedFailures: RPCs routed to zone a
// (x-roster-zone) fail on its one instance, which the quarantine ejects
// after five; its later failures are contained and the throttle does not
// count them. Two RPCs in three fail, and still none is throttled: the
// failing zone does not throttle the RPCs to the healthy one.
func TestThrottleIgnoresContainedFailures(t *testing.T) {
	reg := openMem(t)
	a := startInstance(t, reg, registry.Instance{Service: "echo", Zone: "a"}, "a1", 0)
	startInstance(t, reg, registry.Instance{Service: "echo", Zone: "b"}, "b1", 0)
	q := middleware.NewQuarantine(middleware.QuarantineConfig{})
	cl := dial(t, reg, "echo", rostergrpc.WithRetry(1), rostergrpc.WithQuarantine(q))
	waitAnswered(t, cl, "a1", "b1")
	a.fail.Store(true)
	ctx := context.Background()
	toA := metadata.AppendToOutgoingContext(ctx, "x-roster-zone", "a")
	toB := metadata.AppendToOutgoingContext(ctx, "x-roster-zone", "b")
	failedA, failedB, throttled := 0, 0, 0
	for i := range 300 {
		to := toA
		if i%3 == 2 {
			to = toB
		}
		_, err := call(to, cl)
		switch {
		case errors.Is(err, middleware.ErrThrottled):
			throttled++
		case err != nil && to == toA:
			failedA++
		case err != nil:
			failedB++
		}
	}
	t.Logf("%d of 200 RPCs to zone a failed, %d of 100 to zone b; %d throttled; ejected %v", failedA, failedB, throttled, q.Ejected("echo"))
	if len(q.Ejected("echo")) != 1 {
		t.Fatalf("ejected %v, want zone a's instance", q.Ejected("echo"))
	}
	if failedA < 190 {
		t.Errorf("%d of 200 RPCs to the failing zone failed", failedA)
	}
	if throttled != 0 || failedB != 0 {
		t.Errorf("%d RPCs throttled, %d to the healthy zone failed; want none", throttled, failedB)
	}
}
