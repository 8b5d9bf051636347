package rostergrpc_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/serviceconfig"
	"google.golang.org/grpc/status"

	rostergrpc "github.com/roster-go/roster/contrib/rostergrpc"
	"github.com/roster-go/roster/internal/mwhook"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// spyName is the roster balancer registered under another name, with a
// ClientConn that keeps every picker the balancer publishes. It wraps the
// real balancer and the real ClientConn: nothing is simulated.
const spyName = "roster_spy"

var spied = &spy{}

func init() { balancer.Register(spied) }

type spy struct {
	mu      sync.Mutex
	pickers []balancer.Picker // READY pickers, oldest first
}

func (s *spy) Name() string { return spyName }

func (s *spy) Build(cc balancer.ClientConn, o balancer.BuildOptions) balancer.Balancer {
	return balancer.Get(rostergrpc.BalancerName).Build(&spyCC{ClientConn: cc, s: s}, o)
}

func (s *spy) ParseConfig(js json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	return balancer.Get(rostergrpc.BalancerName).(balancer.ConfigParser).ParseConfig(js)
}

func (s *spy) latest() balancer.Picker {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pickers) == 0 {
		return nil
	}
	return s.pickers[len(s.pickers)-1]
}

type spyCC struct {
	balancer.ClientConn
	s *spy
}

func (c *spyCC) UpdateState(st balancer.State) {
	if st.ConnectivityState == connectivity.Ready {
		c.s.mu.Lock()
		c.s.pickers = append(c.s.pickers, st.Picker)
		c.s.mu.Unlock()
	}
	c.ClientConn.UpdateState(st)
}

// picks calls p.Pick n times, reporting each pick done, and returns the
// SubConns it got, counted.
func picks(t *testing.T, p balancer.Picker, n int) map[balancer.SubConn]int {
	t.Helper()
	got := map[balancer.SubConn]int{}
	for i := range n {
		r, err := p.Pick(balancer.PickInfo{FullMethodName: "/grpc.testing.TestService/UnaryCall", Ctx: context.Background()})
		if err != nil {
			t.Fatalf("pick %d of %d: %v", i+1, n, err)
		}
		if r.Done != nil {
			r.Done(balancer.DoneInfo{})
		}
		got[r.SubConn]++
	}
	return got
}

// A picker is an immutable view, as grpc-go's are: once the balancer has
// published a newer one (an instance joined), the old picker still picks
// from the instances it was built with, never from the newer set.
func TestOldPickerKeepsItsOwnSet(t *testing.T) {
	reg := openMem(t)
	startServer(t, reg, "echo", "a", 0)
	startServer(t, reg, "echo", "b", 0)
	cc, err := rostergrpc.NewClient(reg, "echo",
		[]rostergrpc.Option{rostergrpc.WithServiceConfig(`{"loadBalancingConfig":[{"` + spyName + `":{"strategy":"round_robin"}}]}`)},
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cl := testpb.NewTestServiceClient(cc)
	waitAnswered(t, cl, "a", "b")

	old := spied.latest()
	before := picks(t, old, 20) // round robin over a and b
	if len(before) != 2 {
		t.Fatalf("the picker published once a and b answered picks %d connections, want 2", len(before))
	}

	startServer(t, reg, "echo", "c", 0)
	waitAnswered(t, cl, "c")
	if spied.latest() == old {
		t.Fatal("no new picker after c joined")
	}
	// The selector behind the balancer now holds a, b and c; the old
	// picker must still pick a and b, both, and nothing else.
	after := picks(t, old, 30)
	for sc := range after {
		if before[sc] == 0 {
			t.Fatalf("the old picker picked a connection it was not built with (%v): it sees the newer set", after)
		}
	}
	if len(after) != 2 {
		t.Fatalf("the old picker picks %d of its 2 connections", len(after))
	}
}

// waitAnswered calls until every named server has answered.
func waitAnswered(t *testing.T, cl testpb.TestServiceClient, names ...string) {
	t.Helper()
	seen := map[string]bool{}
	waitFor(t, 10*time.Second, "servers answer", func() bool {
		name, err := call(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		seen[name] = true
		for _, n := range names {
			if !seen[n] {
				return false
			}
		}
		return true
	})
}

// The pick fallback is one policy, selector.PickOptions' order, in the
// gRPC balancer and in middleware.Client alike: when the instances a call
// has not tried are all quarantined, a retry goes to an instance it tried
// that is admitted, before a quarantined one. Here "a" is quarantined and
// "b" fails every call: every attempt of both clients goes to b.
func TestFallbackOrderSameAsMiddleware(t *testing.T) {
	setup := func(t *testing.T) (reg *registry.Registry, a, b *server, q *middleware.Quarantine) {
		reg = openMem(t)
		a = startServer(t, reg, "echo", "a", 0)
		b = startServer(t, reg, "echo", "b", 0)
		q = middleware.NewQuarantine(middleware.QuarantineConfig{
			ConsecutiveFailures: 3, MaxEjectedPercent: 50, PanicThreshold: -1,
		})
		return reg, a, b, q
	}
	eject := func(t *testing.T, q *middleware.Quarantine, s *server) {
		t.Helper()
		id := s.lease.Instance().ID
		for range 3 {
			mwhook.Outcome(q, "echo", id, int(middleware.Retryable), 2)
		}
		if mwhook.Admit(q, "echo", id, 2) {
			t.Fatalf("%s not quarantined", s.name)
		}
	}
	check := func(t *testing.T, a, b *server, aBefore, bBefore int64) {
		t.Helper()
		if got := a.calls.Load() - aBefore; got != 0 {
			t.Errorf("the quarantined instance got %d attempts; want 0 (a tried, admitted instance comes first)", got)
		}
		if got := b.calls.Load() - bBefore; got != 3 {
			t.Errorf("the tried, admitted instance got %d attempts, want all 3", got)
		}
	}

	t.Run("grpc", func(t *testing.T) {
		reg, a, b, q := setup(t)
		cl := dial(t, reg, "echo", rostergrpc.WithStrategy(selector.RoundRobin),
			rostergrpc.WithRetry(3), rostergrpc.WithQuarantine(q))
		waitAnswered(t, cl, "a", "b")
		eject(t, q, a)
		b.fail.Store(true)
		aBefore, bBefore := a.calls.Load(), b.calls.Load()
		if _, err := call(context.Background(), cl); status.Code(err) != codes.Unavailable {
			t.Fatalf("call = %v, want Unavailable from b", err)
		}
		check(t, a, b, aBefore, bBefore)
	})

	t.Run("middleware", func(t *testing.T) {
		reg, a, b, q := setup(t)
		c, err := middleware.NewClient(reg, middleware.WithQuarantine(q),
			middleware.WithSelector(selector.WithStrategy(selector.RoundRobin)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns := map[string]testpb.TestServiceClient{}
		for _, s := range []*server{a, b} {
			addr := s.lease.Instance().Address
			cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			conns[addr] = testpb.NewTestServiceClient(cc)
		}
		rpc := func(ctx context.Context, in registry.Instance) error {
			_, err := call(ctx, conns[in.Address])
			return err
		}
		eject(t, q, a)
		b.fail.Store(true)
		aBefore, bBefore := a.calls.Load(), b.calls.Load()
		if err := c.Do(context.Background(), "echo", rpc); status.Code(err) != codes.Unavailable {
			t.Fatalf("Do = %v, want Unavailable from b", err)
		}
		check(t, a, b, aBefore, bBefore)
	})
}
