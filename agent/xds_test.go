package agent_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"

	"github.com/roster-go/roster/agent"
	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
)

// grpcBackend is a real gRPC server on loopback serving the health
// service, counting the calls it answers.
type grpcBackend struct {
	srv   *grpc.Server
	addr  string
	calls atomic.Int64
}

func startGRPC(t *testing.T) *grpcBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &grpcBackend{addr: ln.Addr().String()}
	b.srv = grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		b.calls.Add(1)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(b.srv, health.NewServer())
	go func() { _ = b.srv.Serve(ln) }()
	t.Cleanup(b.srv.Stop)
	return b
}

// xdsClient dials xds:///target through grpc-go's own xDS resolver, with
// a bootstrap naming the agent's xDS server.
func xdsClient(t *testing.T, a *agent.Agent, target string) healthpb.HealthClient {
	t.Helper()
	boot := fmt.Sprintf(`{"xds_servers":[{"server_uri":%q,"channel_creds":[{"type":"insecure"}],"server_features":["xds_v3"]}],"node":{"id":"roster-test"}}`,
		a.XDSAddr().String())
	rb, err := xds.NewXDSResolverWithConfigForTesting([]byte(boot))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///"+target, grpc.WithResolvers(rb), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

func check(c healthpb.HealthClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestXDSGRPCRollingRestart calls a Roster-registered gRPC service on a
// real etcd through grpc-go's xDS resolver (xds:///echo, the agent as
// its xDS server) while its two instances are replaced one by one: each
// new instance registers, the old one drains (weight 0: DRAINING), and
// once the client sends it nothing it deregisters and stops. No call
// fails, and the new instances take the traffic.
func TestXDSGRPCRollingRestart(t *testing.T) {
	f := newFixture(t, startEtcd(t), agent.Config{XDS: "127.0.0.1:0"})
	var old []*grpcBackend
	var leases []*registry.Lease
	for range 2 {
		b := startGRPC(t)
		old = append(old, b)
		leases = append(leases, f.register(registry.Instance{Service: "echo", Address: b.addr}))
	}
	c := xdsClient(t, f.agent, "echo")
	if err := check(c); err != nil {
		t.Fatalf("first call: %v", err)
	}
	var calls, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := check(c); err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			}
			calls.Add(1)
		}
	}()
	var fresh []*grpcBackend
	for i, b := range old {
		nb := startGRPC(t)
		fresh = append(fresh, nb)
		f.register(registry.Instance{Service: "echo", Address: nb.addr})
		waitFor(t, 10*time.Second, "new instance called", func() bool { return nb.calls.Load() > 0 })
		if err := leases[i].Drain(context.Background()); err != nil {
			t.Fatal(err)
		}
		// Drained once 50 calls in a row pass it by.
		var seen, at int64 = -1, 0
		waitFor(t, 10*time.Second, "old instance drained", func() bool {
			if n := b.calls.Load(); n != seen {
				seen, at = n, calls.Load()
			}
			return calls.Load()-at >= 50
		})
		if err := leases[i].Deregister(context.Background()); err != nil {
			t.Fatal(err)
		}
		b.srv.GracefulStop()
	}
	mark := calls.Load()
	waitFor(t, 10*time.Second, "calls after the restart", func() bool { return calls.Load()-mark >= 100 })
	close(stop)
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d of %d calls failed; first: %v", n, calls.Load(), firstErr.Load())
	}
	for i, nb := range fresh {
		if nb.calls.Load() == 0 {
			t.Errorf("new instance %d got no calls", i)
		}
	}
	t.Logf("%d calls, 0 failed, through the replacement of 2 instances", calls.Load())
}

// TestXDSWeights: two instances of weights 1 and 3 share 400 calls
// about 25/75 (within 10 points), and a named endpoint is its own
// cluster (xds:///weighted:grpc) reaching the endpoint's port.
func TestXDSWeights(t *testing.T) {
	f := newFixture(t, startEtcd(t), agent.Config{XDS: "127.0.0.1:0"})
	light, heavy, named := startGRPC(t), startGRPC(t), startGRPC(t)
	f.register(registry.Instance{Service: "weighted", Address: light.addr, Weight: 1, Zone: "a", Region: "r"})
	f.register(registry.Instance{Service: "weighted", Address: heavy.addr, Weight: 3, Zone: "b", Region: "r",
		Endpoints: []registry.Endpoint{{Name: "http", Address: heavy.addr}, {Name: "grpc", Address: named.addr}}})
	c := xdsClient(t, f.agent, "weighted")
	waitFor(t, 10*time.Second, "both instances called", func() bool {
		if err := check(c); err != nil {
			t.Fatal(err)
		}
		return light.calls.Load() > 0 && heavy.calls.Load() > 0
	})
	l0, h0 := light.calls.Load(), heavy.calls.Load()
	const n = 400
	for range n {
		if err := check(c); err != nil {
			t.Fatal(err)
		}
	}
	share := float64(heavy.calls.Load()-h0) / n
	t.Logf("weight 3 of 1+3: %.1f%% of %d calls (light %d)", 100*share, n, light.calls.Load()-l0)
	if share < 0.65 || share > 0.85 {
		t.Fatalf("weight 3 instance took %.1f%% of the calls, want 75%% ± 10", 100*share)
	}
	// The named endpoint is a cluster of its own: heavy's grpc port, and
	// light, a one-port instance, which serves every name; never heavy's
	// primary port.
	cn := xdsClient(t, f.agent, "weighted:grpc")
	l1 := light.calls.Load()
	waitFor(t, 10*time.Second, "both weighted:grpc endpoints called", func() bool {
		if err := check(cn); err != nil {
			t.Fatal(err)
		}
		return named.calls.Load() > 0 && light.calls.Load() > l1
	})
	l0, h0, n0 := light.calls.Load(), heavy.calls.Load(), named.calls.Load()
	for range n {
		if err := check(cn); err != nil {
			t.Fatal(err)
		}
	}
	if d := heavy.calls.Load() - h0; d != 0 {
		t.Fatalf("heavy's primary port got %d calls of weighted:grpc", d)
	}
	got, l := named.calls.Load()-n0, light.calls.Load()-l0
	t.Logf("weighted:grpc: endpoint grpc of the weight 3 instance %d, light %d of %d calls", got, l, n)
	if got+l != n || float64(got)/n < 0.65 || float64(got)/n > 0.85 {
		t.Fatalf("weighted:grpc: endpoint grpc got %d, light %d of %d calls; want 75%% ± 10 on grpc", got, l, n)
	}
}

func memAgent(t *testing.T, cfg agent.Config) *agent.Agent {
	t.Helper()
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	t.Cleanup(func() { reg.Close() })
	cfg.Registry = reg
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// TestXDSListenerLoopbackOnly: a non-loopback xDS address is refused
// with an error naming Config.XDS, unless XDSAllowRemote says so.
func TestXDSListenerLoopbackOnly(t *testing.T) {
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	defer reg.Close()
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0", "example.com:0", "garbage", "unix:"} {
		a, err := agent.New(agent.Config{Registry: reg, XDS: addr})
		if err == nil {
			a.Close()
			t.Fatalf("XDS %q: no error", addr)
		}
		if !errors.Is(err, registry.ErrInvalid) || !contains(err.Error(), "Config.XDS") {
			t.Fatalf("XDS %q: %v, want ErrInvalid naming Config.XDS", addr, err)
		}
	}
	a := memAgent(t, agent.Config{XDS: "0.0.0.0:0", XDSAllowRemote: true})
	if a.XDSAddr() == nil {
		t.Fatal("no xDS listener with XDSAllowRemote")
	}
	u := memAgent(t, agent.Config{XDS: "unix:" + t.TempDir() + "/xds.sock"})
	if u.XDSAddr().Network() != "unix" {
		t.Fatalf("unix: listener is %v", u.XDSAddr().Network())
	}
	if memAgent(t, agent.Config{}).XDSAddr() != nil {
		t.Fatal("xDS served with an empty Config.XDS")
	}
}

func adsStream(t *testing.T, ctx context.Context, a *agent.Agent) discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+a.XDSAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	s, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestXDSBadClients: a stream asking for a type the agent does not serve
// is closed with InvalidArgument and gets no resource; 100 streams that
// ask and never ACK (nor read) hold a bounded amount of memory; streams
// past Config.XDSMaxStreams are refused with ResourceExhausted.
func TestXDSBadClients(t *testing.T) {
	const maxStreams = 100
	a := memAgent(t, agent.Config{XDS: "127.0.0.1:0", XDSMaxStreams: maxStreams})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	s := adsStream(t, ctx, a)
	if err := s.Send(&discovery.DiscoveryRequest{TypeUrl: "type.googleapis.com/no.such.Type", ResourceNames: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Recv()
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("unknown type: %v, %v; want the stream closed with InvalidArgument", resp, err)
	}

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const conns = maxStreams
	for i := range maxStreams {
		s := adsStream(t, ctx, a)
		if err := s.Send(&discovery.DiscoveryRequest{TypeUrl: "type.googleapis.com/envoy.config.listener.v3.Listener",
			ResourceNames: []string{fmt.Sprintf("svc%d", i%10)}}); err != nil {
			t.Fatal(err)
		}
	}
	// One past the cap is refused. The cap counts streams the server
	// has opened, so wait until it has all of them.
	waitFor(t, 10*time.Second, "stream past the cap refused", func() bool {
		s := adsStream(t, ctx, a)
		_ = s.Send(&discovery.DiscoveryRequest{TypeUrl: "type.googleapis.com/envoy.config.listener.v3.Listener", ResourceNames: []string{"svc0"}})
		_, err := s.Recv()
		return status.Code(err) == codes.ResourceExhausted
	})
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("%d streams that never ACK: heap in use grew %d KiB (%d KiB a stream, client side included)", conns, grown>>10, grown/int64(conns)>>10)
	if grown > int64(conns)*256<<10 {
		t.Fatalf("heap grew %d KiB for %d streams, want at most 256 KiB a stream", grown>>10, conns)
	}
}

// TestXDSFirstAnswerHasResource: the first answer to a request naming a
// service the agent did not follow yet carries its Listener (state of
// the world reads a missing one as deleted), and a weight change is
// pushed to the stream after its ACK.
func TestXDSFirstAnswerHasResource(t *testing.T) {
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	t.Cleanup(func() { reg.Close() })
	lease, err := reg.Register(context.Background(), registry.Instance{Service: "first", Address: "127.0.0.1:9000", Weight: 2})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{Registry: reg, XDS: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, typ := range []string{"type.googleapis.com/envoy.config.listener.v3.Listener", "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"} {
		s := adsStream(t, ctx, a)
		req := &discovery.DiscoveryRequest{TypeUrl: typ, ResourceNames: []string{"first"}}
		if err := s.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := s.Recv()
		if err != nil || len(resp.Resources) != 1 {
			t.Fatalf("%s: first answer %v, %v; want the resource", typ, resp, err)
		}
		if typ != "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment" {
			continue
		}
		req.VersionInfo, req.ResponseNonce = resp.VersionInfo, resp.Nonce
		if err := s.Send(req); err != nil {
			t.Fatal(err)
		}
		if err := lease.SetWeight(ctx, 5); err != nil {
			t.Fatal(err)
		}
		resp, err = s.Recv()
		if err != nil || len(resp.Resources) != 1 || resp.VersionInfo == req.VersionInfo {
			t.Fatalf("after the weight change: %v, %v", resp, err)
		}
		var cla endpointpb.ClusterLoadAssignment
		if err := resp.Resources[0].UnmarshalTo(&cla); err != nil {
			t.Fatal(err)
		}
		if w := cla.Endpoints[0].LbEndpoints[0].LoadBalancingWeight.GetValue(); w != 5 {
			t.Fatalf("pushed weight %d, want 5", w)
		}
	}
}
