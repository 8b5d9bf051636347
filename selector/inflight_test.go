package selector

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// count returns what c counts in flight now.
func (sh *shared) count(c *gauge) int64 { return c.load(sh.epoch(sh.clock.read())) }

// add counts n picks in c now, as picks whose Done never comes.
func (sh *shared) add(c *gauge, n int64) {
	g := sh.epoch(sh.clock.read())
	for range n {
		c.add(g)
	}
}

// TestUnreportedPickStopsCounting: one pick whose Done is never called
// (a caller that died mid-call) raised its instance's in-flight count
// forever, and the strategies that compare counts sent it nothing. Within
// 10 s it counts no more, and the instance gets its share again.
func TestUnreportedPickStopsCounting(t *testing.T) {
	for _, st := range []Strategy{LeastRequest, P2CEWMA} {
		t.Run(string(st), func(t *testing.T) {
			now := int64(time.Hour)
			s := mustNew(t, WithStrategy(st), withRand(seeded(1)), withClock(func() int64 { return now }))
			s.Update(snap(2))
			ctx := context.Background()
			share := func() map[string]int {
				n := map[string]int{}
				for range 1000 {
					in, d, err := s.Pick(ctx, PickOptions{})
					if err != nil {
						t.Fatal(err)
					}
					n[in.ID]++
					now += int64(time.Millisecond)
					d.Done(nil, time.Millisecond)
				}
				return n
			}
			share()                                // both have a latency estimate
			in, _, _ := s.Pick(ctx, PickOptions{}) // never reported
			if n := share(); n[in.ID] > 10 {
				t.Fatalf("%s got %d of 1000 picks with a pick in flight: %v", in.ID, n[in.ID], n)
			}
			now += int64(10 * time.Second)
			if n := share(); n[in.ID] < 400 {
				t.Errorf("10 s after a pick never reported, %s gets %d of 1000 picks: %v", in.ID, n[in.ID], n)
			}
		})
	}
}

// TestUnreportedPicksLeaveTheBoundedTotal: picks never reported stop
// counting in the in-flight total of bounded loads too.
func TestUnreportedPicksLeaveTheBoundedTotal(t *testing.T) {
	now := int64(time.Hour)
	s := mustNew(t, WithStrategy(ConsistentHash), WithBoundedLoad(1.25), withClock(func() int64 { return now }))
	s.Update(snap(4))
	for i := range 100 {
		if _, _, err := s.Pick(context.Background(), PickOptions{Key: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.sh.count(&s.sh.total); n != 100 {
		t.Fatalf("total %d in flight, want 100", n)
	}
	now += int64(DefaultInflightBound)
	if n := s.sh.count(&s.sh.total); n != 0 {
		t.Errorf("total %d in flight a bound after the picks, want 0", n)
	}
}

// TestInflightBound: a pick counts for at least half the bound and at
// most the bound; a Done after that changes nothing, and never takes the
// count of a later pick.
func TestInflightBound(t *testing.T) {
	for _, bound := range []time.Duration{DefaultInflightBound, 10 * time.Second, time.Minute, time.Millisecond} {
		sh := &shared{shift: inflightShift(bound)}
		epoch := int64(1) << sh.shift
		if 2*epoch > int64(bound) || 4*epoch <= int64(bound) {
			t.Errorf("bound %v: epochs of %v", bound, time.Duration(epoch))
		}
		for _, at := range []int64{0, 1, epoch - 1, 1000 * epoch} {
			var c gauge
			g := c.add(sh.epoch(at))
			if n := c.load(sh.epoch(at + epoch - 1)); n != 1 {
				t.Errorf("bound %v, picked at %d: %d in flight half a bound later, want 1", bound, at, n)
			}
			if n := c.load(sh.epoch(at + 2*epoch)); n != 0 {
				t.Errorf("bound %v, picked at %d: %d in flight a bound later, want 0", bound, at, n)
			}
			later := c.add(sh.epoch(at + 2*epoch)) // the same bucket, a new epoch
			c.done(g)                              // the first pick's Done, late
			if n := c.load(sh.epoch(at + 2*epoch)); n != 1 {
				t.Errorf("bound %v: a late Done left %d in flight, want the later pick's 1", bound, n)
			}
			c.done(later)
			c.done(later)
			if n := c.load(sh.epoch(at + 2*epoch)); n != 0 {
				t.Errorf("bound %v: %d in flight after a second Done, want 0", bound, n)
			}
		}
	}
}

// TestInflightAcrossEpochs: picks and Done racing over many epoch
// boundaries leave nothing in flight.
func TestInflightAcrossEpochs(t *testing.T) {
	var mu sync.Mutex
	now := int64(0)
	clock := func() int64 { mu.Lock(); defer mu.Unlock(); now += 1 << 20; return now }
	s := mustNew(t, WithStrategy(LeastRequest), WithInflightBound(time.Duration(1<<24)), withClock(clock))
	s.Update(snap(3))
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				_, d, _ := s.Pick(context.Background(), PickOptions{})
				d.Done(nil, time.Millisecond)
			}
		}()
	}
	wg.Wait()
	for id, ep := range s.eps {
		for i := range ep.inflight.b {
			if n := int32(uint32(ep.inflight.b[i].Load())); n != 0 {
				t.Errorf("%s: a bucket holds %d after every Done", id, n)
			}
		}
	}
}

func TestInflightBoundOption(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second, time.Microsecond, 2 * time.Hour} {
		if _, err := New(WithInflightBound(d)); !errors.Is(err, errInvalidOption) {
			t.Errorf("WithInflightBound(%v): %v, want errInvalidOption", d, err)
		}
	}
}
