package rosterfx_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/fx"

	_ "github.com/roster-go/roster/backends/etcd"
	rosterfx "github.com/roster-go/roster/contrib/rosterfx"
	rosterhttp "github.com/roster-go/roster/contrib/rosterhttp"
	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// drainWindow for the rolling restarts. etcd delivers a deregistration to
// watchers in milliseconds; a second leaves room for a loaded 2-core
// machine under -race.
const drainWindow = time.Second

// instance is one process of the service: start and stop it.
type instance interface {
	start(t *testing.T)
	stop(t *testing.T)
}

// fxInstance is an fx app: server + rosterfx.Announce, so it starts and
// stops in the graceful order (listen → healthy → register; deregister →
// drain window → stop).
type fxInstance struct {
	url, name string
	app       *fx.App
}

func (in *fxInstance) start(t *testing.T) {
	srv := newTestServer(in.name)
	in.app = startApp(t, fx.Supply(rosterfx.Config{URL: in.url}), rosterfx.Module, srv.provide(), announce("echo", drainWindow, false))
}

func (in *fxInstance) stop(t *testing.T) { stopApp(t, in.app) }

// reversedInstance does the same steps with the stop order reversed, as a
// process that exits before deregistering: the server stops, the drain
// window passes, and only then is the instance deregistered.
type reversedInstance struct {
	reg   *registry.Registry
	name  string
	srv   *testServer
	lease *registry.Lease
}

func (in *reversedInstance) start(t *testing.T) {
	in.srv = newTestServer(in.name)
	if err := in.srv.listen(); err != nil {
		t.Fatal(err)
	}
	var err error
	in.lease, err = in.reg.Register(context.Background(), registry.Instance{Service: "echo", Address: in.srv.Addr(),
		Metadata: map[string]string{"name": in.name}}, registry.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
}

func (in *reversedInstance) stop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := in.srv.shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(drainWindow) // the same window, at the wrong moment
	if err := in.lease.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
}

// httpLoad sends GET http://echo/ at a steady pace from a few workers.
type httpLoad struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	firstErr   error
	stop       chan struct{}
	wg         sync.WaitGroup
}

func startHTTPLoad(hc *http.Client, workers int, pace time.Duration) *httpLoad {
	l := &httpLoad{stop: make(chan struct{})}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			tick := time.NewTicker(pace)
			defer tick.Stop()
			for {
				select {
				case <-l.stop:
					return
				case <-tick.C:
				}
				err := getOnce(hc)
				if err == nil {
					l.ok.Add(1)
					continue
				}
				l.failed.Add(1)
				l.mu.Lock()
				if l.firstErr == nil {
					l.firstErr = err
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func getOnce(hc *http.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://echo/", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

func (l *httpLoad) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

func (l *httpLoad) progressed(t *testing.T, n int64) {
	t.Helper()
	target := l.ok.Load() + n
	waitFor(t, 20*time.Second, fmt.Sprintf("%d more successful requests", n), func() bool { return l.ok.Load() >= target })
}

// rollingRestart restarts each of three instances in turn under a steady
// load from a client in its own "process" (its own registry connection),
// with retries and quarantine off: every request that meets a stopped
// instance fails visibly. It returns the failures.
func rollingRestart(t *testing.T, newInstance func(reg *registry.Registry, url string, i int) instance) (ok, failed int64, first error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cluster, err := etcdtest.Start(ctx, etcdtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	url := cluster.URL("/"+t.Name(), "progress_interval=1s")
	open := func() *registry.Registry {
		reg, err := registry.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		return reg
	}
	srvReg := open()
	defer srvReg.Close()
	insts := make([]instance, 3)
	for i := range insts {
		insts[i] = newInstance(srvReg, url, i)
		insts[i].start(t)
	}

	cliReg := open()
	defer cliReg.Close()
	// No retry, no quarantine: nothing hides a request sent to a dead
	// instance.
	mc, err := middleware.NewClient(cliReg, middleware.WithMiddleware(),
		middleware.WithSelector(selector.WithStrategy(selector.RoundRobin)))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: &rosterhttp.Transport{Client: mc, Base: tr}}

	l := startHTTPLoad(hc, 4, 5*time.Millisecond)
	defer l.end()
	l.progressed(t, 100)
	for i := range insts {
		insts[i].stop(t)
		insts[i] = newInstance(srvReg, url, i)
		insts[i].start(t)
		l.progressed(t, 100)
	}
	l.end()
	for _, in := range insts {
		in.stop(t)
	}
	return l.ok.Load(), l.failed.Load(), l.firstErr
}

// TestRollingRestartGraceful: three instances restarted in turn with
// rosterfx's order (deregister, wait, stop; listen, healthy, register)
// under load lose no request, with client retries disabled.
func TestRollingRestartGraceful(t *testing.T) {
	ok, failed, first := rollingRestart(t, func(_ *registry.Registry, url string, i int) instance {
		return &fxInstance{url: url, name: fmt.Sprintf("i%d", i)}
	})
	t.Logf("graceful order: %d requests ok, %d failed", ok, failed)
	if failed != 0 {
		t.Fatalf("%d of %d requests failed during a graceful rolling restart (first: %v)", failed, ok+failed, first)
	}
}

// TestRollingRestartReversedOrderFails is the counter-experiment: the
// same restarts with the stop order reversed (server stopped, then the
// window, then deregistration). Clients keep routing to the stopped
// instance until the deregistration reaches them, and with retries
// disabled (as above) those requests fail. This is why the order
// matters; with retries on, they would be hidden at the cost of extra
// attempts and latency.
func TestRollingRestartReversedOrderFails(t *testing.T) {
	ok, failed, first := rollingRestart(t, func(reg *registry.Registry, _ string, i int) instance {
		return &reversedInstance{reg: reg, name: fmt.Sprintf("i%d", i)}
	})
	t.Logf("reversed order: %d requests ok, %d failed (first: %v)", ok, failed, first)
	if failed == 0 {
		t.Fatal("no request failed with the stop order reversed: the test no longer shows why the order matters")
	}
}
