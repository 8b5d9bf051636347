package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
)

// A circuit breaker per service: once half of at least 20 calls in 10 s
// failed, calls fail at once with ErrCircuitOpen, without reaching the
// service, until a probe succeeds.
func ExampleWithBreaker() {
	ctx := context.Background()
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	defer reg.Close()
	reg.Register(ctx, registry.Instance{ID: "a", Service: "user-svc", Address: "10.0.0.1:80"})

	br := middleware.NewBreaker(middleware.BreakerConfig{OpenTimeout: 30 * time.Second})
	c, _ := middleware.NewClient(reg, middleware.WithBreaker(br))
	defer c.Close()

	down := func(context.Context, registry.Instance) error { return errors.New("connection refused") }
	for range 20 {
		c.Do(ctx, "user-svc", down)
	}
	err := c.Do(ctx, "user-svc", down)
	fmt.Println(br.State("user-svc"), errors.Is(err, middleware.ErrCircuitOpen))
	// Output: open true
}
