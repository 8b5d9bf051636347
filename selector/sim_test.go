package selector

// A discrete-event simulation in virtual time (no sleeps, no wall clock)
// of docs/research/load-balancing.md §8.5 scenario B: 10 backends × 8 workers, service
// time exponential with mean 10 ms (800 rps per backend), Poisson arrivals
// at 4,800 rps (60 % load); backend 0 is 3× slower in the degraded run.
// The selector under test is the real one: Pick, then Done with the
// virtual latency at completion.

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

type simEvent struct {
	at      int64 // virtual ns
	backend int   // -1 = arrival
	start   int64 // arrival time of the request that completes
	done    Done
}

type simQueue []simEvent

func (q simQueue) Len() int           { return len(q) }
func (q simQueue) Less(i, j int) bool { return q[i].at < q[j].at }
func (q simQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)        { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type simResult struct {
	p50, p90, p99, p999 time.Duration
	over250             float64 // fraction of requests slower than 250 ms
	share0              float64 // fraction sent to backend 0
}

func (r simResult) String() string {
	return fmt.Sprintf("p50 %v  p90 %v  p99 %v  p99.9 %v  >250ms %.3f%%  to backend 0 %.1f%%",
		r.p50.Round(100*time.Microsecond), r.p90.Round(100*time.Microsecond), r.p99.Round(100*time.Microsecond),
		r.p999.Round(100*time.Microsecond), 100*r.over250, 100*r.share0)
}

const (
	simBackends = 10
	simWorkers  = 8
	simService  = 10e6 // mean service time, ns
	simRate     = 4800 // requests per second
	simDuration = 30   // virtual seconds
	simWarmup   = 5    // seconds not counted
)

// simConfig describes one simulated run; zero fields take the scenario B
// values above.
type simConfig struct {
	strategy Strategy
	opts     []Option
	weights  []uint32             // per backend; default 100
	workers  func(b, t int64) int // workers of backend b at virtual time t (ns)
	slow     float64              // service-time multiplier of backend 0
	rate     float64              // arrivals per second
	duration int64                // virtual seconds
	joinAt   int64                // if > 0, the last backend joins then (ns)
	backends int
	seed     uint64
}

// simRun is what a run measured: latencies per backend and time window.
type simRun struct {
	lat  [][]simSample // per backend
	sent []int         // picks per backend after the warm-up
}

type simSample struct{ at, lat int64 } // arrival time, latency

// simulate runs c through the real selector in virtual time.
func simulateRun(t *testing.T, c simConfig) simRun {
	t.Helper()
	c = c.withDefaults()
	var now int64
	opts := append([]Option{WithStrategy(c.strategy), withRand(seeded(c.seed)), withClock(func() int64 { return now })}, c.opts...)
	sel := mustNew(t, opts...)
	all := snap(c.backends, c.weights...)
	initial := all
	if c.joinAt > 0 {
		initial.Instances = all.Instances[:c.backends-1]
	}
	sel.Update(initial)
	index := map[string]int{}
	for i, in := range all.Instances {
		index[in.ID] = i
	}
	r := rand.New(seeded(c.seed + 100))
	type backend struct {
		busy  int
		queue []simEvent // waiting requests (start, done)
	}
	backends := make([]backend, c.backends)
	service := func(b int) int64 {
		d := r.ExpFloat64() * simService
		if b == 0 {
			d *= c.slow
		}
		return int64(d)
	}
	run := simRun{lat: make([][]simSample, c.backends), sent: make([]int, c.backends)}
	q := &simQueue{{at: 0, backend: -1}}
	end := c.duration * 1e9
	joined := c.joinAt == 0
	ctx := context.Background()
	start := func(b int, req simEvent) {
		backends[b].busy++
		req.at = now + service(b)
		heap.Push(q, req)
	}
	for q.Len() > 0 {
		e := heap.Pop(q).(simEvent)
		now = e.at
		if !joined && now >= c.joinAt {
			joined = true
			sel.Update(all)
		}
		if e.backend < 0 { // arrival
			if now >= end {
				continue
			}
			heap.Push(q, simEvent{at: now + int64(r.ExpFloat64()*1e9/c.rate), backend: -1})
			in, done, err := sel.Pick(ctx, PickOptions{})
			if err != nil {
				t.Fatal(err)
			}
			b := index[in.ID]
			if now >= simWarmup*1e9 {
				run.sent[b]++
			}
			req := simEvent{backend: b, start: now, done: done}
			if backends[b].busy < c.workers(int64(b), now) {
				start(b, req)
			} else {
				backends[b].queue = append(backends[b].queue, req)
			}
			continue
		}
		// completion
		l := now - e.start
		e.done.Done(nil, time.Duration(l))
		if e.start >= simWarmup*1e9 {
			run.lat[e.backend] = append(run.lat[e.backend], simSample{e.start, l})
		}
		b := &backends[e.backend]
		b.busy--
		for len(b.queue) > 0 && b.busy < c.workers(int64(e.backend), now) {
			next := b.queue[0]
			b.queue = b.queue[1:]
			start(e.backend, next)
		}
	}
	return run
}

func (c simConfig) withDefaults() simConfig {
	if c.backends == 0 {
		c.backends = simBackends
	}
	if c.workers == nil {
		c.workers = func(int64, int64) int { return simWorkers }
	}
	if c.slow == 0 {
		c.slow = 1
	}
	if c.rate == 0 {
		c.rate = simRate
	}
	if c.duration == 0 {
		c.duration = simDuration
	}
	return c
}

// latencies returns the sorted latencies of the given backends (all when
// none is given) for requests that arrived in [from, to) seconds.
func (r simRun) latencies(from, to float64, backends ...int) []int64 {
	if len(backends) == 0 {
		for b := range r.lat {
			backends = append(backends, b)
		}
	}
	var out []int64
	for _, b := range backends {
		for _, s := range r.lat[b] {
			if s.at >= int64(from*1e9) && s.at < int64(to*1e9) {
				out = append(out, s.lat)
			}
		}
	}
	slices.Sort(out)
	return out
}

func percentile(lat []int64, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	return time.Duration(lat[int(math.Ceil(p*float64(len(lat))))-1])
}

// share returns the fraction of the picks after the warm-up that went to b.
func (r simRun) share(b int) float64 {
	total := 0
	for _, n := range r.sent {
		total += n
	}
	return float64(r.sent[b]) / float64(total)
}

func simulate(t *testing.T, st Strategy, slow float64, seed uint64) simResult {
	t.Helper()
	run := simulateRun(t, simConfig{strategy: st, slow: slow, seed: seed})
	lat := run.latencies(0, simDuration)
	over := len(lat) - slices.IndexFunc(lat, func(x int64) bool { return x > 250e6 })
	if lat[len(lat)-1] <= 250e6 {
		over = 0
	}
	return simResult{
		p50: percentile(lat, 0.50), p90: percentile(lat, 0.90), p99: percentile(lat, 0.99), p999: percentile(lat, 0.999),
		over250: float64(over) / float64(len(lat)), share0: run.share(0),
	}
}

func TestSimulationOneSlowBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation skipped in -short mode")
	}
	results := map[Strategy][2]simResult{}
	for _, st := range []Strategy{RoundRobin, Random, LeastRequest, P2CEWMA} {
		healthy := simulate(t, st, 1, 1)
		degraded := simulate(t, st, 3, 1)
		results[st] = [2]simResult{healthy, degraded}
		t.Logf("%-14s healthy:  %v", st, healthy)
		t.Logf("%-14s 1 slow×3: %v", st, degraded)
	}
	for _, st := range []Strategy{LeastRequest, P2CEWMA} {
		h, d := results[st][0], results[st][1]
		if ratio := float64(d.p99) / float64(h.p99); ratio > 1.3 {
			t.Errorf("%s: p99 %v with one slow backend = %.2f × healthy %v, want ≤ 1.3", st, d.p99, ratio, h.p99)
		}
	}
	rr := results[RoundRobin]
	if rr[1].p99 < 10*rr[0].p99 {
		t.Errorf("round_robin p99 %v with one slow backend, healthy %v: expected it to degrade (queue diverges)", rr[1].p99, rr[0].p99)
	}
}
