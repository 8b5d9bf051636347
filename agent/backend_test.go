package agent_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/roster-go/roster/agent"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
)

func has(n int) func(agent.Instances) bool {
	return func(in agent.Instances) bool { return len(in.Instances) == n && !in.Stale }
}

// TestPickHonoursWeights: picks over the HTTP API follow the instances'
// weights (weighted round robin, so the shares are exact over a period).
func TestPickHonoursWeights(t *testing.T) {
	onBackends(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, agent.Config{})
		weights := map[string]uint32{"a": 100, "b": 200, "c": 300}
		for id, w := range weights {
			f.register(registry.Instance{ID: id, Service: "api", Address: "10.0.0.1:80", Weight: w})
		}
		f.waitInstances("api", 10*time.Second, has(3))
		const picks = 1200
		got := map[string]int{}
		for range picks {
			p := f.pick(agent.PickRequest{Service: "api", Strategy: "weighted_round_robin"})
			got[p.Instance.ID]++
			f.report(p.Token, "success", 1)
		}
		for id, w := range weights {
			want := picks * float64(w) / 600
			if math.Abs(float64(got[id])-want) > want*0.05 {
				t.Errorf("%s (weight %d): %d picks, want %.0f ± 5%% (all: %v)", id, w, got[id], want, got)
			}
		}
	})
}

// TestReportDrivesQuarantine: failures reported by token eject the
// instance from picks; its neighbours take the traffic, and the state
// and the metrics say so.
func TestReportDrivesQuarantine(t *testing.T) {
	onBackends(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, agent.Config{Quarantine: middleware.QuarantineConfig{
			ConsecutiveFailures: 3, BaseEjection: time.Minute, MaxEjectedPercent: 50}})
		for _, id := range []string{"a", "b", "c"} {
			f.register(registry.Instance{ID: id, Service: "api", Address: "10.0.0.1:80"})
		}
		f.waitInstances("api", 10*time.Second, has(3))
		failures := 0
		for i := 0; failures < 3; i++ {
			if i > 100 {
				t.Fatal("round robin did not reach instance b in 100 picks")
			}
			p := f.pick(agent.PickRequest{Service: "api", Strategy: "round_robin"})
			outcome := "success"
			if p.Instance.ID == "b" {
				outcome, failures = "failure", failures+1
			}
			f.report(p.Token, outcome, 2)
		}
		for range 100 {
			p := f.pick(agent.PickRequest{Service: "api", Strategy: "round_robin"})
			if p.Instance.ID == "b" {
				t.Fatal("a quarantined instance was picked")
			}
			f.report(p.Token, "success", 2)
		}
		st := f.agent.State()
		for _, in := range st.Services[0].Instances {
			if in.Quarantined != (in.ID == "b") {
				t.Errorf("state: %s quarantined = %v", in.ID, in.Quarantined)
			}
			if in.ID == "b" && in.Stats.Failures != 3 {
				t.Errorf("state: b has %d failures, want 3", in.Stats.Failures)
			}
		}
		metrics := get(t, f.url+"/metrics")
		for _, want := range []string{
			`roster_agent_instances{roster_ejected="true",roster_service="api",roster_zone=""} 1`,
			`roster_agent_instances{roster_ejected="false",roster_service="api",roster_zone=""} 2`,
			`roster_client_failures_total{roster_outcome="error",roster_service="api",roster_zone=""} 3`,
			`roster_client_calls_total{roster_outcome="error",roster_service="api"} 3`,
		} {
			if !contains(metrics, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		for _, unwanted := range []string{"otel_scope_", "roster_instance_id"} {
			if contains(metrics, unwanted) {
				t.Errorf("/metrics has %s labels", unwanted)
			}
		}
		// The discovery metrics of the PHP article: query latency, cache
		// hit rate, update frequency.
		for _, name := range []string{"roster_discovery_lookup_duration_seconds_bucket", `roster_discovery_cache_requests_total{`,
			`roster_cache_hit="true"`, "roster_discovery_snapshot_updates_total{", `roster_client_picks_total{`, "roster_agent_tokens"} {
			if !contains(metrics, name) {
				t.Errorf("/metrics lacks %s", name)
			}
		}
	})
}

// TestLongPollAnswersOnChange: a long poll answers as soon as the
// agent's registry delivers a change. The agent's own share of the delay
// (after a watcher on the same registry saw the change) must stay under
// 100 ms; the end-to-end delay is logged.
func TestLongPollAnswersOnChange(t *testing.T) {
	onBackends(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, agent.Config{})
		f.register(registry.Instance{ID: "a", Service: "api", Address: "10.0.0.1:80"})
		cur := f.waitInstances("api", 10*time.Second, has(1))
		for round := range 5 {
			polled := make(chan time.Time, 1)
			go func() {
				resp, err := http.Get(fmt.Sprintf("%s/v1/services/api?index=%d&wait=30s", f.url, cur.Index))
				if err == nil {
					resp.Body.Close()
				}
				polled <- time.Now()
			}()
			seen := watchNext(t, f, cur) // a watcher of the test on the agent's own registry
			start := time.Now()
			id := fmt.Sprintf("n%d", round)
			f.register(registry.Instance{ID: id, Service: "api", Address: "10.0.0.2:80"})
			at, watcherAt := <-polled, <-seen
			agentShare := at.Sub(watcherAt)
			t.Logf("round %d: long poll answered %v after the write; %v after the registry's watcher", round, at.Sub(start), agentShare)
			if agentShare > 100*time.Millisecond {
				t.Errorf("the long poll answered %v after the registry delivered the change", agentShare)
			}
			if e2e := at.Sub(start); e2e > time.Second {
				t.Errorf("the long poll answered %v after the write", e2e)
			}
			cur = f.instances("api", "")
			if _, ok := (registry.Snapshot{Instances: cur.Instances}).Find(id); !ok {
				t.Fatalf("after the long poll the list lacks %s: %+v", id, cur)
			}
		}
	})
}

// watchNext starts a watcher on the registry the agent uses — the same
// shared cache — and returns when it delivers a state past cur.
func watchNext(t *testing.T, f *fixture, cur agent.Instances) <-chan time.Time {
	t.Helper()
	w, err := f.agent.Registry().Watch(context.Background(), "api")
	if err != nil {
		t.Fatal(err)
	}
	s, err := w.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan time.Time, 1)
	go func() {
		defer w.Close()
		for s.SameInstances(registry.Snapshot{Instances: cur.Instances}) {
			if s, err = w.Next(context.Background()); err != nil {
				break
			}
		}
		out <- time.Now()
	}()
	return out
}

// TestRegistryDown: killing the registry flags the lists stale — the
// instances endpoint and the dashboard state — and picks go on from the
// last good list: not one fails.
func TestRegistryDown(t *testing.T) {
	onBackends(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, agent.Config{})
		for _, id := range []string{"a", "b"} {
			f.register(registry.Instance{ID: id, Service: "api", Address: "10.0.0.1:80"})
		}
		f.waitInstances("api", 10*time.Second, has(2))
		stop := make(chan struct{})
		var failed, served, stale int
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // picks all along, before, during and after the kill
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var p agent.PickResponse
				if st, err := post(f.url+"/v1/pick", agent.PickRequest{Service: "api"}, &p); st != http.StatusOK || err != nil {
					failed++
					continue
				}
				served++
				if p.Stale {
					stale++
				}
				if st, err := post(f.url+"/v1/report", agent.ReportRequest{Token: p.Token, Outcome: "success", LatencyMS: 1}, nil); st != http.StatusNoContent || err != nil {
					failed++
				}
			}
		}()
		b.kill()
		killed := time.Now()
		got := f.waitInstances("api", 15*time.Second, func(in agent.Instances) bool { return in.Stale })
		t.Logf("stale flag %v after the kill", time.Since(killed))
		if len(got.Instances) != 2 {
			t.Errorf("stale list has %d instances, want the last 2", len(got.Instances))
		}
		if !f.agent.State().Stale {
			t.Error("the dashboard state is not stale")
		}
		for range 200 { // and more picks while it is known to be down
			p := f.pick(agent.PickRequest{Service: "api"})
			if !p.Stale {
				t.Fatal("a pick from a stale list is not flagged stale")
			}
			f.report(p.Token, "success", 1)
		}
		close(stop)
		wg.Wait()
		if failed > 0 || stale == 0 {
			t.Errorf("%d picks failed, %d served (%d stale) while the registry went down", failed, served, stale)
		}
	})
}
