package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	rredis "github.com/roster-go/roster/backends/redis"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

// Many processes watching one service: one of them sweeps it, at most once
// per sweep interval (no deadline falls due here), the others do not. When
// the sweeping process dies without a word — its registry is closed, its
// lease on the sweeper key is left to expire — another takes over in time
// to announce a crashed instance within TTL + sweep + margin, as the
// conformance suite requires.
func TestHashOneSweeperPerService(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	rdb := srv.Client()
	defer rdb.Close()
	const (
		svc      = "elect"
		watchers = 5
		sweep    = 500 * time.Millisecond // lease 1.5s: no scheduler stall of a loaded CI machine passes for a death
		crashTTL = 2 * time.Second
		slack    = sweep + 500*time.Millisecond // as in the conformance suite
		count    = 8                            // sweeps to observe
	)
	owner := open(t, "redis://"+srv.Addr())
	if _, err := owner.Register(ctx, registry.Instance{Service: svc, Address: "127.0.0.1:1"}, registry.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	crash, err := owner.Register(ctx, registry.Instance{Service: svc, Address: "127.0.0.1:2"}, registry.WithTTL(crashTTL))
	if err != nil {
		t.Fatal(err)
	}
	mon := startMonitor(t, srv.Addr())
	regs := make([]*registry.Registry, watchers)
	ws := make([]*registry.Watcher, watchers)
	for i := range regs {
		regs[i] = open(t, fmt.Sprintf("redis://%s?sweep=%v&quiet=1m&client_name=w%d", srv.Addr(), sweep, i))
		if ws[i], err = regs[i].Watch(ctx, svc); err != nil {
			t.Fatal(err)
		}
		defer ws[i].Close()
		if s, err := ws[i].Next(ctx); err != nil || len(s.Instances) != 2 {
			t.Fatalf("watcher %d: %v, %v", i, s.Instances, err)
		}
	}

	_, from := mon.since(0)
	holder := oneSweeper(t, mon, from, count, sweep)
	names := clientNames(ctx, t, rdb)
	h := strings.TrimPrefix(names[holder], "w")
	var hi int
	if _, err := fmt.Sscan(h, &hi); err != nil || hi < 0 || hi >= watchers {
		t.Fatalf("the sweeping client %s is %q, not one of the watchers", holder, names[holder])
	}
	t.Logf("watcher %d sweeps", hi)

	// The holder and an instance die together.
	crash.Abandon()
	crashed := time.Now()
	_ = regs[hi].Close()
	id := crash.Instance().ID
	for i, w := range ws {
		if i == hi {
			continue
		}
		wctx, cancel := context.WithDeadline(ctx, crashed.Add(crashTTL+slack))
		for {
			s, err := w.Next(wctx)
			if err != nil {
				cancel()
				t.Fatalf("watcher %d: crashed instance still listed %v after the sweeper died: %v", i, time.Since(crashed), err)
			}
			if _, ok := s.Find(id); !ok {
				break
			}
		}
		cancel()
	}
	t.Logf("crash announced %v after the holder died (TTL %v)", time.Since(crashed), crashTTL)
	_, from = mon.since(0)
	if next := oneSweeper(t, mon, from, count, sweep); next == holder {
		t.Fatalf("sweeps still come from the closed registry's client %s", next)
	}
}

// oneSweeper waits for n sweeps of the service from index from on and
// checks that one client ran them, none sooner than one interval after the
// previous (some timer slack aside). It returns that client's address.
func oneSweeper(t *testing.T, mon *monitor, from, n int, sweep time.Duration) string {
	t.Helper()
	lines := mon.waitLines(t, from, n, time.Duration(n)*sweep+10*time.Second, "sweeps", func(l monitorLine) bool {
		return l.isScript(rredis.SweepScriptSHA)
	})
	clients := map[string]int{}
	for _, l := range lines {
		clients[l.client]++
	}
	span := lines[n-1].at.Sub(lines[0].at)
	t.Logf("%d sweeps in %v (%.1f/s) by %d clients %v", n, span, float64(n-1)/span.Seconds(), len(clients), clients)
	if len(clients) != 1 {
		t.Fatalf("%d clients swept the service: %v; want one", len(clients), clients)
	}
	// One interval of slack: a sweep may come early when a deadline
	// falls due.
	if min := time.Duration(n-2) * sweep * 8 / 10; span < min {
		t.Fatalf("%d sweeps in %v; at most one per %v wants at least %v", n, span, sweep, min)
	}
	return lines[0].client
}

// One process watching many services sweeps them in batches: a round is
// one script per 128 services, not one per service; between rounds, only
// the services whose earliest deadline falls due are swept, together when
// they fall due together. Crashed instances in every service are
// announced all the same, within TTL + sweep + margin.
func TestHashSweepsBatched(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	const (
		services = 300 // three chunks: 128 + 128 + 44
		sweep    = 300 * time.Millisecond
		ttl      = 1500 * time.Millisecond
		margin   = 2 * time.Second
	)
	r := open(t, "redis://"+srv.Addr())
	obs := open(t, fmt.Sprintf("redis://%s?sweep=%v&quiet=1m", srv.Addr(), sweep))
	ws := make([]*registry.Watcher, services)
	leases := make([]*registry.Lease, services)
	for i := range ws {
		svc := fmt.Sprintf("batch-%03d", i)
		w, err := obs.Watch(ctx, svc)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ws[i] = w
		if leases[i], err = r.Register(ctx, registry.Instance{Service: svc, Address: "10.0.0.1:80"}, registry.WithTTL(ttl)); err != nil {
			t.Fatal(err)
		}
	}
	for i, w := range ws {
		nextWith(ctx, t, w, i, 1)
	}
	mon := startMonitor(t, srv.Addr())
	_, from := mon.since(0)
	start := time.Now()
	for _, l := range leases {
		l.Abandon()
	}
	wctx, cancel := context.WithDeadline(ctx, start.Add(ttl+sweep+margin))
	defer cancel()
	for i, w := range ws {
		nextWith(wctx, t, w, i, 0)
	}
	el := time.Since(start)
	lines, _ := mon.since(from)
	scripts, most := 0, 0
	for _, l := range lines {
		if l.isScript(rredis.SweepScriptSHA) && len(l.args) > 2 {
			keys, _ := strconv.Atoi(l.args[2])
			scripts, most = scripts+1, max(most, keys/4)
		}
	}
	t.Logf("%d crashes in %d services announced in %v by %d sweep scripts (up to %d services each)", services, services, el, scripts, most)
	if most != 128 {
		t.Errorf("the largest sweep script covered %d services; a round of %d held services wants chunks of 128", most, services)
	}
	// Unbatched, each service costs a script per interval and one more
	// for its crash: over 600 here.
	if scripts >= services {
		t.Errorf("%d sweep scripts for %d services in %v; batched sweeps want far fewer", scripts, services, el)
	}
}

// nextWith reads w until it lists n instances.
func nextWith(ctx context.Context, t *testing.T, w *registry.Watcher, i, n int) {
	t.Helper()
	for {
		s, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("watcher %d: %d instances wanted: %v", i, n, err)
		}
		if !s.Stale && len(s.Instances) == n {
			return
		}
	}
}
