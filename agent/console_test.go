package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roster-go/roster/agent"
	_ "github.com/roster-go/roster/backends/consul"
	_ "github.com/roster-go/roster/backends/kubernetes"
	_ "github.com/roster-go/roster/backends/nats"
	_ "github.com/roster-go/roster/backends/zookeeper"
	"github.com/roster-go/roster/internal/servers/consultest"
	"github.com/roster-go/roster/internal/servers/kubetest"
	"github.com/roster-go/roster/internal/servers/natstest"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/internal/servers/zktest"
	"github.com/roster-go/roster/registry"
)

// logBuffer is a slog destination that tests read while the agent logs.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// count returns how many lines hold all of subs.
func (b *logBuffer) count(subs ...string) int {
	n := 0
	for _, line := range strings.Split(b.String(), "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			n++
		}
	}
	return n
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("%s: not after %v", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// action posts an action as the console does and returns the status and
// the error answer.
func action(t *testing.T, url, name, body string, header ...string) (int, agent.Error) {
	t.Helper()
	req, err := http.NewRequest("POST", url+"/v1/actions/"+name, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e agent.Error
	if resp.StatusCode/100 != 2 {
		decodeBody(t, resp, &e)
	} else {
		resp.Body.Close()
	}
	return resp.StatusCode, e
}

// TestActionsRefusedUnlessAllowed: by default every action answers 403
// naming --allow-actions, is logged, and changes nothing.
func TestActionsRefusedUnlessAllowed(t *testing.T) {
	var logs logBuffer
	f := newMemFixture(t, agent.Config{Logger: logs.logger()})
	var in registry.Instance
	if st := do(t, "POST", f.url+"/v1/register", agent.RegisterRequest{Instance: registry.Instance{Service: "api", Address: "10.0.0.1:80"}}, &in); st != http.StatusOK {
		t.Fatalf("register: %d", st)
	}
	for _, name := range []string{"drain", "maint", "restore", "deregister"} {
		st, e := action(t, f.url, name, fmt.Sprintf(`{"service":"api","id":%q}`, in.ID))
		if st != http.StatusForbidden || !strings.Contains(e.Error, "--allow-actions") || e.Code != "forbidden" {
			t.Errorf("%s: %d %+v, want 403 naming --allow-actions", name, st, e)
		}
	}
	got := f.waitInstances("api", 5*time.Second, has(1))
	if got.Instances[0].Weight != in.Weight {
		t.Errorf("weight %d after refused actions, want %d", got.Instances[0].Weight, in.Weight)
	}
	if n := logs.count("action refused", "actions disabled"); n != 4 {
		t.Errorf("%d refusals logged, want 4:\n%s", n, logs.String())
	}
}

// TestActionsInput: bad bodies answer 400 naming the field; a form or
// text body 415; another origin 403; an unknown action 404. Nothing is
// written.
func TestActionsInput(t *testing.T) {
	f := newMemFixture(t, agent.Config{AllowActions: true, Logger: slog.New(slog.DiscardHandler)})
	lease := f.register(registry.Instance{ID: "a", Service: "api", Address: "10.0.0.1:80", Weight: 100})
	defer lease.Deregister(context.Background())
	for _, c := range []struct {
		name, body string
		status     int
		field      string
	}{
		{"drain", `{"service":"API!","id":"a"}`, 400, "service"},
		{"drain", `{"service":"api"}`, 400, "id"},
		{"drain", `{"service":"api","id":"a","weight":5}`, 400, "weight"},
		{"weight", `{"service":"api","id":"a"}`, 400, "weight"},
		{"weight", `{"service":"api","id":"a","weight":-1}`, 400, "request body"},
		{"drain", `{"service":"api","id":"a","extra":1}`, 400, "extra"},
		{"drain", `not json`, 400, "request body"},
		{"explode", `{"service":"api","id":"a"}`, 404, "explode"},
		{"weight", `{"service":"api","id":"a","weight":70000}`, 400, "weight"},
	} {
		st, e := action(t, f.url, c.name, c.body)
		if st != c.status || !strings.Contains(e.Error, c.field) {
			t.Errorf("%s %s: %d %q, want %d naming %q", c.name, c.body, st, e.Error, c.status, c.field)
		}
	}
	st, e := action(t, f.url, "drain", `{"service":"api","id":"a"}`, "Content-Type", "text/plain")
	if st != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain body: %d %+v, want 415", st, e)
	}
	st, e = action(t, f.url, "drain", `{"service":"api","id":"a"}`, "Origin", "http://evil.example")
	if st != http.StatusForbidden || !strings.Contains(e.Error, "cross-origin") {
		t.Errorf("cross-origin: %d %+v, want 403", st, e)
	}
	if got := f.waitInstances("api", 5*time.Second, has(1)); got.Instances[0].Weight != 100 {
		t.Errorf("weight %d after refused actions, want 100", got.Instances[0].Weight)
	}
}

// startConsul is a real Consul agent. Its blocking queries wait 5s at
// most, so the wait-timeout path runs during the test too.
func startConsul(t *testing.T) backend {
	a := consultest.Start(t)
	return backend{url: a.URL("wait=5s"), kill: a.Stop}
}

// The other registering backends, for the actions: servers of their own,
// stopped at the end of the test.
func startZK(t *testing.T) backend {
	return backend{url: zktest.Start(t).URL("/agent-actions", "session_timeout=3s")}
}

func startNATS(t *testing.T) backend {
	return backend{url: natstest.Start(t).URL("bucket=agent-actions")}
}

func startKube(t *testing.T) backend {
	srv, err := kubetest.Start(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	u, err := srv.URL(srv.Addr(), "default", "sweep_interval=1s", "request_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	return backend{url: u}
}

// TestActionsThroughOverrides, on every registering backend: drain, weight,
// maintenance, restore and deregister an instance another process
// registered. Drain takes it out of picks within a second while it stays
// registered; maintenance leaves it out of the list while its owner
// heartbeats; deregister removes it for good. Each action is logged.
func TestActionsThroughOverrides(t *testing.T) {
	for name, start := range map[string]func(*testing.T) backend{"redis": startRedis, "etcd": startEtcd, "consul": startConsul,
		"zookeeper": startZK, "nats": startNATS, "kubernetes": startKube} {
		t.Run(name, func(t *testing.T) { testActionsThroughOverrides(t, start(t)) })
	}
}

func testActionsThroughOverrides(t *testing.T, b backend) {
	var logs logBuffer
	f := newFixture(t, b, agent.Config{AllowActions: true, Logger: logs.logger()})
	owner := f.register(registry.Instance{ID: "a", Service: "api", Address: "10.0.0.1:80", Weight: 100})
	f.register(registry.Instance{ID: "b", Service: "api", Address: "10.0.0.2:80", Weight: 100})
	f.waitInstances("api", 10*time.Second, has(2))
	weight := func(id string, w uint32) func(agent.Instances) bool {
		return func(l agent.Instances) bool {
			for _, x := range l.Instances {
				if x.ID == id {
					return x.Weight == w
				}
			}
			return false
		}
	}
	absent := func(id string) func(agent.Instances) bool {
		return func(l agent.Instances) bool {
			for _, x := range l.Instances {
				if x.ID == id {
					return false
				}
			}
			return true
		}
	}
	start := time.Now()
	if st, e := action(t, f.url, "drain", `{"service":"api","id":"a"}`); st != 200 {
		t.Fatalf("drain: %d %+v", st, e)
	}
	if d := outOfPicks(t, f, "a", start); d > time.Second {
		t.Errorf("drained instance out of picks only %v after the drain, want within a second", d)
	} else {
		t.Logf("drained instance out of picks %v after the drain", d)
	}
	f.waitInstances("api", time.Second, weight("a", 0)) // still registered
	if st, e := action(t, f.url, "weight", `{"service":"api","id":"a","weight":7}`); st != 200 {
		t.Fatalf("weight: %d %+v", st, e)
	}
	f.waitInstances("api", time.Second, weight("a", 7))
	if st, e := action(t, f.url, "maint", `{"service":"api","id":"a"}`); st != 200 {
		t.Fatalf("maint: %d %+v", st, e)
	}
	f.waitInstances("api", time.Second, absent("a"))
	if owner.State() != registry.LeaseHealthy {
		t.Errorf("owner's lease %v in maintenance, want healthy: it heartbeats on", owner.State())
	}
	if st, e := action(t, f.url, "restore", `{"service":"api","id":"a"}`); st != 200 {
		t.Fatalf("restore: %d %+v", st, e)
	}
	f.waitInstances("api", time.Second, weight("a", 100))
	if st, e := action(t, f.url, "deregister", `{"service":"api","id":"a"}`); st != 200 {
		t.Fatalf("deregister: %d %+v", st, e)
	}
	f.waitInstances("api", time.Second, absent("a"))
	ovs, err := f.writer.Overrides(context.Background(), "api")
	if err != nil || len(ovs) != 1 || !ovs[0].Deregistered {
		t.Errorf("overrides after deregister: %+v, %v; want one, deregistered", ovs, err)
	}
	for _, a := range []string{"drain", "weight", "maint", "restore", "deregister"} {
		if n := logs.count("action done", "action="+a, "service=api", "id=a"); n != 1 {
			t.Errorf("action %s logged %d times, want 1:\n%s", a, n, logs.String())
		}
	}
}

// TestRegistryUpDownLogged, on real Redis: the agent logs the registry
// going down once however many calls fail, and coming back once.
func TestRegistryUpDownLogged(t *testing.T) {
	var logs logBuffer
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr() + "/0?dial_timeout=300ms&read_timeout=500ms"
	reg, err := registry.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	f := serve(t, reg, reg, agent.Config{Logger: logs.logger(), ProbeInterval: 50 * time.Millisecond})
	eventually(t, 5*time.Second, "registry up logged", func() bool { return logs.count("registry up") == 1 })
	srv.Kill()
	d := eventually(t, 10*time.Second, "registry down logged", func() bool { return logs.count("level=WARN", "registry down") == 1 })
	t.Logf("down logged %v after the kill", d)
	for range 5 { // more failing calls: no more lines
		var out struct{}
		do(t, "GET", f.url+"/v1/services", nil, &out)
	}
	if err := srv.Restart(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "registry up logged again", func() bool { return logs.count("registry up", "down_for=") == 1 })
	if n := logs.count("registry down"); n != 1 {
		t.Errorf("registry down logged %d times, want once:\n%s", n, logs.String())
	}
	var st struct {
		Health struct{ Known, Up bool } `json:"health"`
	}
	do(t, "GET", f.url+"/v1/console", nil, &st)
	if !st.Health.Known || !st.Health.Up {
		t.Errorf("console health %+v after the restart", st.Health)
	}
}

// consoleState is the part of GET /v1/console the tests read.
type consoleState struct {
	Catalog struct {
		Known              bool
		Total, Page, Pages int
	} `json:"catalog"`
	Services []struct {
		Service   string `json:"service"`
		Loading   bool   `json:"loading"`
		Instances []struct {
			ID string `json:"id"`
		} `json:"instances"`
		History []struct{ Kind, ID, Detail string } `json:"history"`
	} `json:"services"`
}

// TestConsoleCatalogPages: the console lists the whole catalog, not only
// followed services, in pages, searched by name; bad paging is a 400
// naming the parameter.
func TestConsoleCatalogPages(t *testing.T) {
	f := newMemFixture(t, agent.Config{})
	for i := range 25 {
		f.register(registry.Instance{Service: fmt.Sprintf("api-%02d", i), Address: fmt.Sprintf("10.0.0.%d:80", i+1)})
	}
	f.register(registry.Instance{Service: "web", Address: "10.0.1.1:80"})
	var st consoleState
	eventually(t, 5*time.Second, "the catalog", func() bool {
		do(t, "GET", f.url+"/v1/console?size=10&page=3", nil, &st)
		return st.Catalog.Total == 26
	})
	if st.Catalog.Pages != 3 || len(st.Services) != 6 || st.Services[0].Service != "api-20" || st.Services[5].Service != "web" {
		t.Errorf("page 3 of 10: %+v", st)
	}
	do(t, "GET", f.url+"/v1/console?q=WEB", nil, &st)
	if st.Catalog.Total != 1 || len(st.Services) != 1 || st.Services[0].Service != "web" {
		t.Errorf("q=WEB: %+v", st)
	}
	for _, q := range []string{"page=0", "size=101", "page=x", "q=" + strings.Repeat("a", 201)} {
		var e agent.Error
		name, _, _ := strings.Cut(q, "=")
		if s := do(t, "GET", f.url+"/v1/console?"+q, nil, &e); s != 400 || !strings.Contains(e.Error, name) {
			t.Errorf("?%s: %d %+v, want 400 naming %s", q[:min(len(q), 12)], s, e, name)
		}
	}
}

// TestConsoleHistory: a service's history records joins, leaves and
// weight changes as the agent sees them.
func TestConsoleHistory(t *testing.T) {
	f := newMemFixture(t, agent.Config{})
	a := f.register(registry.Instance{ID: "a", Service: "api", Address: "10.0.0.1:80", Weight: 100})
	b := f.register(registry.Instance{ID: "b", Service: "api", Address: "10.0.0.2:80"})
	var st consoleState
	eventually(t, 5*time.Second, "api listed", func() bool {
		do(t, "GET", f.url+"/v1/console", nil, &st)
		return len(st.Services) == 1 && !st.Services[0].Loading
	})
	if err := b.Deregister(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.register(registry.Instance{ID: "c", Service: "api", Address: "10.0.0.3:80"})
	if err := a.SetWeight(context.Background(), 5); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"left b": true, "joined c": true, "weight a 100 → 5": true}
	eventually(t, 5*time.Second, "the changes in the history", func() bool {
		do(t, "GET", f.url+"/v1/console", nil, &st)
		seen := 0
		for _, c := range st.Services[0].History {
			s := c.Kind + " " + c.ID
			if c.Kind == "weight" {
				s += " " + c.Detail
			}
			if want[s] {
				seen++
			}
		}
		return seen == len(want)
	})
	// Failures reported through the agent eject an instance: the history
	// says so.
	eventually(t, 10*time.Second, "a quarantine in the history", func() bool {
		p := f.pick(agent.PickRequest{Service: "api"})
		f.report(p.Token, "failure", 1)
		do(t, "GET", f.url+"/v1/console", nil, &st)
		for _, c := range st.Services[0].History {
			if c.Kind == "quarantined" {
				return true
			}
		}
		return false
	})
}
