package rosterfx_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	rosterfx "github.com/roster-go/roster/contrib/rosterfx"
	rostergrpc "github.com/roster-go/roster/contrib/rostergrpc"
	rosterhttp "github.com/roster-go/roster/contrib/rosterhttp"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
)

// TestOneAnnouncementTwoEndpoints: an app with an HTTP and a gRPC server
// announces both ports in one registration. Each client reaches its own
// port, and the stop is one deregistration, one drain window, then the
// servers stop.
func TestOneAnnouncementTwoEndpoints(t *testing.T) {
	const url = "mem://fx-endpoints"
	observer := openMem(t, url)
	h := watchHistory(t, observer, "shop")
	web := newTestServer("a")
	app := startApp(t, fx.Supply(rosterfx.Config{URL: url}), rosterfx.Module, web.provide(), fx.Provide(newGRPCServer),
		rosterfx.Announce(func(s *testServer, g *grpcServer) rosterfx.Announcement {
			return rosterfx.Announcement{
				Instance: registry.Instance{Service: "shop", Metadata: map[string]string{"name": "a"}},
				Endpoints: []rosterfx.Endpoint{
					{Name: "http", Protocol: "http", Addr: s.Addr},
					{Name: "grpc", Protocol: "grpc", Addr: func() string { return g.ln.Addr().String() }},
				},
				HealthPath:  "/healthz", // on the http endpoint
				DrainWindow: 300 * time.Millisecond,
			}
		}))
	waitFor(t, 5*time.Second, "registered", func() bool {
		_, ok := h.find(func(e event) bool { return e.name == "a" && !e.gone })
		return ok
	})
	snap, err := observer.Lookup(context.Background(), "shop")
	if err != nil || len(snap.Instances) != 1 {
		t.Fatalf("registered %v, %v; want one instance", snap.Instances, err)
	}
	in := snap.Instances[0]
	if g, ok := in.Endpoint("grpc"); in.Address != web.Addr() || len(in.Endpoints) != 2 || !ok || g.Protocol != "grpc" {
		t.Fatalf("registered %+v; want the http port as primary and two endpoints", in)
	}

	mc, err := middleware.NewClient(observer)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: &rosterhttp.Transport{Client: mc, Base: tr}, Timeout: 5 * time.Second}
	cc, err := rostergrpc.NewClient(observer, "shop", nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	health := healthpb.NewHealthClient(cc)
	for range 20 {
		resp, err := hc.Get("http://shop/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = health.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err != nil {
			t.Fatalf("gRPC to the grpc endpoint: %v", err)
		}
	}
	if n := web.calls.Load(); n != 20 {
		t.Errorf("the http port served %d of 20 requests", n)
	}

	stopApp(t, app)
	gone, ok := h.find(func(e event) bool { return e.name == "a" && e.gone })
	if !ok {
		t.Fatal("never deregistered")
	}
	h.mu.Lock()
	events := len(h.events)
	h.mu.Unlock()
	if events != 2 {
		t.Errorf("%d registry events, want 2 (one registration, one deregistration)", events)
	}
	if d := web.stoppedAt.Load().Sub(gone.at); d < 250*time.Millisecond {
		t.Errorf("the servers stopped %v after the deregistration was visible; want ≥ the 300ms window", d)
	}
}

// TestEndpointStartErrors: an endpoint without Addr, or on every
// interface, fails the start naming it.
func TestEndpointStartErrors(t *testing.T) {
	t.Setenv(rosterfx.EnvURL, "mem://fx-endpoint-errors")
	for _, tc := range []struct {
		ep   rosterfx.Endpoint
		want string
	}{
		{rosterfx.Endpoint{Name: "grpc"}, `endpoint "grpc" has no Addr`},
		{rosterfx.Endpoint{Name: "grpc", Addr: func() string { return "[::]:9090" }}, "address is unspecified ([::]:9090)"},
	} {
		app := fx.New(fx.NopLogger, rosterfx.Module, rosterfx.Announce(func() rosterfx.Announcement {
			return rosterfx.Announcement{Instance: registry.Instance{Service: "shop", Address: "127.0.0.1:8080"},
				Endpoints: []rosterfx.Endpoint{tc.ep}}
		}))
		if err := app.Start(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("start: %v, want an error with %q", err, tc.want)
		}
	}
}
