package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/roster-go/roster/agent"
	"github.com/roster-go/roster/policy"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// canaryPicks makes n picks of "api" through the HTTP API and returns
// how many went to version v2.
func (f *fixture) canaryPicks(n int) int {
	f.t.Helper()
	got := 0
	for range n {
		if f.pick(agent.PickRequest{Service: "api"}).Instance.Version == "v2" {
			got++
		}
	}
	return got
}

// TestPickFollowsStoredPolicy: the picks of the agent's HTTP API honour
// the split stored for the service, on a real etcd, and follow a change
// of it within 2 s.
func TestPickFollowsStoredPolicy(t *testing.T) {
	f := newFixture(t, startEtcd(t), agent.Config{Strategy: selector.RoundRobin})
	for i, v := range []string{"v1", "v1", "v1", "v2"} {
		f.register(registry.Instance{Service: "api", ID: "api-" + string(rune('a'+i)), Version: v,
			Address: "127.0.0.1:" + string(rune('1'+i)) + "000"})
	}
	ctx := context.Background()
	split := func(pct float64) policy.Policy {
		return policy.Policy{Split: []policy.SplitEntry{{Version: "v2", Percent: pct}}}
	}
	if _, err := policy.Put(ctx, f.writer, "api", split(10)); err != nil {
		t.Fatal(err)
	}
	f.waitInstances("api", 10*time.Second, func(in agent.Instances) bool { return len(in.Instances) == 4 })
	const picks = 400
	// Binomial(400, 0.1): σ = 6; 4σ around 40.
	if got := f.canaryPicks(picks); got < 16 || got > 64 {
		t.Errorf("the stored 10%% split sent %d of %d picks to v2", got, picks)
	} else {
		t.Logf("the stored 10%% split sent %d of %d picks to v2", got, picks)
	}

	if _, err := policy.Put(ctx, f.writer, "api", split(50)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Followed: 15 of the last 30 picks to v2, which a 10% split does
	// with a chance below 1e-7.
	var window []bool
	for n := 0; n < 15; {
		if time.Since(start) > 2*time.Second {
			t.Fatal("the 50% split was not followed within 2 s")
		}
		window = append(window, f.canaryPicks(1) == 1)
		if len(window) > 30 {
			window = window[1:]
		}
		n = 0
		for _, v := range window {
			if v {
				n++
			}
		}
	}
	t.Logf("the 50%% split was followed after %v", time.Since(start).Round(time.Millisecond))
	// Binomial(400, 0.5): σ = 10; 4σ around 200.
	if got := f.canaryPicks(picks); got < 160 || got > 240 {
		t.Errorf("the stored 50%% split sent %d of %d picks to v2", got, picks)
	} else {
		t.Logf("the stored 50%% split sent %d of %d picks to v2", got, picks)
	}
}
