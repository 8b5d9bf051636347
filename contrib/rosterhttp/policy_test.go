package rosterhttp_test

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/roster-go/roster/backends/etcd"
	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/policy"
	"github.com/roster-go/roster/registry"
)

// TestPolicyHashKeyHeader: a service's policy names the header that
// holds the affinity key. A user sticks to one instance, users spread,
// and another service of the same client is not hashed.
func TestPolicyHashKeyHeader(t *testing.T) {
	reg := openMem(t)
	for _, name := range []string{"a", "b", "c", "d"} {
		start(t, reg, "api", name)
		start(t, reg, "other", name)
	}
	p, err := policy.Parse([]byte(`{"strategy": "consistent_hash", "hash_key": "X-User"}`))
	if err != nil {
		t.Fatal(err)
	}
	hc, _ := newHTTPClient(t, reg, middleware.WithPolicy("api", p))
	as := func(service, user string) string {
		req, _ := http.NewRequest("GET", "http://"+service+"/", nil)
		req.Header.Set("X-User", user)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	first := as("api", "user-7")
	for range 200 {
		if got := as("api", "user-7"); got != first {
			t.Fatalf("user-7 went to %s and %s", first, got)
		}
	}
	owners, others := map[string]bool{}, map[string]bool{}
	for i := range 100 {
		owners[as("api", "user-"+string(rune('a'+i%26))+string(rune('a'+i/26)))] = true
		others[as("other", "user-7")] = true
	}
	if len(owners) < 3 {
		t.Errorf("100 users went to %d of 4 instances, want them spread", len(owners))
	}
	if len(others) < 3 {
		t.Errorf("the other service, without a policy, sent user-7 to %d instances: hashed by the wrong policy", len(others))
	}
}

// TestCanaryPolicyOnEtcd: a canary raised 5 % → 50 % → 100 % with
// SetPolicy on a real etcd: each split within 4σ of its binomial, no
// request failed.
func TestCanaryPolicyOnEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := etcdtest.Start(ctx, etcdtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	reg, err := registry.Open(ctx, cl.URL("/canaryhttp"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	var v2 atomic.Int64
	for _, version := range []string{"v1", "v1", "v1", "v2", "v2"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if version == "v2" {
				v2.Add(1)
			}
			io.WriteString(w, version)
		}))
		t.Cleanup(srv.Close)
		if _, err := reg.Register(ctx, registry.Instance{Service: "api", Address: srv.Listener.Addr().String(), Version: version}); err != nil {
			t.Fatal(err)
		}
	}
	hc, mc := newHTTPClient(t, reg)
	const n = 2000
	for _, pct := range []float64{5, 50, 100} {
		p := policy.Policy{Split: []policy.SplitEntry{{Version: "v2", Percent: pct}}}
		if err := mc.SetPolicy("api", p); err != nil {
			t.Fatal(err)
		}
		before := v2.Load()
		var failed, next atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for next.Add(1) <= n {
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
		if f := failed.Load(); f != 0 {
			t.Fatalf("split %v%%: %d of %d requests failed", pct, f, n)
		}
		got, q := float64(v2.Load()-before), pct/100
		sigma := math.Sqrt(n * q * (1 - q))
		if math.Abs(got-n*q) > 4*sigma+0.5 {
			t.Errorf("split %v%%: v2 took %.0f of %d requests, want %.0f ± %.0f", pct, got, n, n*q, 4*sigma)
		}
		t.Logf("split %v%%: v2 took %.0f of %d", pct, got, n)
	}
}
