package middleware_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
)

// Adaptive throttling, on in the default chain: once a service refuses
// most of at least 20 calls, the client rejects up to 90% of the next
// ones locally, with ErrThrottled, so they cost the service nothing.
func ExampleThrottle() {
	ctx := context.Background()
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	defer reg.Close()
	reg.Register(ctx, registry.Instance{ID: "a", Service: "user-svc", Address: "10.0.0.1:80"})

	c, _ := middleware.NewClient(reg, middleware.WithMiddleware(middleware.Throttle(middleware.ThrottleConfig{})))
	defer c.Close()

	down := func(context.Context, registry.Instance) error { return errors.New("connection refused") }
	throttled := 0
	for range 120 {
		if errors.Is(c.Do(ctx, "user-svc", down), middleware.ErrThrottled) {
			throttled++
		}
	}
	fmt.Println(throttled, "of 120 calls rejected locally")
	// Output: 89 of 120 calls rejected locally
}
