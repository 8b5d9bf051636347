package selector

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// snap builds a snapshot of n instances i00..; weights default to 100.
func snap(n int, weights ...uint32) registry.Snapshot {
	s := registry.Snapshot{Service: "svc", Revision: 1}
	for i := range n {
		w := uint32(registry.DefaultWeight)
		if i < len(weights) {
			w = weights[i]
		}
		s.Instances = append(s.Instances, registry.Instance{
			ID: fmt.Sprintf("i%04d", i), Service: "svc", Address: fmt.Sprintf("10.0.%d.%d:80", i/250, i%250), Weight: w,
		})
	}
	return s
}

func mustNew(t testing.TB, opts ...Option) *Selector {
	t.Helper()
	s, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestUnknownStrategy(t *testing.T) {
	_, err := New(WithStrategy("fastest"))
	if !errors.Is(err, errUnknownStrategy) {
		t.Fatalf("New(fastest) = %v, want errUnknownStrategy", err)
	}
	if _, err := ParseStrategy("maglev"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Option{WithVirtualNodes(0), WithBoundedLoad(0.5), withMaglevTableSize(65536), withDecay(0)} {
		if _, err := New(bad); !errors.Is(err, errInvalidOption) {
			t.Errorf("New(bad option) = %v, want errInvalidOption", err)
		}
	}
}

func TestEveryStrategyPicks(t *testing.T) {
	ctx := context.Background()
	for _, st := range Strategies() {
		t.Run(string(st), func(t *testing.T) {
			s := mustNew(t, WithStrategy(st))
			if _, _, err := s.Pick(ctx, PickOptions{}); !errors.Is(err, ErrNoInstances) {
				t.Fatalf("pick before update: %v, want ErrNoInstances", err)
			}
			s.Update(snap(0))
			if _, _, err := s.Pick(ctx, PickOptions{}); !errors.Is(err, ErrNoInstances) {
				t.Fatalf("pick from empty: %v, want ErrNoInstances", err)
			}
			s.Update(snap(5, 100, 200, 300, 100, 50))
			seen := map[string]int{}
			for i := range 5000 {
				in, done, err := s.Pick(ctx, PickOptions{Key: fmt.Sprint("user", i)})
				if err != nil {
					t.Fatal(err)
				}
				seen[in.ID]++
				done.Done(nil, time.Millisecond)
			}
			if len(seen) != 5 {
				t.Fatalf("picked %v, want all 5 instances", seen)
			}
		})
	}
}

func TestDraining(t *testing.T) {
	ctx := context.Background()
	for _, st := range Strategies() {
		t.Run(string(st), func(t *testing.T) {
			s := mustNew(t, WithStrategy(st))
			s.Update(snap(3, 0, 100, 0))
			for range 200 {
				in, done, err := s.Pick(ctx, PickOptions{Key: "k"})
				if err != nil || in.ID != "i0001" {
					t.Fatalf("pick = %s, %v; want the only non-draining instance i0001", in.ID, err)
				}
				done.Done(nil, 0)
			}
			// Everything else excluded: a draining instance is used.
			in, _, err := s.Pick(ctx, PickOptions{Exclude: func(in *registry.Instance) bool { return in.ID == "i0001" }})
			if err != nil || in.Weight != 0 {
				t.Fatalf("pick with i0001 excluded = %+v, %v; want a draining instance", in, err)
			}
			// Only draining instances: they are used.
			s.Update(snap(2, 0, 0))
			if in, _, err := s.Pick(ctx, PickOptions{}); err != nil || in.Weight != 0 {
				t.Fatalf("pick among draining = %+v, %v", in, err)
			}
		})
	}
}

func TestExclude(t *testing.T) {
	ctx := context.Background()
	for _, st := range Strategies() {
		t.Run(string(st), func(t *testing.T) {
			s := mustNew(t, WithStrategy(st))
			s.Update(snap(10))
			tried := map[string]bool{}
			ex := func(in *registry.Instance) bool { return tried[in.ID] }
			for range 10 {
				in, done, err := s.Pick(ctx, PickOptions{Key: "user-1", Exclude: ex})
				if err != nil {
					t.Fatal(err)
				}
				if tried[in.ID] {
					t.Fatalf("picked excluded %s", in.ID)
				}
				tried[in.ID] = true
				done.Done(errors.New("boom"), time.Millisecond)
			}
			if _, _, err := s.Pick(ctx, PickOptions{Exclude: ex}); !errors.Is(err, ErrAllExcluded) || errors.Is(err, ErrNoInstances) {
				t.Fatalf("all excluded: %v, want ErrAllExcluded only", err)
			}
		})
	}
}

func TestStateSurvivesUpdate(t *testing.T) {
	s := mustNew(t, WithStrategy(LeastRequest))
	s.Update(snap(3))
	ctx := context.Background()
	var dones []Done
	for range 30 {
		_, d, _ := s.Pick(ctx, PickOptions{})
		dones = append(dones, d)
	}
	before := s.sh.count(&s.eps["i0001"].inflight)
	next := snap(4)
	next.Revision = 2
	s.Update(next)
	if got := s.sh.count(&s.eps["i0001"].inflight); got != before || got == 0 {
		t.Fatalf("in-flight of a surviving instance = %d after update, want %d", got, before)
	}
	if s.sh.count(&s.eps["i0003"].inflight) != 0 {
		t.Fatal("new instance starts with requests in flight")
	}
	for _, d := range dones {
		d.Done(nil, 0)
	}
	var total int64
	for _, ep := range s.eps {
		total += s.sh.count(&ep.inflight)
	}
	if total != 0 {
		t.Fatalf("in flight after all Done: %d", total)
	}
}

func TestStaleSnapshotIsUsed(t *testing.T) {
	s := mustNew(t, WithStrategy(RoundRobin))
	good := snap(3)
	s.Update(good)
	p := s.cur.Load()
	stale := good
	stale.Stale = true
	s.Update(stale)
	if !s.Snapshot().Stale || s.Len() != 3 {
		t.Fatalf("stale snapshot: Stale=%v Len=%d", s.Snapshot().Stale, s.Len())
	}
	if s.cur.Load().algo != p.algo {
		t.Fatal("a Stale-only change rebuilt the picker")
	}
}

func TestStartFollowsWatcher(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	defer reg.Close()
	l1, err := reg.Register(ctx, registry.Instance{Service: "svc", Address: "127.0.0.1:1001"})
	if err != nil {
		t.Fatal(err)
	}
	defer l1.Deregister(ctx)
	w, err := reg.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s := mustNew(t, WithStrategy(RoundRobin))
	if err := s.Start(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx, w); !errors.Is(err, errStarted) {
		t.Fatalf("second Start: %v", err)
	}
	if s.Len() != 1 {
		t.Fatalf("after Start: %d instances, want 1", s.Len())
	}
	l2, err := reg.Register(ctx, registry.Instance{Service: "svc", Address: "127.0.0.1:1002"})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Deregister(ctx)
	for s.Len() != 2 {
		if ctx.Err() != nil {
			t.Fatal("second instance never seen")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Pick(ctx, PickOptions{}); err != nil {
		t.Fatalf("pick after Close: %v", err)
	}
}

func TestFollowReturnsOnClose(t *testing.T) {
	ctx := context.Background()
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	defer reg.Close()
	w, err := reg.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	s := mustNew(t)
	errc := make(chan error)
	go func() { errc <- s.follow(ctx, w) }()
	time.Sleep(10 * time.Millisecond)
	w.Close()
	if err := <-errc; !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Follow = %v, want ErrClosed", err)
	}
}

// Picks and Dones race with Updates (run with -race): no lock is needed
// on the pick path and in-flight counts balance out.
func TestConcurrentPickAndUpdate(t *testing.T) {
	ctx := context.Background()
	for _, st := range Strategies() {
		s := mustNew(t, WithStrategy(st), WithVirtualNodes(10), WithBoundedLoad(1.25))
		s.Update(snap(10))
		stop := make(chan struct{})
		errc := make(chan error, 4)
		for g := range 4 {
			go func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						errc <- nil
						return
					default:
					}
					_, done, err := s.Pick(ctx, PickOptions{Key: fmt.Sprint(g, i%50)})
					if err != nil {
						errc <- err
						return
					}
					done.Done(nil, time.Millisecond)
				}
			}()
		}
		for i := range 50 {
			s.Update(snap(5 + i%10))
		}
		close(stop)
		for range 4 {
			if err := <-errc; err != nil {
				t.Fatalf("%s: %v", st, err)
			}
		}
		var total int64
		for _, ep := range s.eps {
			total += s.sh.count(&ep.inflight)
		}
		if total != 0 || s.sh.count(&s.sh.total) != 0 {
			t.Errorf("%s: %d in flight after every Done (total counter %d)", st, total, s.sh.count(&s.sh.total))
		}
	}
}

func TestCloseBeforeFirstSnapshot(t *testing.T) {
	ctx := context.Background()
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	defer reg.Close()
	w, err := reg.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s := mustNew(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx, w); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Start after Close = %v, want ErrClosed", err)
	}
}
