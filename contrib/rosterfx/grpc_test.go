package rosterfx_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/fx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	rosterfx "github.com/roster-go/roster/contrib/rosterfx"
	rostergrpc "github.com/roster-go/roster/contrib/rostergrpc"
	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// grpcServer is a gRPC server in the fx shape: Serve in OnStart,
// GracefulStop in OnStop.
type grpcServer struct {
	srv  *grpc.Server
	ln   net.Listener
	done chan struct{}
}

func newGRPCServer(lc fx.Lifecycle) *grpcServer {
	s := &grpcServer{srv: grpc.NewServer(), done: make(chan struct{})}
	healthpb.RegisterHealthServer(s.srv, health.NewServer())
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			s.ln = ln
			go func() { defer close(s.done); _ = s.srv.Serve(ln) }()
			return nil
		},
		OnStop: func(context.Context) error {
			s.srv.GracefulStop()
			<-s.done
			return nil
		},
	})
	return s
}

// TestGRPCServerLeavesWithoutFailures: two gRPC servers announced with
// rosterfx on a real etcd, a rostergrpc client under load with gRPC
// retries off; stopping one app (deregister → window → GracefulStop)
// fails no RPC.
func TestGRPCServerLeavesWithoutFailures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cluster, err := etcdtest.Start(ctx, etcdtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	url := cluster.URL("/"+t.Name(), "progress_interval=1s")

	newApp := func() *fx.App {
		return startApp(t, fx.Supply(rosterfx.Config{URL: url}), rosterfx.Module, fx.Provide(newGRPCServer),
			rosterfx.Announce(func(s *grpcServer) rosterfx.Announcement {
				return rosterfx.Announcement{
					Instance:    registry.Instance{Service: "health"},
					Addr:        func() string { return s.ln.Addr().String() },
					DrainWindow: drainWindow,
				}
			}))
	}
	a, b := newApp(), newApp()
	defer stopApp(t, b)

	reg, err := registry.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	cc, err := rostergrpc.NewClient(reg, "health",
		[]rostergrpc.Option{rostergrpc.WithStrategy(selector.P2CEWMA), rostergrpc.WithRetry(1)},
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)

	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
			cancel()
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			} else {
				ok.Add(1)
			}
		}
	}()
	waitFor(t, 20*time.Second, "load running", func() bool { return ok.Load() > 100 })
	stopApp(t, a)
	n := ok.Load()
	waitFor(t, 20*time.Second, "load after the stop", func() bool { return ok.Load() > n+100 })
	close(stop)
	<-done
	if failed.Load() > 0 {
		t.Fatalf("%d of %d RPCs failed while a server left gracefully (first: %v)", failed.Load(), failed.Load()+ok.Load(), firstErr.Load())
	}
	t.Logf("%d RPCs, none failed, gRPC retries off", ok.Load())
}
