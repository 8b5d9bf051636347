// Package rosterfx plugs Roster into go.uber.org/fx applications. Use
// [Module] for a Registry, [ClientModule] for a middleware.Client, and
// [Announce] to register the service being built.
//
//	fx.New(
//		rosterfx.Module,       // *registry.Registry from Config or $ROSTER_REGISTRY
//		rosterfx.ClientModule, // *middleware.Client
//		fx.Provide(NewHTTPServer),
//		rosterfx.Announce(func(s *HTTPServer) rosterfx.Announcement {
//			return rosterfx.Announcement{
//				Instance:   registry.Instance{Service: "greeter"},
//				Addr:       s.Addr, // known once the server listens
//				HealthPath: "/healthz",
//			}
//		}),
//	).Run()
//
// Announce registers and deregisters in the order that loses no request.
// At start the server listens first. The announcement then waits for the
// health check to pass, and registers. At stop the announcement
// deregisters first, or sets weight 0 with Drain. It waits until its own
// watch shows the change, then waits DrainWindow for other watchers. Only
// then does the server stop accepting.
//
// A process with several ports (HTTP and gRPC) announces them as
// Announcement.Endpoints in one registration. It leaves as one, with one
// deregistration and one drain window.
//
// That order holds only if the announcement's constructor takes the server
// as a parameter. fx then builds the server first, starts it first and
// stops it last. Without the dependency fx may reverse the order.
//
// If the registry cannot be reached at start, the app starts all the same.
// The registration is retried in the background, each failure logged, and
// the instance gets traffic once registered. Set
// Announcement.WaitRegistered to make the start fail instead. Other start
// errors fail fx's Start with the service and address named.
//
// See docs/integration.md for the measured shutdown order and every start
// error.
package rosterfx

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.uber.org/fx"

	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
)

// EnvURL is the environment variable read when Config.URL is empty.
const EnvURL = "ROSTER_REGISTRY"

// Config configures the Registry that Module provides. Supply it with
// fx.Supply(rosterfx.Config{...}) or a constructor; without one, the URL
// comes from $ROSTER_REGISTRY.
type Config struct {
	// URL is the registry URL ("etcd://10.0.0.1:2379", "mem://", …).
	// Empty: $ROSTER_REGISTRY.
	URL string
	// OpenTimeout bounds opening the registry (default 10s).
	OpenTimeout time.Duration
}

// Module provides a *registry.Registry opened from Config (or
// $ROSTER_REGISTRY), with any registry.Option values supplied in the
// "roster.registry_options" group, and closes it on stop. Import the
// backend packages whose schemes you use.
var Module = fx.Module("roster", fx.Provide(newRegistry))

// ClientModule provides a *middleware.Client over the Registry, with any
// middleware.Option values supplied in the "roster.client_options" group,
// and closes it on stop (before the Registry).
var ClientModule = fx.Module("roster.client", fx.Provide(newClient))

// registryParams are newRegistry's parameters.
type registryParams struct {
	fx.In
	Lifecycle fx.Lifecycle
	Config    Config            `optional:"true"`
	Options   []registry.Option `group:"roster.registry_options"`
}

// newRegistry opens the registry and closes it when the app stops.
func newRegistry(p registryParams) (*registry.Registry, error) {
	url := p.Config.URL
	if url == "" {
		url = os.Getenv(EnvURL)
	}
	if url == "" {
		return nil, fmt.Errorf("rosterfx: no registry URL: set rosterfx.Config.URL or $%s", EnvURL)
	}
	timeout := p.Config.OpenTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	reg, err := registry.Open(ctx, url, p.Options...)
	if err != nil {
		return nil, fmt.Errorf("rosterfx: open registry: %w", err) // Open redacts credentials
	}
	p.Lifecycle.Append(fx.StopHook(func(ctx context.Context) error {
		// Within fx's stop deadline: leases it leaves expire at their TTL.
		if err := reg.Shutdown(ctx); err != nil && !errors.Is(err, registry.ErrClosed) {
			return fmt.Errorf("rosterfx: close %s: %w", reg, err)
		}
		return nil
	}))
	return reg, nil
}

// RegistryOptions supplies registry options to Module's Registry.
func RegistryOptions(opts ...registry.Option) fx.Option {
	return group(`group:"roster.registry_options"`, opts)
}

// group provides each of values into the fx value group named by tag.
func group[T any](tag string, values []T) fx.Option {
	out := make([]fx.Option, 0, len(values))
	for _, v := range values {
		out = append(out, fx.Provide(fx.Annotate(func() T { return v }, fx.ResultTags(tag))))
	}
	return fx.Options(out...)
}

// clientParams are newClient's parameters.
type clientParams struct {
	fx.In
	Lifecycle fx.Lifecycle
	Registry  *registry.Registry
	Options   []middleware.Option `group:"roster.client_options"`
}

// newClient returns a middleware.Client over the registry, closed on stop.
func newClient(p clientParams) (*middleware.Client, error) {
	c, err := middleware.NewClient(p.Registry, p.Options...)
	if err != nil {
		return nil, fmt.Errorf("rosterfx: client: %w", err)
	}
	p.Lifecycle.Append(fx.StopHook(c.Close))
	return c, nil
}

// ClientOptions supplies middleware options to ClientModule's Client.
func ClientOptions(opts ...middleware.Option) fx.Option {
	return group(`group:"roster.client_options"`, opts)
}
