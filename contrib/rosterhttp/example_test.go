package rosterhttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	_ "github.com/roster-go/roster/backends/memory"
	rosterhttp "github.com/roster-go/roster/contrib/rosterhttp"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
)

// A plain http.Client whose requests to http://greeter/... go to an
// instance of the greeter service.
func ExampleTransport() {
	ctx := context.Background()
	reg, _ := registry.Open(ctx, "mem://")
	defer reg.Close()

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s%s", r.Host, r.URL.Path)
	}))
	defer srv.Close()
	lease, _ := reg.Register(ctx, registry.Instance{Service: "greeter", Address: srv.Listener.Addr().String()})
	defer lease.Deregister(ctx)

	mc, _ := middleware.NewClient(reg)
	defer mc.Close()
	hc := &http.Client{Transport: rosterhttp.New(mc)}

	resp, err := hc.Get("http://greeter/hi")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(b))
	// Output: 200 hello from greeter/hi
}
