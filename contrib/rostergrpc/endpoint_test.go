package rostergrpc_test

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	rostergrpc "github.com/roster-go/roster/contrib/rostergrpc"
	"github.com/roster-go/roster/registry"
)

// countingListener counts the connections a port accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// otherPort is a port of the test process that gRPC must never dial.
func otherPort(t *testing.T) *countingListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &countingListener{Listener: ln}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return l
}

// startPorted starts a gRPC server and registers it with the endpoints
// eps returns for its address.
func startPorted(t *testing.T, reg *registry.Registry, name string, eps func(grpcAddr string) registry.Instance) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{name: name, srv: grpc.NewServer(), ln: ln, done: make(chan struct{})}
	testpb.RegisterTestServiceServer(s.srv, s)
	go func() { defer close(s.done); _ = s.srv.Serve(ln) }()
	in := eps(ln.Addr().String())
	in.Service = "echo"
	if s.lease, err = reg.Register(context.Background(), in); err != nil {
		s.srv.Stop()
		t.Fatal(err)
	}
	t.Cleanup(s.kill)
	return s
}

// TestEndpointGRPC: the channel connects to each instance's grpc
// endpoint, to the one port of an instance without endpoints, and never
// to an instance whose only endpoint is http; WithEndpoint("") is the
// primary.
func TestEndpointGRPC(t *testing.T) {
	reg := openMem(t)
	webA, webC := otherPort(t), otherPort(t)
	a := startPorted(t, reg, "a", func(g string) registry.Instance {
		return registry.Instance{Endpoints: []registry.Endpoint{
			{Name: "http", Address: webA.Addr().String()}, {Name: "grpc", Address: g}}}
	})
	b := startPorted(t, reg, "b", func(g string) registry.Instance { return registry.Instance{Address: g} })
	if _, err := reg.Register(context.Background(), registry.Instance{Service: "echo",
		Endpoints: []registry.Endpoint{{Name: "http", Address: webC.Addr().String()}}}); err != nil {
		t.Fatal(err)
	}
	c := dial(t, reg, "echo")
	ctx := context.Background()
	for range 200 {
		if _, err := call(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if a.calls.Load() == 0 || b.calls.Load() == 0 || a.calls.Load()+b.calls.Load() != 200 {
		t.Errorf("a's grpc port got %d RPCs, b's one port %d; want 200 in all, both used", a.calls.Load(), b.calls.Load())
	}
	if n := webA.accepted.Load() + webC.accepted.Load(); n != 0 {
		t.Errorf("%d connections to an http port", n)
	}

	// The primary: a's http port, which speaks no gRPC, is now dialled,
	// and b still answers.
	p := dial(t, reg, "echo", rostergrpc.WithEndpoint(""), rostergrpc.WithRetry(1))
	waitFor(t, 10*time.Second, "a connection to a's http port", func() bool {
		_, _ = call(ctx, p)
		return webA.accepted.Load() > 0
	})
	// "metrics" is announced by none: b's one port serves it, a's and
	// c's named primaries do not.
	m := dial(t, reg, "echo", rostergrpc.WithEndpoint("metrics"))
	before := b.calls.Load()
	for range 10 {
		if name, err := call(ctx, m); err != nil || name != "b" {
			t.Fatalf("metrics: %q %v, want b", name, err)
		}
	}
	if b.calls.Load()-before != 10 {
		t.Errorf("metrics: b got %d of 10", b.calls.Load()-before)
	}
	n := dial(t, reg, "nobody", rostergrpc.WithRetry(1))
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := n.UnaryCall(short, &testpb.SimpleRequest{}); err == nil || !strings.Contains(err.Error(), "no instances") {
		t.Errorf("a service with no instance: %v", err)
	}
}
