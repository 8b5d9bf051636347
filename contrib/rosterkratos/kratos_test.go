package rosterkratos_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-kratos/kratos/v2"
	klog "github.com/go-kratos/kratos/v2/log"
	kgrpc "github.com/go-kratos/kratos/v2/transport/grpc"
	khttp "github.com/go-kratos/kratos/v2/transport/http"
	"google.golang.org/grpc/health/grpc_health_v1"

	_ "github.com/roster-go/roster/backends/redis"
	"github.com/roster-go/roster/contrib/rosterkratos"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

func init() { klog.SetLogger(klog.NewStdLogger(discard{})) }

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// openRedis opens a Roster registry on a private redis-server.
func openRedis(t *testing.T) *registry.Registry {
	t.Helper()
	srv := redistest.Start(t)
	reg, err := registry.Open(context.Background(), "redis://"+srv.Addr()+"/0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return reg
}

// app is one kratos process: a gRPC and an HTTP server, registered
// through rosterkratos.
type app struct {
	app  *kratos.App
	done chan error
}

func startApp(t *testing.T, r *rosterkratos.Registry, reg *registry.Registry, name string) *app {
	t.Helper()
	gs := kgrpc.NewServer(kgrpc.Address("127.0.0.1:0"))
	hs := khttp.NewServer(khttp.Address("127.0.0.1:0"))
	hs.HandleFunc("/ping", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "pong") })
	a := &app{app: kratos.New(kratos.Name(name), kratos.Version("v1"), kratos.Server(gs, hs), kratos.Registrar(r)), done: make(chan error, 1)}
	go func() { a.done <- a.app.Run() }()
	waitFor(t, func() bool {
		snap, _ := reg.Lookup(context.Background(), name)
		_, ok := snap.Find(a.app.ID())
		return ok
	})
	return a
}

func (a *app) stop(t *testing.T) {
	t.Helper()
	if err := a.app.Stop(); err != nil {
		t.Errorf("stop %s: %v", a.app.ID(), err)
	}
	if err := <-a.done; err != nil {
		t.Errorf("run %s: %v", a.app.ID(), err)
	}
}

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

// TestRegisterDiscover: a kratos app registers through Roster with both
// of its servers' endpoints, and kratos' GetService and Watch read it
// back as kratos wrote it.
func TestRegisterDiscover(t *testing.T) {
	reg := openRedis(t)
	r := rosterkratos.New(reg)
	a := startApp(t, r, reg, "echo")

	snap, err := reg.Lookup(context.Background(), "echo")
	if err != nil {
		t.Fatal(err)
	}
	in, _ := snap.Find(a.app.ID())
	if len(in.Endpoints) != 2 || in.Endpoints[0].Name != "grpc" || in.Endpoints[1].Name != "http" {
		t.Fatalf("endpoints = %+v, want grpc and http", in.Endpoints)
	}
	got, err := r.GetService(context.Background(), "echo")
	if err != nil || len(got) != 1 {
		t.Fatalf("GetService = %v, %v", got, err)
	}
	if want := a.app.Endpoint(); fmt.Sprint(got[0].Endpoints) != fmt.Sprint(want) || got[0].Version != "v1" {
		t.Fatalf("GetService endpoints %v version %q, want %v v1", got[0].Endpoints, got[0].Version, want)
	}

	w, err := r.Watch(context.Background(), "echo")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	first, err := w.Next()
	if err != nil || len(first) != 1 {
		t.Fatalf("first Next = %v, %v", first, err)
	}
	a.stop(t)
	after, err := w.Next()
	if err != nil || len(after) != 0 {
		t.Fatalf("Next after stop = %v, %v; want empty", after, err)
	}
}

// TestRollingRestart: kratos' own gRPC and HTTP clients, with
// discovery:/// and their default balancer, call a service through a
// rolling restart of three kratos apps under load. No call may fail.
func TestRollingRestart(t *testing.T) {
	reg := openRedis(t)
	r := rosterkratos.New(reg)
	apps := []*app{startApp(t, r, reg, "echo"), startApp(t, r, reg, "echo"), startApp(t, r, reg, "echo")}

	ctx, cancel := context.WithCancel(context.Background())
	conn, err := kgrpc.DialInsecure(ctx, kgrpc.WithEndpoint("discovery:///echo"), kgrpc.WithDiscovery(r))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := grpc_health_v1.NewHealthClient(conn)
	// WithBlock: without it, kratos' HTTP client fails the calls made
	// before its first list arrives, whatever the registry.
	hc, err := khttp.NewClient(ctx, khttp.WithEndpoint("discovery:///echo"), khttp.WithDiscovery(r), khttp.WithBlock())
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	call := func(ctx context.Context, useHTTP bool) error {
		if useHTTP {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "/ping", nil)
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(b) != "pong" {
				return fmt.Errorf("http %d %q", resp.StatusCode, b)
			}
			return nil
		}
		resp, err := client.Check(ctx, &grpc_health_v1.HealthCheckRequest{})
		if err == nil && resp.GetStatus() != grpc_health_v1.HealthCheckResponse_SERVING {
			err = fmt.Errorf("status %v", resp.GetStatus())
		}
		return err
	}

	var calls, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
				err := call(cctx, i%2 == 1)
				ccancel()
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
	for i := range 3 { // replace each app in turn: start the new one, stop the old
		next := startApp(t, r, reg, "echo")
		apps[i].stop(t)
		apps[i] = next
	}
	waitFor(t, func() bool { return calls.Load() > 300 })
	cancel()
	wg.Wait()
	for _, a := range apps {
		a.stop(t)
	}
	t.Logf("%d calls, %d failed", calls.Load(), failed.Load())
	if failed.Load() != 0 {
		t.Fatalf("%d of %d calls failed; first: %v", failed.Load(), calls.Load(), firstErr.Load())
	}
}
