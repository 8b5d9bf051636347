package agent_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/roster-go/roster/agent"
	"github.com/roster-go/roster/registry"
)

// TestUnreportedPickIsReleased: one pick never reported (a PHP worker
// that died mid-request) starved its instance until the token expired, a
// minute later (least_request compares in-flight counts alone, so it
// starves it every time). Within the selector's in-flight bound (≤ 8.6 s) the
// instance is picked again and the dashboard counts nothing in flight;
// the late report is still accepted and leaves the count at 0.
func TestUnreportedPickIsReleased(t *testing.T) {
	f := newFixture(t, startRedis(t), agent.Config{})
	f.register(registry.Instance{ID: "a", Service: "api", Address: "10.0.0.1:80"})
	f.register(registry.Instance{ID: "b", Service: "api", Address: "10.0.0.2:80"})
	f.waitInstances("api", 10*time.Second, func(in agent.Instances) bool { return len(in.Instances) == 2 })
	round := func() map[string]int {
		n := map[string]int{}
		for range 20 {
			p := f.pick(agent.PickRequest{Service: "api", Strategy: "least_request"})
			n[p.Instance.ID]++
			f.report(p.Token, "success", 1)
		}
		return n
	}
	for range 5 {
		round() // both have a latency estimate
	}
	lost := f.pick(agent.PickRequest{Service: "api", Strategy: "least_request"})
	id, start := lost.Instance.ID, time.Now()
	if n := round(); n[id] > 2 {
		t.Fatalf("%s got %d of 20 picks with a pick in flight: want it avoided (%v)", id, n[id], n)
	}
	for round()[id] == 0 {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%s still gets no picks %v after a pick never reported", id, time.Since(start))
		}
		time.Sleep(100 * time.Millisecond) // a pace for the rounds, not a wait for a state
	}
	t.Logf("%s picked again %v after a pick never reported", id, time.Since(start).Round(time.Millisecond))
	for inflight(t, f, id) != 0 {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the dashboard still counts a pick in flight on %s %v after it", id, time.Since(start))
		}
		time.Sleep(100 * time.Millisecond) // polling the dashboard's state
	}
	if st := do(t, "POST", f.url+"/v1/report", agent.ReportRequest{Token: lost.Token, Outcome: "success", LatencyMS: 1}, nil); st != http.StatusNoContent {
		t.Errorf("the late report: status %d, want 204", st)
	}
	if n := inflight(t, f, id); n != 0 {
		t.Errorf("the dashboard counts %d in flight on %s after the late report, want 0", n, id)
	}
}

// inflight returns the dashboard's in-flight count of instance id of api.
func inflight(t *testing.T, f *fixture, id string) int64 {
	t.Helper()
	var st agent.State
	if code := do(t, "GET", f.url+"/v1/state", nil, &st); code != http.StatusOK {
		t.Fatalf("state: status %d", code)
	}
	for _, s := range st.Services {
		for _, in := range s.Instances {
			if in.ID == id {
				return in.Stats.Inflight
			}
		}
	}
	t.Fatalf("no instance %s in the state", id)
	return 0
}
