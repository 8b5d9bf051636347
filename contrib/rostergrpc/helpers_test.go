package rostergrpc_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	rostergrpc "github.com/roster-go/roster/contrib/rostergrpc"
	"github.com/roster-go/roster/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server is a real gRPC server of the interop TestService that answers
// UnaryCall with its name, registered in a registry.
type server struct {
	testpb.UnimplementedTestServiceServer
	name  string
	srv   *grpc.Server
	ln    net.Listener
	lease *registry.Lease
	calls atomic.Int64 // calls received
	ended atomic.Int64 // calls answered
	delay time.Duration
	fail  atomic.Bool // answer Unavailable
	// commit: send response headers before failing, which gRPC never
	// retries.
	commit atomic.Bool
	done   chan struct{}
}

func (s *server) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.calls.Add(1)
	defer s.ended.Add(1)
	if s.commit.Load() {
		if err := grpc.SendHeader(ctx, metadata.Pairs("server", s.name)); err != nil {
			return nil, err
		}
		return nil, status.Error(codes.Unavailable, s.name+" failed after its headers")
	}
	if s.fail.Load() {
		return nil, status.Error(codes.Unavailable, s.name+" is failing")
	}
	if s.delay > 0 {
		t := time.NewTimer(s.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &testpb.SimpleResponse{ServerId: s.name}, nil
}

func startServer(t *testing.T, reg *registry.Registry, service, name string, delay time.Duration, opts ...registry.RegisterOption) *server {
	t.Helper()
	return startInstance(t, reg, registry.Instance{Service: service}, name, delay, opts...)
}

// startInstance is startServer for an instance with more fields set.
func startInstance(t *testing.T, reg *registry.Registry, in registry.Instance, name string, delay time.Duration, opts ...registry.RegisterOption) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{name: name, srv: grpc.NewServer(), ln: ln, delay: delay, done: make(chan struct{})}
	testpb.RegisterTestServiceServer(s.srv, s)
	go func() { defer close(s.done); _ = s.srv.Serve(ln) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in.Address, in.Metadata = ln.Addr().String(), map[string]string{"name": name}
	s.lease, err = reg.Register(ctx, in, opts...)
	if err != nil {
		s.srv.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.kill() })
	return s
}

// kill stops the server at once (connections cut, RPCs in flight fail)
// and abandons its lease as a crashed process would.
func (s *server) kill() {
	s.lease.Abandon()
	s.srv.Stop()
	<-s.done
}

// gracefulStop is the order rosterfx follows: deregister, wait until the
// clients have seen it, then stop serving.
func (s *server) gracefulStop(t *testing.T, drained func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.lease.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "clients stop routing to "+s.name, drained)
	s.srv.GracefulStop()
	<-s.done
}

func dial(t *testing.T, reg *registry.Registry, service string, opts ...rostergrpc.Option) testpb.TestServiceClient {
	t.Helper()
	cc, err := rostergrpc.NewClient(reg, service, opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testpb.NewTestServiceClient(cc)
}

func call(ctx context.Context, c testpb.TestServiceClient) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
	if err != nil {
		return "", err
	}
	return r.ServerId, nil
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// load runs workers calling c until stop, counting answers per server and
// failures.
type load struct {
	mu       sync.Mutex
	by       map[string]int
	failures []error
	ok       atomic.Int64
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

func startLoad(c testpb.TestServiceClient, workers int, pace time.Duration) *load {
	l := &load{by: map[string]int{}, stop: make(chan struct{})}
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
				name, err := call(context.Background(), c)
				l.mu.Lock()
				if err != nil {
					l.failures = append(l.failures, err)
				} else {
					l.by[name]++
					l.ok.Add(1)
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func (l *load) end() {
	l.stopOnce.Do(func() { close(l.stop) })
	l.wg.Wait()
}

func (l *load) count(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.by[name]
}

// progressed waits until the load made n more successful calls.
func (l *load) progressed(t *testing.T, n int64) {
	t.Helper()
	target := l.ok.Load() + n
	waitFor(t, 20*time.Second, "load progress", func() bool { return l.ok.Load() >= target })
}
