package rostergokit_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-kit/kit/endpoint"
	"github.com/go-kit/kit/sd"
	"github.com/go-kit/kit/sd/lb"
	"github.com/go-kit/log"

	_ "github.com/roster-go/roster/backends/redis"
	"github.com/roster-go/roster/contrib/rostergokit"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

func openRedis(t *testing.T) (*registry.Registry, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	reg, err := registry.Open(context.Background(), "redis://"+srv.Addr()+"/0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return reg, srv
}

// server is one process of the service: an HTTP server announced through
// the go-kit Registrar.
type server struct {
	srv *http.Server
	reg *rostergokit.Registrar
}

func startServer(t *testing.T, reg *registry.Registry) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{srv: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "pong") })}}
	go s.srv.Serve(ln)
	s.reg = rostergokit.NewRegistrar(reg, registry.Instance{Service: "echo", Address: ln.Addr().String()}, log.NewNopLogger())
	s.reg.Register()
	if _, ok := s.reg.Instance(); !ok {
		t.Fatal("not registered")
	}
	return s
}

// stop is the graceful order: deregister (which waits the drain delay),
// then shut the server down.
func (s *server) stop() {
	s.reg.Deregister()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.srv.Shutdown(ctx)
}

// factory is go-kit's sd.Factory for the echo service over HTTP.
func factory(instance string) (endpoint.Endpoint, io.Closer, error) {
	c := &http.Client{Transport: &http.Transport{}}
	ep := func(ctx context.Context, _ any) (any, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+instance+"/", nil)
		resp, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if string(b) != "pong" {
			return nil, fmt.Errorf("%s answered %d %q", instance, resp.StatusCode, b)
		}
		return nil, nil
	}
	return ep, closerFunc(c.CloseIdleConnections), nil
}

type closerFunc func()

func (f closerFunc) Close() error { f(); return nil }

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRollingRestart: go-kit's own sd.NewEndpointer and lb.NewRoundRobin
// call a service through a rolling restart of three servers under load,
// with no retry. No call may fail.
func TestRollingRestart(t *testing.T) {
	reg, _ := openRedis(t)
	servers := []*server{startServer(t, reg), startServer(t, reg), startServer(t, reg)}
	instancer, err := rostergokit.NewInstancer(reg, "echo")
	if err != nil {
		t.Fatal(err)
	}
	defer instancer.Stop()
	endpointer := sd.NewEndpointer(instancer, factory, log.NewNopLogger())
	defer endpointer.Close()
	balancer := lb.NewRoundRobin(endpointer)
	waitFor(t, func() bool { eps, _ := endpointer.Endpoints(); return len(eps) == 3 })

	ctx, cancel := context.WithCancel(context.Background())
	var calls, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				err := call(ctx, balancer)
				if ctx.Err() != nil {
					return
				}
				calls.Add(1)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	waitFor(t, func() bool { return calls.Load() > 100 })
	for i := range servers {
		next := startServer(t, reg)
		servers[i].stop()
		servers[i] = next
	}
	waitFor(t, func() bool { return calls.Load() > 300 })
	cancel()
	wg.Wait()
	for _, s := range servers {
		s.stop()
	}
	t.Logf("%d calls, %d failed", calls.Load(), failed.Load())
	if failed.Load() != 0 {
		t.Fatalf("%d of %d calls failed; first: %v", failed.Load(), calls.Load(), firstErr.Load())
	}
}

func call(ctx context.Context, b lb.Balancer) error {
	ep, err := b.Endpoint()
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = ep(cctx, nil)
	return err
}

// TestRegistryOutage: while Redis is down go-kit gets an Event with the
// error and keeps calling the last endpoints; when Redis is back, the
// instances come again without an error.
func TestRegistryOutage(t *testing.T) {
	reg, redis := openRedis(t)
	s := startServer(t, reg)
	defer s.srv.Close()
	instancer, err := rostergokit.NewInstancer(reg, "echo")
	if err != nil {
		t.Fatal(err)
	}
	defer instancer.Stop()
	events := make(chan sd.Event, 16)
	instancer.Register(events)
	defer instancer.Deregister(events)
	if ev := <-events; ev.Err != nil || len(ev.Instances) != 1 {
		t.Fatalf("first event = %+v, want one instance", ev)
	}
	endpointer := sd.NewEndpointer(instancer, factory, log.NewNopLogger())
	defer endpointer.Close()
	balancer := lb.NewRoundRobin(endpointer)

	redis.Stop()
	ev := nextEvent(t, events)
	if ev.Err == nil {
		t.Fatalf("event during the outage = %+v, want an error", ev)
	}
	if err := call(context.Background(), balancer); err != nil {
		t.Fatalf("call during the outage: %v", err)
	}
	if err := redis.Start(); err != nil {
		t.Fatal(err)
	}
	for {
		ev = nextEvent(t, events)
		if ev.Err == nil {
			break
		}
	}
	if len(ev.Instances) != 1 {
		t.Fatalf("event after the outage = %+v, want the instance back", ev)
	}
}

func nextEvent(t *testing.T, ch <-chan sd.Event) sd.Event {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no event within 30s")
		return sd.Event{}
	}
}
