package rosterhttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	rosterhttp "github.com/roster-go/roster/contrib/rosterhttp"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// listener is one port of a test process, counting the requests it gets.
func listener(t *testing.T, tls bool) *instance {
	t.Helper()
	in := &instance{}
	if tls {
		in.srv = httptest.NewTLSServer(in)
	} else {
		in.srv = httptest.NewServer(in)
	}
	t.Cleanup(in.srv.Close)
	return in
}

func (in *instance) addr() string { return in.srv.Listener.Addr().String() }

// TestEndpointByScheme: a request goes to the endpoint its URL's scheme
// names, an instance with one port serves every scheme, and one whose
// primary is another endpoint gets no request; Transport.Endpoint names
// another.
func TestEndpointByScheme(t *testing.T) {
	reg := openMem(t)
	web, secure, admin, grpcA := listener(t, false), listener(t, true), listener(t, false), listener(t, false)
	onePort, grpcOnly := listener(t, false), listener(t, false)
	ctx := context.Background()
	for _, in := range []registry.Instance{
		{ID: "a", Service: "users", Endpoints: []registry.Endpoint{
			{Name: "http", Address: web.addr()}, {Name: "https", Address: secure.addr()},
			{Name: "admin", Address: admin.addr()}, {Name: "grpc", Address: grpcA.addr()}}},
		{ID: "b", Service: "users", Address: onePort.addr()},
		{ID: "c", Service: "users", Endpoints: []registry.Endpoint{{Name: "grpc", Address: grpcOnly.addr()}}},
	} {
		if _, err := reg.Register(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	mc, err := middleware.NewClient(reg, middleware.WithSelector(selector.WithStrategy(selector.RoundRobin)))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	base := secure.srv.Client().Transport.(*http.Transport).Clone() // trusts the test certificate
	defer base.CloseIdleConnections()
	hc := &http.Client{Transport: &rosterhttp.Transport{Client: mc, Base: base}, Timeout: 10 * time.Second}
	get := func(hc *http.Client, url string) {
		t.Helper()
		resp, err := hc.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", url, resp.StatusCode)
		}
	}
	for range 40 {
		get(hc, "http://users/x")
	}
	if web.calls.Load() == 0 || onePort.calls.Load() == 0 || web.calls.Load()+onePort.calls.Load() != 40 {
		t.Errorf("http: %d to a's http port, %d to b's one port, want 40 in all and both used", web.calls.Load(), onePort.calls.Load())
	}
	pinned := &http.Client{Transport: &rosterhttp.Transport{Client: mc, Base: base, Endpoint: "admin"}, Timeout: 10 * time.Second}
	for range 10 {
		get(pinned, "http://users/x")
	}
	if got := admin.calls.Load() + web.calls.Load() + onePort.calls.Load(); admin.calls.Load() != 5 || got != 50 {
		t.Errorf("Endpoint admin: %d of 10 to a's admin port (round robin: 5), %d requests in all, want 50", admin.calls.Load(), got)
	}
	if n := grpcA.calls.Load() + grpcOnly.calls.Load() + secure.calls.Load(); n != 0 {
		t.Errorf("%d http requests reached a grpc or the https port", n)
	}
}

// TestEndpointHTTPS: https:// goes to the https endpoint.
func TestEndpointHTTPS(t *testing.T) {
	reg := openMem(t)
	web, secure := listener(t, false), listener(t, true)
	if _, err := reg.Register(context.Background(), registry.Instance{Service: "users", Endpoints: []registry.Endpoint{
		{Name: "http", Address: web.addr()}, {Name: "https", Address: secure.addr()}}}); err != nil {
		t.Fatal(err)
	}
	mc, err := middleware.NewClient(reg)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	base := secure.srv.Client().Transport.(*http.Transport).Clone()
	defer base.CloseIdleConnections()
	hc := &http.Client{Transport: &rosterhttp.Transport{Client: mc, Base: base}, Timeout: 10 * time.Second}
	for _, url := range []string{"https://users/x", "http://users/y", "https://users/z"} {
		resp, err := hc.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if secure.calls.Load() != 2 || web.calls.Load() != 1 {
		t.Errorf("https port got %d, http port %d; want 2 and 1", secure.calls.Load(), web.calls.Load())
	}
}
