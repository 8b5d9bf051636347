package rosterhttp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/roster-go/roster/backends/etcd"
	"github.com/roster-go/roster/contrib/rosterhttp"
	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// zoned is an instance in a zone that answers status.
type zoned struct {
	hits   atomic.Int64
	status atomic.Int32
}

// TestZoneFailoverOnEtcd is issue 27's zone probe through the Transport:
// a caller in zone a, zone a's two instances answering 503 to every
// request, zone b's two healthy, on a real etcd. The requests fail over
// to zone b within the first few failures, and come back when zone a
// recovers.
func TestZoneFailoverOnEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := etcdtest.Start(ctx, etcdtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	reg, err := registry.Open(ctx, cl.URL("/zonehttp"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	var a, b [2]*zoned
	for i, zone := range []string{"a", "a", "b", "b"} {
		z := &zoned{}
		z.status.Store(200)
		if zone == "a" {
			a[i] = z
			z.status.Store(503)
		} else {
			b[i-2] = z
		}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			z.hits.Add(1)
			w.WriteHeader(int(z.status.Load()))
		}))
		t.Cleanup(srv.Close)
		if _, err := reg.Register(ctx, registry.Instance{Service: "api", Address: srv.Listener.Addr().String(), Zone: zone}); err != nil {
			t.Fatal(err)
		}
	}
	hits := func(zs [2]*zoned) int64 { return zs[0].hits.Load() + zs[1].hits.Load() }

	q := middleware.NewQuarantine(middleware.QuarantineConfig{BaseEjection: 300 * time.Millisecond})
	mc, err := middleware.NewClient(reg, middleware.WithQuarantine(q),
		middleware.WithSelector(selector.WithLocality("a")))
	if err != nil {
		t.Fatal(err)
	}
	base := &http.Transport{}
	t.Cleanup(func() {
		base.CloseIdleConnections()
		mc.Close()
	})
	hc := &http.Client{Transport: &rosterhttp.Transport{Client: mc, Base: base}, Timeout: 10 * time.Second}
	// get runs n requests on 4 workers and returns how many failed.
	get := func(n int) int {
		var failed, next atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for next.Add(1) <= int64(n) {
					resp, err := hc.Get("http://api/")
					if err != nil {
						failed.Add(1)
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						failed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		return int(failed.Load())
	}

	a0, b0 := hits(a), hits(b)
	failed := get(400)
	if failed > 2 {
		t.Fatalf("zone a failing: %d of 400 requests failed, want at most 2 (99.5%%)", failed)
	}
	if n := hits(a) - a0; n > 30 {
		t.Fatalf("zone a failing: it took %d attempts, want the first few failures only", n)
	}
	if n := hits(b) - b0; n < 398 {
		t.Fatalf("zone a failing: zone b took %d of 400 requests", n)
	}
	t.Logf("zone a failing: %d of 400 requests failed, zone a took %d attempts, zone b %d", failed, hits(a)-a0, hits(b)-b0)

	a[0].status.Store(200)
	a[1].status.Store(200)
	deadline := time.Now().Add(30 * time.Second)
	for {
		a0 := hits(a)
		if n := get(100); n > 0 {
			t.Fatalf("recovery: %d of 100 requests failed", n)
		}
		if hits(a)-a0 == 100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("zone a took %d of the last 100 requests 30 s after it recovered", hits(a)-a0)
		}
		time.Sleep(50 * time.Millisecond) // wall time for the ejections to end
	}
}
