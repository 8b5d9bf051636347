package rostergrpc_test

import (
	"context"
	"math"
	"testing"

	rostergrpc "github.com/roster-go/roster/contrib/rostergrpc"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/selector"
)

// noThrottling is the default service config's retry policy without its
// retryThrottling: gRPC's retries as they were before it.
const noThrottling = `{"loadBalancingConfig":[{"roster":{"strategy":"round_robin"}}],
	"methodConfig":[{"name":[{}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.01s",
	"maxBackoff":"0.1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`

// TestRetryThrottlingBoundsAnOutage: every instance answers Unavailable
// to every call. The servers count the attempts. With the default
// service config's retryThrottling, gRPC stops retrying once its tokens
// are spent: the first calls get three attempts, the rest one. Without
// it every call gets three, which is what the bound prevents. The
// adaptive throttle, which would reject most calls before any attempt,
// is off to see gRPC's retries alone.
func TestRetryThrottlingBoundsAnOutage(t *testing.T) {
	const calls = 400
	run := func(t *testing.T, opts ...rostergrpc.Option) (all, late int64) {
		reg := openMem(t)
		a := startServer(t, reg, "echo", "a", 0)
		b := startServer(t, reg, "echo", "b", 0)
		cl := dial(t, reg, "echo", append([]rostergrpc.Option{rostergrpc.WithStrategy(selector.RoundRobin),
			rostergrpc.WithThrottle(middleware.ThrottleConfig{MinRequests: math.MaxInt})}, opts...)...)
		waitAnswered(t, cl, "a", "b")
		a.fail.Store(true)
		b.fail.Store(true)
		attempts := func() int64 { return a.calls.Load() + b.calls.Load() }
		start := attempts()
		var half int64
		for i := range calls {
			if i == calls/2 {
				half = attempts()
			}
			if _, err := call(context.Background(), cl); err == nil {
				t.Fatal("a call succeeded with every instance failing")
			}
		}
		return attempts() - start, attempts() - half
	}

	all, late := run(t)
	t.Logf("with retryThrottling: %d attempts for %d calls (%.2f×), %d for the last %d", all, calls, float64(all)/calls, late, calls/2)
	if float64(all) > 1.2*calls {
		t.Errorf("with retryThrottling, %d attempts for %d calls: want ≤ 1.2×", all, calls)
	}
	if late != calls/2 {
		t.Errorf("with the tokens spent, the last %d calls made %d attempts: want one each", calls/2, late)
	}

	all, _ = run(t, rostergrpc.WithServiceConfig(noThrottling))
	t.Logf("without retryThrottling: %d attempts for %d calls (%.2f×)", all, calls, float64(all)/calls)
	if all != 3*calls {
		t.Errorf("without retryThrottling, %d attempts for %d calls: want 3×", all, calls)
	}
}
