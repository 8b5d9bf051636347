package rosterfx_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"

	_ "github.com/roster-go/roster/backends/memory"
	rosterfx "github.com/roster-go/roster/contrib/rosterfx"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
)

func openMem(t *testing.T, url string) *registry.Registry {
	t.Helper()
	reg, err := registry.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return reg
}

func startApp(t *testing.T, opts ...fx.Option) *fx.App {
	t.Helper()
	app := fx.New(append([]fx.Option{fx.NopLogger}, opts...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return app
}

func stopApp(t *testing.T, app *fx.App) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := app.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestGracefulOrder checks the order of events seen from outside: the
// instance appears only once the server answers, and on stop it
// disappears from the registry, the drain window passes, and only then
// does the server stop accepting.
func TestGracefulOrder(t *testing.T) {
	const url = "mem://fx-graceful-order"
	observer := openMem(t, url)
	h := watchHistory(t, observer, "greeter")
	srv := newTestServer("a")
	var reg *registry.Registry
	app := startApp(t,
		fx.Supply(rosterfx.Config{URL: url}),
		rosterfx.Module,
		srv.provide(),
		announce("greeter", 300*time.Millisecond, false),
		fx.Populate(&reg),
	)
	waitFor(t, 5*time.Second, "registered", func() bool {
		_, ok := h.find(func(e event) bool { return e.name == "a" && !e.gone })
		return ok
	})
	s, err := observer.Lookup(context.Background(), "greeter")
	if err != nil || len(s.Instances) != 1 || s.Instances[0].Address != srv.Addr() {
		t.Fatalf("registered %v, %v; want the server's address %s", s.Instances, err, srv.Addr())
	}
	stopApp(t, app)
	gone, ok := h.find(func(e event) bool { return e.name == "a" && e.gone })
	if !ok {
		t.Fatal("never deregistered")
	}
	stopped := *srv.stoppedAt.Load()
	if d := stopped.Sub(gone.at); d < 250*time.Millisecond {
		t.Fatalf("server stopped %v after the deregistration was visible; want ≥ the 300ms drain window", d)
	}
	if _, err := reg.Lookup(context.Background(), "greeter"); err == nil {
		t.Fatal("the app's registry still open after stop")
	}
}

// TestDrainMode: weight 0 first (still registered for the window), then
// the deregistration, then the server stops.
func TestDrainMode(t *testing.T) {
	const url = "mem://fx-drain"
	observer := openMem(t, url)
	h := watchHistory(t, observer, "greeter")
	srv := newTestServer("a")
	app := startApp(t, fx.Supply(rosterfx.Config{URL: url}), rosterfx.Module, srv.provide(), announce("greeter", 300*time.Millisecond, true))
	waitFor(t, 5*time.Second, "registered", func() bool {
		_, ok := h.find(func(e event) bool { return e.name == "a" && e.weight == registry.DefaultWeight })
		return ok
	})
	stopApp(t, app)
	waitFor(t, 5*time.Second, "the observer sees the deregistration", func() bool {
		_, ok := h.find(func(e event) bool { return e.name == "a" && e.gone })
		return ok
	})
	drained, ok1 := h.find(func(e event) bool { return e.name == "a" && !e.gone && e.weight == 0 })
	gone, ok2 := h.find(func(e event) bool { return e.name == "a" && e.gone })
	if !ok1 || !ok2 {
		t.Fatalf("drained %v, deregistered %v; want both", ok1, ok2)
	}
	stopped := *srv.stoppedAt.Load()
	// The deregistration and the stop follow each other at the end of
	// the window (the observer may see the first a little after the
	// second happened).
	if gone.at.Sub(drained.at) < 250*time.Millisecond || stopped.Sub(drained.at) < 250*time.Millisecond {
		t.Fatalf("drained at 0, deregistered at %v, server stopped at %v; want both after the 300ms window",
			gone.at.Sub(drained.at), stopped.Sub(drained.at))
	}
}

func TestStartWaitsForHealthCheck(t *testing.T) {
	const url = "mem://fx-health"
	observer := openMem(t, url)
	srv := newTestServer("a")
	srv.healthy.Store(false)
	go func() {
		time.Sleep(300 * time.Millisecond) // the server warms up
		srv.healthy.Store(true)
	}()
	h := watchHistory(t, observer, "greeter")
	start := time.Now()
	app := startApp(t, fx.Supply(rosterfx.Config{URL: url}), rosterfx.Module, srv.provide(), announce("greeter", 10*time.Millisecond, false))
	defer stopApp(t, app)
	e, ok := h.find(func(e event) bool { return e.name == "a" && !e.gone })
	if !ok {
		waitFor(t, 5*time.Second, "registered", func() bool { e, ok = h.find(func(e event) bool { return e.name == "a" }); return ok })
	}
	if e.at.Sub(start) < 300*time.Millisecond {
		t.Fatalf("registered %v after start, before the health check passed (300ms)", e.at.Sub(start))
	}
}

func TestStartErrorsAreClear(t *testing.T) {
	t.Setenv(rosterfx.EnvURL, "")
	app := fx.New(fx.NopLogger, rosterfx.Module, fx.Invoke(func(*registry.Registry) {}))
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "no registry URL") {
		t.Fatalf("no URL: %v", err)
	}

	t.Setenv(rosterfx.EnvURL, "mem://fx-env")
	srv := newTestServer("a")
	srv.healthy.Store(false)
	app = fx.New(fx.NopLogger, rosterfx.Module, srv.provide(), announce("greeter", 0, false))
	// Start waits for the health check until its deadline; the deadline
	// leaves a loaded machine time to run the check at least once.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := app.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "rosterfx: announce greeter at 127.0.0.1:") ||
		!strings.Contains(err.Error(), "health check did not pass") || !strings.Contains(err.Error(), "503") {
		t.Fatalf("unhealthy server: %v", err)
	}
	// fx rolled back: the server that did start was stopped.
	if srv.stoppedAt.Load() == nil {
		t.Fatal("server not stopped after the failed start")
	}

	bad := newTestServer("b")
	app = fx.New(fx.NopLogger, rosterfx.Module, bad.provide(), rosterfx.Announce(func(s *testServer) rosterfx.Announcement {
		return rosterfx.Announcement{Instance: registry.Instance{Service: "Bad Name"}, Addr: s.Addr}
	}))
	err = app.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "rosterfx: announce Bad Name") {
		t.Fatalf("invalid service: %v", err)
	}

	app = fx.New(fx.NopLogger, rosterfx.Module, rosterfx.Announce(func() rosterfx.Announcement {
		return rosterfx.Announcement{Instance: registry.Instance{Service: "greeter", Address: "[::]:8080"}}
	}))
	err = app.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "address is unspecified") {
		t.Fatalf("unspecified address: %v", err)
	}
}

func TestClientModule(t *testing.T) {
	const url = "mem://fx-client"
	srv := newTestServer("a")
	var c *middleware.Client
	app := startApp(t,
		fx.Supply(rosterfx.Config{URL: url}),
		rosterfx.Module, rosterfx.ClientModule,
		rosterfx.ClientOptions(middleware.WithMaxStaleness(time.Minute)),
		rosterfx.RegistryOptions(registry.WithResyncInterval(time.Second)),
		srv.provide(), announce("greeter", 10*time.Millisecond, false),
		fx.Populate(&c),
	)
	var got string
	err := c.Do(context.Background(), "greeter", func(ctx context.Context, in registry.Instance) error {
		got = in.Address
		return nil
	})
	if err != nil || got != srv.Addr() {
		t.Fatalf("%q, %v", got, err)
	}
	stopApp(t, app)
	if err := c.Do(context.Background(), "greeter", func(context.Context, registry.Instance) error { return nil }); err == nil {
		t.Fatal("client still usable after stop")
	}
}

// TestTwoAnnouncements: one server announced under two services (an API
// and its admin port, say); each announcement has its own hooks.
func TestTwoAnnouncements(t *testing.T) {
	const url = "mem://fx-two"
	observer := openMem(t, url)
	srv := newTestServer("a")
	app := startApp(t, fx.Supply(rosterfx.Config{URL: url}), rosterfx.Module, srv.provide(),
		announce("greeter", 10*time.Millisecond, false), announce("greeter-admin", 10*time.Millisecond, false))
	for _, svc := range []string{"greeter", "greeter-admin"} {
		s, err := observer.Lookup(context.Background(), svc)
		if err != nil || len(s.Instances) != 1 {
			t.Fatalf("%s: %v, %v", svc, s.Instances, err)
		}
	}
	stopApp(t, app)
	for _, svc := range []string{"greeter", "greeter-admin"} {
		if s, _ := observer.Lookup(context.Background(), svc); len(s.Instances) != 0 {
			t.Fatalf("%s still registered after stop: %v", svc, s.Instances)
		}
	}
}
