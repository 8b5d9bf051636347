package redis_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

// clusterConformance runs the suite on a 3-master cluster, with either
// layout, then clusterScale on the same cluster.
func clusterConformance(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	t.Run("hash", func(t *testing.T) { conformance.Run(t, c.Harness(t, hash, hashCfg)) })
	t.Run("keys", func(t *testing.T) { conformance.Run(t, c.Harness(t, keys, keysCfg)) })
	t.Run("Scale", func(t *testing.T) { clusterScale(t, c) })
}

// clusterScale, on a 3-master Redis Cluster: 200 instances across 20
// services registered through one registry, watched through another,
// converge; half leave and the watchers converge again; with the hash
// layout, the other half crash and the sweeps announce it. The keys layout
// lists across masters.
func clusterScale(t *testing.T, c *redistest.Cluster) {
	ctx := t.Context()
	seeds := strings.Join(c.Addrs(), ",")
	for _, layout := range []string{"hash", "keys"} {
		t.Run(layout, func(t *testing.T) {
			q := "?layout=" + layout + "&poll=200ms"
			r := open(t, "redis+cluster://"+seeds+q)
			obs := open(t, "redis+cluster://"+c.Addrs()[0]+q) // one seed is enough
			const services, per = 20, 10
			n := services * per
			if layout == "keys" {
				n = 4 * per // SCAN-based: a smaller check is enough
			}
			ws := map[string]*registry.Watcher{}
			for i := 0; i < n/per; i++ {
				svc := fmt.Sprintf("cl-%s-%02d", layout, i)
				w, err := obs.Watch(ctx, svc)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = w.Close() })
				ws[svc] = w
			}
			leases := make([]*registry.Lease, n)
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					svc := fmt.Sprintf("cl-%s-%02d", layout, i/per)
					l, err := r.Register(ctx, registry.Instance{Service: svc, Address: fmt.Sprintf("10.1.%d.%d:80", i/per, i%per)}, registry.WithTTL(5*time.Second))
					if err != nil {
						errs <- err
						return
					}
					leases[i] = l
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			converge := func(want int) {
				t.Helper()
				for svc, w := range ws {
					wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					for {
						s, err := w.Next(wctx)
						if err != nil && !s.Stale {
							cancel()
							t.Fatalf("%s: %d instances wanted, watcher: %v", svc, want, err)
						}
						if !s.Stale && len(s.Instances) == want {
							break
						}
					}
					cancel()
				}
			}
			converge(per)
			all, err := obs.Services(ctx)
			if err != nil || len(all) != n/per {
				t.Fatalf("Services = %d names (%v), want %d", len(all), err, n/per)
			}
			for i := 0; i < n; i += 2 {
				if err := leases[i].Deregister(ctx); err != nil {
					t.Fatal(err)
				}
			}
			converge(per / 2)
			if layout == "hash" {
				// Crashes: the sweeper's scripts run per hash slot.
				for i := 1; i < n; i += 2 {
					leases[i].Abandon()
				}
				converge(0)
			}
		})
	}
}
