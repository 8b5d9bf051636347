package selector

// A discrete-event simulation in virtual time (no sleeps, no wall clock)
// of load-balancing.md §8.5 scenario B: 10 backends × 8 workers, service
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

func simulate(t *testing.T, st Strategy, slow float64, seed uint64) simResult {
	t.Helper()
	var now int64
	sel := mustNew(t, WithStrategy(st), withRand(seeded(seed)), withClock(func() int64 { return now }))
	sel.Update(snap(simBackends))
	p := sel.cur.Load()
	index := map[string]int{}
	for i, in := range p.insts {
		index[in.ID] = i
	}
	r := rand.New(seeded(seed + 100))
	type backend struct {
		busy  int
		queue []simEvent // waiting requests (start, done)
	}
	backends := make([]backend, simBackends)
	service := func(b int) int64 {
		d := r.ExpFloat64() * simService
		if b == 0 {
			d *= slow
		}
		return int64(d)
	}
	q := &simQueue{{at: 0, backend: -1}}
	var lat []int64
	sent0, sent := 0, 0
	end := int64(simDuration * 1e9)
	ctx := context.Background()
	for q.Len() > 0 {
		e := heap.Pop(q).(simEvent)
		now = e.at
		if e.backend < 0 { // arrival
			if now >= end {
				continue
			}
			heap.Push(q, simEvent{at: now + int64(r.ExpFloat64()*1e9/simRate), backend: -1})
			in, done, err := sel.Pick(ctx, PickOptions{})
			if err != nil {
				t.Fatal(err)
			}
			b := index[in.ID]
			if now >= simWarmup*1e9 {
				sent++
				if b == 0 {
					sent0++
				}
			}
			req := simEvent{backend: b, start: now, done: done}
			if backends[b].busy < simWorkers {
				backends[b].busy++
				req.at = now + service(b)
				heap.Push(q, req)
			} else {
				backends[b].queue = append(backends[b].queue, req)
			}
			continue
		}
		// completion
		l := now - e.start
		e.done.Done(nil, time.Duration(l))
		if e.start >= simWarmup*1e9 {
			lat = append(lat, l)
		}
		b := &backends[e.backend]
		if len(b.queue) > 0 {
			next := b.queue[0]
			b.queue = b.queue[1:]
			next.at = now + service(e.backend)
			heap.Push(q, next)
		} else {
			b.busy--
		}
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		return time.Duration(lat[int(math.Ceil(p*float64(len(lat))))-1])
	}
	over := len(lat) - slices.IndexFunc(lat, func(x int64) bool { return x > 250e6 })
	if lat[len(lat)-1] <= 250e6 {
		over = 0
	}
	return simResult{
		p50: pct(0.50), p90: pct(0.90), p99: pct(0.99), p999: pct(0.999),
		over250: float64(over) / float64(len(lat)), share0: float64(sent0) / float64(sent),
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
