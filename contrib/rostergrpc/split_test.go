package rostergrpc_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	rostergrpc "github.com/roster-go/roster/contrib/rostergrpc"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// TestSplitThroughWithSelector: selector.WithSplit, given through
// WithSelector, sends its share of the RPCs to the canary version.
func TestSplitThroughWithSelector(t *testing.T) {
	reg := openMem(t)
	for _, n := range []string{"v1a", "v1b", "v1c"} {
		startInstance(t, reg, registry.Instance{Service: "echo", Version: "1.0"}, n, 0)
	}
	canary := startInstance(t, reg, registry.Instance{Service: "echo", Version: "2.0"}, "v2", 0)
	c := dial(t, reg, "echo", rostergrpc.WithStrategy(selector.RoundRobin),
		rostergrpc.WithSelector(selector.WithSplit(selector.Split{Route: selector.Route{Version: "2.0"}, Percent: 10})))
	waitAnswered(t, c, "v1a", "v1b", "v1c", "v2")
	const calls = 400
	n := canary.calls.Load()
	for range calls {
		if _, err := call(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	// Binomial(400, 0.1): σ = 6; the bounds are beyond 4σ.
	got := canary.calls.Load() - n
	t.Logf("the 10%% canary took %d of %d RPCs", got, calls)
	if got < 15 || got > 70 {
		t.Errorf("the 10%% canary took %d of %d RPCs", got, calls)
	}
}

// TestBadSelectorOption: NewClient names an invalid selector option in a
// typed error, and makes no channel.
func TestBadSelectorOption(t *testing.T) {
	reg := openMem(t)
	cc, err := rostergrpc.NewClient(reg, "echo",
		[]rostergrpc.Option{rostergrpc.WithSelector(selector.WithSplit(selector.Split{Route: selector.Route{Version: "2"}, Percent: 150}))},
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err == nil {
		cc.Close()
		t.Fatal("a split of 150% was accepted")
	}
	if !errors.Is(err, registry.ErrInvalid) {
		t.Errorf("%v: want an error wrapping registry.ErrInvalid", err)
	}
	t.Log(err)
}
