package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/roster-go/roster/agent"
	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
)

// A program in any language picks an instance, calls it, and reports the
// outcome by token.
func Example() {
	ctx := context.Background()
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	defer reg.Close()
	reg.Register(ctx, registry.Instance{ID: "a", Service: "user-svc", Address: "10.0.0.1:80", Version: "v2"})

	a, _ := agent.New(agent.Config{Registry: reg})
	defer a.Close()
	srv := httptest.NewServer(a)
	defer srv.Close()

	resp, _ := http.Post(srv.URL+"/v1/pick", "application/json", strings.NewReader(`{"service":"user-svc","version":"v2"}`))
	var pick agent.PickResponse
	json.NewDecoder(resp.Body).Decode(&pick)
	resp.Body.Close()
	fmt.Println(pick.Instance.Address)

	// … call pick.Instance.Address, timing the call …
	report := fmt.Sprintf(`{"token":%q,"outcome":"success","latency_ms":12.5}`, pick.Token)
	resp, _ = http.Post(srv.URL+"/v1/report", "application/json", strings.NewReader(report))
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
	// Output:
	// 10.0.0.1:80
	// 204
}

// An agent that also serves xDS (ADS) to Envoy and proxyless gRPC on a
// free loopback port: a gRPC client dials xds:///<service> with a
// bootstrap file naming this address.
func ExampleConfig_xds() {
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	defer reg.Close()
	a, err := agent.New(agent.Config{Registry: reg, XDS: "127.0.0.1:0"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()
	fmt.Println(a.XDSAddr().Network())
	_, err = agent.New(agent.Config{Registry: reg, XDS: "0.0.0.0:18000"})
	fmt.Println(errors.Is(err, registry.ErrInvalid))
	// Output:
	// tcp
	// true
}
