// Package contrib_test runs contrib/rosterhttp and contrib/rostergrpc
// together against every registering backend.
package contrib_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	_ "github.com/roster-go/roster/backends/all" // every scheme
	"github.com/roster-go/roster/conformance"
	rostergrpc "github.com/roster-go/roster/contrib/rostergrpc"
	rosterhttp "github.com/roster-go/roster/contrib/rosterhttp"
	"github.com/roster-go/roster/internal/servers/consultest"
	"github.com/roster-go/roster/internal/servers/dualtest"
	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/internal/servers/kubetest"
	"github.com/roster-go/roster/internal/servers/memorytest"
	"github.com/roster-go/roster/internal/servers/natstest"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/internal/servers/zktest"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
)

// callsPerPort is how many calls each client makes, from 8 goroutines.
const (
	callsPerPort = 2000
	workers      = 8
)

// backends start a private server of each registering backend, closed
// when the test ends, and return a registry URL on it.
var backends = []struct {
	name  string
	start func(t *testing.T) string
}{
	{"memory", func(*testing.T) string { return urlOf(memorytest.NewHarness()) }},
	{"etcd", func(t *testing.T) string {
		c, err := etcdtest.Start(t.Context(), etcdtest.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.URL("/endpoints")
	}},
	{"redis", func(t *testing.T) string { return "redis://" + redistest.Start(t).Addr() + "/0" }},
	{"redis-keys", func(t *testing.T) string { return "redis://" + redistest.Start(t).Addr() + "/0?layout=keys" }},
	{"consul", func(t *testing.T) string { return consultest.Start(t).URL("") }},
	{"zookeeper", func(t *testing.T) string { return urlOf(zktest.NewHarness(t, zktest.Start(t))) }},
	{"kubernetes", func(t *testing.T) string {
		s, err := kubetest.Start(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return urlOf(kubetest.NewHarness(s))
	}},
	{"nats", func(t *testing.T) string { return natstest.Start(t).URL("bucket=endpoints") }},
	{"dual", func(t *testing.T) string { return urlOf(dualtest.NewHarness(t)) }},
}

func urlOf(h conformance.Harness) string { return h.(conformance.URLOpener).URL() }

// TestEndpointsOnEveryBackend is issue #26's test: one process with an
// HTTP and a gRPC listener registers both as endpoints, once;
// rosterhttp and rostergrpc each make 2,000 concurrent calls, with no
// route written in code. Every call must succeed on its own port, and
// no connection may reach the other one.
func TestEndpointsOnEveryBackend(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { testEndpoints(t, b.start(t)) })
	}
}

func testEndpoints(t *testing.T, url string) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	p := startProcess(t)
	serving := openRegistry(t, ctx, url)
	lease, err := serving.Register(ctx, registry.Instance{Service: "orders", Endpoints: []registry.Endpoint{
		{Name: "http", Address: p.http.Addr().String(), Protocol: "http"},
		{Name: "grpc", Address: p.grpc.Addr().String(), Protocol: "grpc"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Deregister(context.Background())

	reg := openRegistry(t, ctx, url) // the calling process's
	snap := waitInstance(t, ctx, reg)
	if n := len(snap.Instances[0].Endpoints); n != 2 {
		t.Errorf("the backend read back %d endpoints, want 2: %+v", n, snap.Instances[0])
	}
	mc, err := middleware.NewClient(reg)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: workers}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: &rosterhttp.Transport{Client: mc, Base: tr}, Timeout: 10 * time.Second}
	cc, err := rostergrpc.NewClient(reg, "orders", nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	gc := testpb.NewTestServiceClient(cc)

	var httpFailed, grpcFailed failures
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range callsPerPort / workers {
				httpFailed.add(getOnce(ctx, hc))
			}
		})
		wg.Go(func() {
			for range callsPerPort / workers {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := gc.UnaryCall(cctx, &testpb.SimpleRequest{})
				cancel()
				grpcFailed.add(err)
			}
		})
	}
	wg.Wait()
	t.Logf("http: %d served, %d failed, %d connections on the wrong port; grpc: %d served, %d failed, %d wrong",
		p.httpCalls.Load(), httpFailed.n.Load(), p.http.wrong.Load(), p.grpcCalls.Load(), grpcFailed.n.Load(), p.grpc.wrong.Load())
	for _, f := range []struct {
		what   string
		failed *failures
		served int64
		wrong  int64
	}{
		{"rosterhttp", &httpFailed, p.httpCalls.Load(), p.grpc.wrong.Load()},
		{"rostergrpc", &grpcFailed, p.grpcCalls.Load(), p.http.wrong.Load()},
	} {
		if n := f.failed.n.Load(); n != 0 {
			t.Errorf("%s: %d of %d calls failed; the first: %v", f.what, n, callsPerPort, f.failed.first)
		}
		if f.served != callsPerPort {
			t.Errorf("%s: its own port served %d calls, want %d", f.what, f.served, callsPerPort)
		}
		if f.wrong != 0 {
			t.Errorf("%s: %d connections reached the other port", f.what, f.wrong)
		}
	}
}

func openRegistry(t *testing.T, ctx context.Context, url string) *registry.Registry {
	t.Helper()
	reg, err := registry.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return reg
}

// waitInstance waits until reg sees the one instance of orders.
func waitInstance(t *testing.T, ctx context.Context, reg *registry.Registry) registry.Snapshot {
	t.Helper()
	w, err := reg.Watch(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for {
		s, err := w.Next(ctx)
		if err != nil && !errors.Is(err, registry.ErrUnavailable) {
			t.Fatalf("waiting for the instance: %v", err)
		}
		if len(s.Instances) == 1 {
			return s
		}
	}
}

func getOnce(ctx context.Context, hc *http.Client) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://orders/x", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && (resp.StatusCode != http.StatusOK || string(b) != "http") {
		err = fmt.Errorf("%d %q", resp.StatusCode, b)
	}
	return err
}

// failures counts failed calls and keeps the first error.
type failures struct {
	n     atomic.Int64
	once  sync.Once
	first error
}

func (f *failures) add(err error) {
	if err != nil {
		f.once.Do(func() { f.first = err })
		f.n.Add(1)
	}
}

// process is the test server: an HTTP listener and a gRPC listener,
// each counting the calls it serves and the connections that speak the
// other protocol to it.
type process struct {
	testpb.UnimplementedTestServiceServer
	http, grpc *sniffer
	httpCalls  atomic.Int64
	grpcCalls  atomic.Int64
}

func (p *process) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	p.grpcCalls.Add(1)
	return &testpb.SimpleResponse{ServerId: "grpc"}, nil
}

func startProcess(t *testing.T) *process {
	t.Helper()
	p := &process{http: listen(t, false), grpc: listen(t, true)}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		p.httpCalls.Add(1)
		io.WriteString(w, "http")
	})}
	gs := grpc.NewServer()
	testpb.RegisterTestServiceServer(gs, p)
	var wg sync.WaitGroup
	wg.Go(func() { _ = hs.Serve(p.http) })
	wg.Go(func() { _ = gs.Serve(p.grpc) })
	t.Cleanup(func() {
		gs.Stop()
		hs.Close()
		wg.Wait()
	})
	return p
}

// sniffer is a listener that counts the connections whose first bytes
// are not of its protocol: gRPC's HTTP/2 preface ("PRI * HTTP/2.0") on
// the gRPC port, anything else on the HTTP/1 port.
type sniffer struct {
	net.Listener
	h2    bool
	wrong atomic.Int64
}

func listen(t *testing.T, h2 bool) *sniffer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return &sniffer{Listener: ln, h2: h2}
}

func (l *sniffer) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &sniffed{Conn: c, l: l}, nil
}

type sniffed struct {
	net.Conn
	l    *sniffer
	once sync.Once
}

func (c *sniffed) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.once.Do(func() {
			if (p[0] == 'P') != c.l.h2 { // "PRI" or "GET"
				c.l.wrong.Add(1)
			}
		})
	}
	return n, err
}
