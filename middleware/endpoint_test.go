package middleware_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// portedRegistry holds three instances of "api": a serves http (its
// primary) and grpc, b has one port, c serves grpc alone.
func portedRegistry(t testing.TB) *registry.Registry {
	t.Helper()
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	t.Cleanup(func() { reg.Close() })
	for _, in := range []registry.Instance{
		{ID: "a", Service: "api", Endpoints: []registry.Endpoint{
			{Name: "http", Address: "10.0.0.1:80"}, {Name: "grpc", Address: "10.0.0.1:90"}}},
		{ID: "b", Service: "api", Address: "10.0.0.2:80"},
		{ID: "c", Service: "api", Endpoints: []registry.Endpoint{{Name: "grpc", Address: "10.0.0.3:90"}}},
	} {
		if _, err := reg.Register(context.Background(), in); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

// reached returns the sorted addresses n calls through c reach.
func reached(t *testing.T, c *middleware.Client, ctx context.Context, n int) []string {
	t.Helper()
	var mu sync.Mutex
	var got []string
	for range n {
		err := c.Do(ctx, "api", func(_ context.Context, in registry.Instance) error {
			mu.Lock()
			defer mu.Unlock()
			if !slices.Contains(got, in.Address) {
				got = append(got, in.Address)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(got)
	return got
}

// TestClientEndpoint: the client's endpoint, and a call's, choose the
// instances and the address the Call gets, by Instance.Endpoint's rule.
func TestClientEndpoint(t *testing.T) {
	reg := portedRegistry(t)
	rr := middleware.WithSelector(selector.WithStrategy(selector.RoundRobin))
	plain, err := middleware.NewClient(reg, rr)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	grpc, err := middleware.NewClient(reg, rr, middleware.WithEndpoint("grpc"))
	if err != nil {
		t.Fatal(err)
	}
	defer grpc.Close()
	ctx := context.Background()
	httpCtx := middleware.ForEndpoint(ctx, "http")
	for _, tc := range []struct {
		what string
		c    *middleware.Client
		ctx  context.Context
		want []string
	}{
		{"no endpoint: the primary", plain, ctx, []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:90"}},
		{"WithEndpoint(grpc)", grpc, ctx, []string{"10.0.0.1:90", "10.0.0.2:80", "10.0.0.3:90"}},
		{"ForEndpoint(http) wins over the client's", grpc, httpCtx, []string{"10.0.0.1:80", "10.0.0.2:80"}},
		{"ForEndpoint(http) on a plain client", plain, httpCtx, []string{"10.0.0.1:80", "10.0.0.2:80"}},
		{"ForEndpoint(\"\") is the primary", grpc, middleware.ForEndpoint(ctx, ""), []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:90"}},
	} {
		if got := reached(t, tc.c, tc.ctx, 30); !slices.Equal(got, tc.want) {
			t.Errorf("%s: reached %v, want %v", tc.what, got, tc.want)
		}
	}
}

// TestEndpointRetriesServingInstances: a retry goes to another instance
// that serves the name, never to one that does not, and with none left
// the call fails as a pick with no instance does.
func TestEndpointRetriesServingInstances(t *testing.T) {
	reg := portedRegistry(t)
	c, err := middleware.NewClient(reg, middleware.WithEndpoint("http"),
		middleware.WithMiddleware(middleware.Retry(middleware.RetryConfig{MaxAttempts: 3})))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var tried []string
	down := errors.New("connection refused")
	err = c.Do(context.Background(), "api", func(_ context.Context, in registry.Instance) error {
		tried = append(tried, in.Address)
		return down
	})
	if !errors.Is(err, down) {
		t.Fatalf("Do = %v, want the last attempt's error", err)
	}
	for _, a := range tried {
		if a != "10.0.0.1:80" && a != "10.0.0.2:80" {
			t.Errorf("an attempt reached %s, which is not an http endpoint (tried %v)", a, tried)
		}
	}
	if len(tried) != 3 || tried[0] == tried[1] {
		t.Errorf("tried %v, want 3 attempts, the second elsewhere", tried)
	}
	err = c.Do(middleware.ForEndpoint(context.Background(), "metrics"), "api", noop)
	if err != nil {
		t.Fatalf("metrics, which the one-port b serves: %v", err)
	}
	reg2 := registry.New(memory.NewDriver(memory.NewServer()))
	defer reg2.Close()
	if _, err := reg2.Register(context.Background(), registry.Instance{Service: "api",
		Endpoints: []registry.Endpoint{{Name: "grpc", Address: "10.0.0.3:90"}}}); err != nil {
		t.Fatal(err)
	}
	c2, err := middleware.NewClient(reg2, middleware.WithEndpoint("http"))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.Do(context.Background(), "api", noop); !errors.Is(err, selector.ErrNoInstances) {
		t.Errorf("http of a grpc-only service: %v, want ErrNoInstances", err)
	}
}

// TestPickEndpoint: the bare pick roster agent serves takes the name
// from its options, else from the context and the client.
func TestPickEndpoint(t *testing.T) {
	reg := portedRegistry(t)
	c, err := middleware.NewClient(reg, middleware.WithEndpoint("grpc"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Do(ctx, "api", noop); err != nil { // follow the service
		t.Fatal(err)
	}
	only := func(id string) func(*registry.Instance) bool {
		return func(in *registry.Instance) bool { return in.ID != id }
	}
	for _, tc := range []struct {
		ctx  context.Context
		o    selector.PickOptions
		want string
	}{
		{ctx, selector.PickOptions{Exclude: only("a")}, "10.0.0.1:90"},
		{ctx, selector.PickOptions{Exclude: only("a"), Endpoint: "http"}, "10.0.0.1:80"},
		{middleware.ForEndpoint(ctx, "http"), selector.PickOptions{Exclude: only("a")}, "10.0.0.1:80"},
	} {
		p, err := c.Pick(tc.ctx, "api", tc.o)
		if err != nil {
			t.Fatal(err)
		}
		middleware.Report(tc.ctx, p, middleware.Success, 0)
		if p.Instance.Address != tc.want {
			t.Errorf("Pick(Endpoint %q) = %s, want %s", tc.o.Endpoint, p.Instance.Address, tc.want)
		}
	}
}
