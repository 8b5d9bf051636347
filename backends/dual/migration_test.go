package dual_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/urls"

	_ "github.com/roster-go/roster/backends/consul" // consul:// for the old side
	_ "github.com/roster-go/roster/backends/dual"
	_ "github.com/roster-go/roster/backends/etcd" // etcd:// for the new side
	"github.com/roster-go/roster/internal/servers/consultest"
	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
)

// dualURL is the configuration of deploy 1 (prefer "old") and 2 ("new").
func dualURL(oldURL, newURL, prefer string) string {
	return "dual://?" + url.Values{"old": {oldURL}, "new": {newURL}, "prefer": {prefer}}.Encode()
}

// TestMigrateConsulToEtcd moves a service of three instances from Consul
// to etcd in the three deploys of docs/migration.md — dual-write with
// reads preferring Consul, reads preferring etcd, etcd alone — each a
// rolling restart of the instances and then of the client, under
// continuous load, with no failed call. The migration runs three times,
// one service each, on the same servers.
func TestMigrateConsulToEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	agent := consultest.Start(t)
	cl, err := etcdtest.Start(ctx, etcdtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	oldURL, newURL := agent.URL(""), cl.URL("/migrate")
	deploys := []deploy{
		{url: oldURL, on: []string{oldURL}, off: []string{newURL}},
		// While both are written, the new backend restarts empty: the
		// instances are written there again, and no call fails.
		{url: dualURL(oldURL, newURL, "old"), on: []string{oldURL, newURL}, fault: func() error { return cl.Restart(ctx, false) }},
		{url: dualURL(oldURL, newURL, "new"), on: []string{oldURL, newURL}},
		{url: newURL, on: []string{newURL}, off: []string{oldURL}},
	}
	for round := 1; round <= 3; round++ {
		m := &migration{t: t, ctx: ctx, service: fmt.Sprintf("api-%d", round)}
		m.run(deploys)
		if m.failed.Load() > 0 || m.calls.Load() == 0 {
			t.Fatalf("round %d: %d of %d calls failed; first: %v", round, m.failed.Load(), m.calls.Load(), m.firstErr)
		}
		t.Logf("round %d: %d calls, none failed", round, m.calls.Load())
		m.check(nil, []string{newURL, oldURL})
	}
}

// deploy is one configuration: the URL of its processes, and the
// registries its instances must (on) and must not (off) be written to.
type deploy struct {
	url     string
	on, off []string
	fault   func() error // run once the deploy is out, if not nil
}

// migration is one service moved through the deploys under load.
type migration struct {
	t       *testing.T
	ctx     context.Context
	service string

	swap      sync.RWMutex // held for reading by every call, for writing to replace the client
	client    atomic.Pointer[middleware.Client]
	calls     atomic.Int64
	failed    atomic.Int64
	errOnce   sync.Once
	firstErr  error
	instances []*instance
}

// instance is one process of the service: an HTTP server registered
// through a registry opened on the deploy's URL.
type instance struct {
	srv   *httptest.Server
	reg   *registry.Registry
	lease *registry.Lease
}

func (m *migration) run(deploys []deploy) {
	for range 3 {
		m.instances = append(m.instances, m.start(deploys[0].url))
	}
	m.client.Store(m.newClient(deploys[0].url))
	stop := m.load(4)
	for _, d := range deploys[1:] {
		for i, old := range m.instances { // rolling restart: the new one first
			m.instances[i] = m.start(d.url)
			m.stop(old)
		}
		m.check(d.on, d.off)
		if d.fault != nil {
			if err := d.fault(); err != nil {
				m.t.Fatal(err)
			}
			m.check(d.on, d.off)
		}
		next := m.newClient(d.url)
		m.swap.Lock() // the calls in flight on the previous client end first
		prev := m.client.Swap(next)
		m.swap.Unlock()
		prev.Close()
	}
	stop()
	for _, in := range m.instances {
		m.stop(in)
	}
	m.client.Load().Close()
}

func (m *migration) start(rawURL string) *instance {
	t := m.t
	in := &instance{srv: httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))}
	var err error
	if in.reg, err = registry.Open(m.ctx, rawURL); err != nil {
		t.Fatal(err)
	}
	in.lease, err = in.reg.Register(m.ctx, registry.Instance{Service: m.service, Address: in.srv.Listener.Addr().String()},
		registry.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m.waitSeen(in.lease.Instance().ID, true)
	return in
}

// stop shuts an instance down gracefully: deregister, wait until the
// client no longer offers it, then stop serving.
func (m *migration) stop(in *instance) {
	if err := in.lease.Deregister(m.ctx); err != nil {
		m.t.Fatal(err)
	}
	m.waitSeen(in.lease.Instance().ID, false)
	in.srv.Close()
	in.reg.Close()
}

// waitSeen waits until the current client's view holds id (or not).
func (m *migration) waitSeen(id string, want bool) {
	c := m.client.Load()
	if c == nil {
		return
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, _ := c.Snapshot(m.service)
		if _, ok := s.Find(id); ok == want {
			return
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("%s: instance %s seen=%v after 20s, want %v", m.service, id, !want, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// newClient opens the client of a deploy and waits for its first view.
func (m *migration) newClient(rawURL string) *middleware.Client {
	reg, err := registry.Open(m.ctx, rawURL)
	if err != nil {
		m.t.Fatal(err)
	}
	c, err := middleware.NewClient(reg)
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { reg.Close() })
	if err := c.Do(m.ctx, m.service, get); err != nil {
		m.t.Fatalf("%s: the new client's first call: %v", rawURL, err)
	}
	return c
}

func get(ctx context.Context, in registry.Instance) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+in.Address+"/", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}

// load calls the service from workers goroutines through whichever client
// is current until the returned function is called.
func (m *migration) load(workers int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
				m.swap.RLock()
				err := m.client.Load().Do(ctx, m.service, get)
				m.swap.RUnlock()
				cancel()
				m.calls.Add(1)
				if err != nil {
					m.failed.Add(1)
					m.errOnce.Do(func() { m.firstErr = err })
				}
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}

// check waits until the registries on hold every running instance and
// the registries off none of the service's.
func (m *migration) check(on, off []string) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		problem := m.misplaced(on, off)
		if problem == "" {
			return
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("%s after 20s: %s", m.service, problem)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// misplaced says what check waits for, or "".
func (m *migration) misplaced(on, off []string) string {
	for _, u := range slices.Concat(on, off) {
		reg, err := registry.Open(m.ctx, u)
		if err != nil {
			return err.Error()
		}
		s, err := reg.Lookup(m.ctx, m.service)
		reg.Close()
		switch {
		case err != nil:
			return err.Error()
		case slices.Contains(off, u) && len(s.Instances) > 0:
			return fmt.Sprintf("%d instances on %s, want none", len(s.Instances), urls.Redact(u))
		}
		for _, in := range m.instances {
			if _, ok := s.Find(in.lease.Instance().ID); !ok && slices.Contains(on, u) {
				return fmt.Sprintf("instance %s missing from %s", in.lease.Instance().ID, urls.Redact(u))
			}
		}
	}
	return ""
}
