package middleware_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// A call fails on one instance and is retried on another.
func Example() {
	ctx := context.Background()
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	defer reg.Close()
	reg.Register(ctx, registry.Instance{ID: "a", Service: "user-svc", Address: "10.0.0.1:80"})
	reg.Register(ctx, registry.Instance{ID: "b", Service: "user-svc", Address: "10.0.0.2:80"})

	c, _ := middleware.NewClient(reg, middleware.WithSelector(selector.WithStrategy(selector.RoundRobin)))
	defer c.Close()

	tried := map[string]bool{}
	err := c.Do(ctx, "user-svc", func(ctx context.Context, in registry.Instance) error {
		tried[in.ID] = true
		if len(tried) == 1 {
			return errors.New("connection refused") // the first instance is down
		}
		return nil
	})
	fmt.Println(err, len(tried))
	// Output: <nil> 2
}

// A chain of your own, with tuned policies: each policy takes its Config
// (zero fields: the defaults). The quarantine is built first and given to
// the Client too, so that Client.Quarantine and the ejection metrics are
// about the one in the chain.
func ExampleWithMiddleware() {
	ctx := context.Background()
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	defer reg.Close()
	reg.Register(ctx, registry.Instance{ID: "a", Service: "user-svc", Address: "10.0.0.1:80"})
	reg.Register(ctx, registry.Instance{ID: "b", Service: "user-svc", Address: "10.0.0.2:80"})

	q := middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: 1})
	c, _ := middleware.NewClient(reg,
		middleware.WithSelector(selector.WithStrategy(selector.RoundRobin)),
		middleware.WithQuarantine(q),
		middleware.WithMiddleware(middleware.Retry(middleware.RetryConfig{MaxAttempts: 2}), q.Middleware()))
	defer c.Close()

	call := func(ctx context.Context, in registry.Instance) error {
		if in.ID == "a" {
			return errors.New("connection refused")
		}
		return nil
	}
	// Round robin reaches a within two calls; its one failure ejects it,
	// and the retry serves the call from b.
	fmt.Println(c.Do(ctx, "user-svc", call), c.Do(ctx, "user-svc", call), q.Ejected("user-svc"))
	// Output: <nil> <nil> [a]
}

// A process serving http and grpc registers both ports once; a client
// set to "grpc" calls each instance on its grpc port. An instance with
// one port serves every name.
func ExampleWithEndpoint() {
	ctx := context.Background()
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	defer reg.Close()
	reg.Register(ctx, registry.Instance{ID: "a", Service: "user-svc", Endpoints: []registry.Endpoint{
		{Name: "http", Address: "10.0.0.1:8080"},
		{Name: "grpc", Address: "10.0.0.1:9090"},
	}})

	c, _ := middleware.NewClient(reg, middleware.WithEndpoint("grpc"))
	defer c.Close()

	call := func(ctx context.Context, in registry.Instance) error {
		fmt.Println(in.Address) // dial the endpoint
		return nil
	}
	c.Do(ctx, "user-svc", call)
	c.Do(middleware.ForEndpoint(ctx, "http"), "user-svc", call) // this call only
	// Output:
	// 10.0.0.1:9090
	// 10.0.0.1:8080
}
