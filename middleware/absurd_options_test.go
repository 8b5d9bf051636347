package middleware_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// TestAbsurdOptionsNeverPanic: every option of the client, its middleware
// and its selector at NaN, ±Inf, negative, zero and the extremes of its
// type either builds a client that serves calls (failing ones included)
// without a panic, or is refused by NewClient with an error wrapping registry.ErrInvalid and
// one "selector:" prefix.
func TestAbsurdOptionsNeverPanic(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	durs := []time.Duration{-1, 0, 1, math.MaxInt64, math.MinInt64}
	floats := []float64{nan, inf, -inf, -1, 0, 1e300}
	ints := []int{-1, 0, math.MaxInt, math.MinInt}
	var cases []func() []middleware.Option
	for _, d := range durs {
		cases = append(cases,
			func() []middleware.Option { return []middleware.Option{middleware.WithMaxStaleness(d)} },
			func() []middleware.Option { return []middleware.Option{middleware.WithZeroProtection(d)} },
			func() []middleware.Option { return []middleware.Option{middleware.WithFirstSnapshotTimeout(d)} },
			func() []middleware.Option {
				return []middleware.Option{middleware.WithMiddleware(middleware.Hedge(middleware.HedgeConfig{Delay: d}))}
			},
			func() []middleware.Option {
				return []middleware.Option{middleware.WithMiddleware(middleware.Retry(middleware.RetryConfig{MaxAttempts: 3, BaseBackoff: d, MaxBackoff: d}))}
			},
			func() []middleware.Option {
				return []middleware.Option{middleware.WithMiddleware(middleware.Throttle(middleware.ThrottleConfig{Window: d}))}
			},
			func() []middleware.Option {
				q := middleware.NewQuarantine(middleware.QuarantineConfig{BaseEjection: d, MaxEjection: d, ProbeTimeout: d,
					SuccessRateInterval: d})
				return []middleware.Option{middleware.WithQuarantine(q)}
			},
			func() []middleware.Option {
				return []middleware.Option{middleware.WithSelector(selector.WithSlowStart(selector.SlowStart{Window: d}))}
			},
		)
	}
	for _, f := range floats {
		cases = append(cases,
			func() []middleware.Option {
				return []middleware.Option{middleware.WithMiddleware(middleware.Retry(middleware.RetryConfig{MaxAttempts: 3, BudgetRatio: f, BudgetMinPerSecond: f}))}
			},
			func() []middleware.Option {
				return []middleware.Option{middleware.WithMiddleware(middleware.Throttle(middleware.ThrottleConfig{K: f}))}
			},
			func() []middleware.Option {
				q := middleware.NewQuarantine(middleware.QuarantineConfig{SuccessRateStdevFactor: f})
				return []middleware.Option{middleware.WithQuarantine(q)}
			},
			func() []middleware.Option {
				return []middleware.Option{middleware.WithSelector(selector.WithBoundedLoad(f), selector.WithStrategy(selector.ConsistentHash))}
			},
			func() []middleware.Option {
				return []middleware.Option{middleware.WithSelector(selector.WithSlowStart(selector.SlowStart{Window: time.Second, Aggression: f, MinWeightPercent: f}))}
			},
			func() []middleware.Option {
				return []middleware.Option{middleware.WithSelector(selector.WithSplit(selector.Split{Percent: f}))}
			},
		)
	}
	for _, n := range ints {
		cases = append(cases,
			func() []middleware.Option {
				return []middleware.Option{middleware.WithMiddleware(middleware.Retry(middleware.RetryConfig{MaxAttempts: n}))}
			},
			func() []middleware.Option {
				q := middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: n, MaxEjectedPercent: n, PanicThreshold: n,
					SuccessRateMinimumHosts: n, SuccessRateRequestVolume: n})
				return []middleware.Option{middleware.WithQuarantine(q)}
			},
			func() []middleware.Option {
				return []middleware.Option{middleware.WithSelector(selector.WithChoices(n))}
			},
			func() []middleware.Option {
				return []middleware.Option{middleware.WithSelector(selector.WithVirtualNodes(n), selector.WithStrategy(selector.ConsistentHash))}
			},
		)
	}
	e := newEnv(t)
	b := startBackend(t, e.writer, "api", 100)
	startBackend(t, e.writer, "api", 100)
	b.status.Store(503)
	refused := 0
	for i, mk := range cases {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("case %d panicked: %v", i, r)
				}
			}()
			c, err := middleware.NewClient(e.reader, mk()...)
			if err != nil {
				if !errors.Is(err, registry.ErrInvalid) || strings.Count(err.Error(), "selector:") != 1 {
					t.Errorf("case %d: NewClient = %v, want registry.ErrInvalid with one prefix", i, err)
				}
				refused++
				return
			}
			defer c.Close()
			for range 5 {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				_ = c.DoKey(ctx, "api", "k", get)
				cancel()
			}
		}()
	}
	if refused == 0 || refused == len(cases) {
		t.Errorf("%d of %d cases refused: the table no longer tells options apart", refused, len(cases))
	}
}
