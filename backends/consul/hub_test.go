package consul_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/roster-go/roster/registry"
)

// One process watching 1,000 services, against an agent with Consul's
// default limit of 200 connections per client: the watches share two
// catalog-wide blocking queries, so the process stays within 32
// connections and is never refused (429); registrations, updates and
// deregistrations of any of the services reach their watchers.
func TestManyWatchesFewConnections(t *testing.T) {
	a := defaultLimitAgent(t)
	ctx := t.Context()
	conns := countConns(t, a.Addr())
	r, err := registry.Open(ctx, a.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	obs, err := registry.Open(ctx, a.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	const services = 1000
	ws := make([]*registry.Watcher, services)
	for i := range ws {
		if ws[i], err = obs.Watch(ctx, fmt.Sprintf("many-%04d", i)); err != nil {
			t.Fatal(err)
		}
		defer ws[i].Close()
	}
	for i, w := range ws {
		if s, err := w.Next(ctx); err != nil || len(s.Instances) != 0 {
			t.Fatalf("watcher %d: %v, %v", i, s.Instances, err)
		}
	}
	t.Logf("1,000 watches open: peak %d connections", conns.peak.Load())
	for _, i := range []int{0, services / 2, services - 1} {
		w := ws[i]
		l, err := r.Register(ctx, registry.Instance{Service: fmt.Sprintf("many-%04d", i), Address: "10.0.0.1:80"}, registry.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if s, err := w.Next(ctx); err != nil || len(s.Instances) != 1 {
			t.Fatalf("watcher %d after register: %v, %v", i, s.Instances, err)
		}
		if err := l.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		if s, err := w.Next(ctx); err != nil || len(s.Instances) != 1 || s.Instances[0].Weight != 0 {
			t.Fatalf("watcher %d after drain: %v, %v", i, s.Instances, err)
		}
		start := time.Now()
		if err := l.Deregister(ctx); err != nil {
			t.Fatal(err)
		}
		if s, err := w.Next(ctx); err != nil || len(s.Instances) != 0 {
			t.Fatalf("watcher %d after deregister: %v, %v", i, s.Instances, err)
		}
		t.Logf("service %d: deregister reached its watcher in %v", i, time.Since(start))
	}
	peak := conns.peak.Load()
	t.Logf("peak %d connections to the agent", peak)
	if peak > 32 {
		t.Errorf("peak %d connections for 1,000 watched services, want ≤ 32", peak)
	}
}
