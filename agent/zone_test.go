package agent_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roster-go/roster/agent"
	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
)

// zoneBackend is a real HTTP server behind a registered instance.
type zoneBackend struct {
	srv    *httptest.Server
	hits   atomic.Int64
	status atomic.Int32
}

// TestZoneFailoverThroughAgent is the zone probe of issue 27 through the
// agent's HTTP pick API on a real etcd: an agent in zone a of region r1,
// zone a's two instances answering 503 to every call, zone b's two (r1)
// and zone c's two (r2) healthy. A caller makes each call with up to
// three attempts, naming the instances it tried, as a PHP client with a
// retry would. The agent's quarantine ejects zone a, the picks go to
// zone b, none to region r2, and when zone a recovers its probes bring
// the traffic back.
func TestZoneFailoverThroughAgent(t *testing.T) {
	f := newFixture(t, startEtcd(t), agent.Config{Zone: "a", Region: "r1",
		Quarantine: middleware.QuarantineConfig{BaseEjection: 300 * time.Millisecond}})
	byZone := map[string][]*zoneBackend{}
	byAddr := map[string]*zoneBackend{}
	for _, loc := range [][2]string{{"a", "r1"}, {"a", "r1"}, {"b", "r1"}, {"b", "r1"}, {"c", "r2"}, {"c", "r2"}} {
		b := &zoneBackend{}
		b.status.Store(http.StatusOK)
		b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b.hits.Add(1)
			w.WriteHeader(int(b.status.Load()))
		}))
		t.Cleanup(b.srv.Close)
		addr := b.srv.Listener.Addr().String()
		f.register(registry.Instance{Service: "api", Address: addr, Zone: loc[0], Region: loc[1]})
		byZone[loc[0]] = append(byZone[loc[0]], b)
		byAddr[addr] = b
	}
	f.waitInstances("api", 10*time.Second, has(6))
	hits := func(z string) int64 { return byZone[z][0].hits.Load() + byZone[z][1].hits.Load() }
	setZone := func(z string, status int32) {
		for _, b := range byZone[z] {
			b.status.Store(status)
		}
	}
	// call makes one call of up to three attempts and reports each.
	call := func() bool {
		var tried []string
		for range 3 {
			p := f.pick(agent.PickRequest{Service: "api", Tried: tried})
			start := time.Now()
			resp, err := http.Get("http://" + p.Endpoint.Address + "/")
			ok := err == nil && resp.StatusCode == http.StatusOK
			if err == nil {
				resp.Body.Close()
			}
			outcome := "failure"
			if ok {
				outcome = "success"
			}
			f.report(p.Token, outcome, float64(time.Since(start).Microseconds())/1000)
			if ok {
				return true
			}
			if byAddr[p.Endpoint.Address] == nil {
				t.Fatalf("picked %s, not a registered backend", p.Endpoint.Address)
			}
			tried = append(tried, p.Instance.ID)
		}
		return false
	}
	failover := func(phase string) {
		t.Helper()
		a0, b0, c0 := hits("a"), hits("b"), hits("c")
		failed := 0
		for range 400 {
			if !call() {
				failed++
			}
		}
		da, db, dc := hits("a")-a0, hits("b")-b0, hits("c")-c0
		t.Logf("%s: %d of 400 calls failed; zone a took %d attempts, zone b (r1) %d, zone c (r2) %d", phase, failed, da, db, dc)
		// 99.5% of 400: two calls may fail.
		if failed > 2 {
			t.Fatalf("%s: %d of 400 calls failed", phase, failed)
		}
		if da > 30 || db < 398 || dc != 0 {
			t.Fatalf("%s: zone a took %d attempts, zone b %d, zone c %d; want the first few failures, about 400, none", phase, da, db, dc)
		}
	}
	setZone("a", http.StatusServiceUnavailable)
	failover("zone a failing")

	setZone("a", http.StatusOK)
	// The ejections end, the probes succeed, zone a is back: a window of
	// 100 calls that all go there.
	deadline := time.Now().Add(30 * time.Second)
	for {
		a0 := hits("a")
		for range 100 {
			if !call() {
				t.Fatal("recovery: a call failed with every instance healthy")
			}
		}
		if hits("a")-a0 == 100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("zone a took %d of the last 100 calls 30 s after it recovered", hits("a")-a0)
		}
		time.Sleep(50 * time.Millisecond) // wall time for the ejections to end
	}

	setZone("a", http.StatusServiceUnavailable)
	failover("zone a failing again")
}

// TestLocalityConfigRefused: a region without a zone, or a zone that is
// not printable text of at most 128 bytes, is an error naming the field.
func TestLocalityConfigRefused(t *testing.T) {
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	defer reg.Close()
	for _, c := range []struct {
		cfg  agent.Config
		want string
	}{
		{agent.Config{Region: "r1"}, "Config.Region"},
		{agent.Config{Zone: "a\nb"}, "Config.Zone"},
		{agent.Config{Zone: "a", Region: strings.Repeat("r", 129)}, "Config.Region"},
	} {
		c.cfg.Registry = reg
		a, err := agent.New(c.cfg)
		if err == nil {
			a.Close()
		}
		if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(zone %q, region %q): %v, want ErrInvalid naming %s", c.cfg.Zone, c.cfg.Region, err, c.want)
		}
	}
}
