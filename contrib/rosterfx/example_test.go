package rosterfx_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"go.uber.org/fx"

	_ "github.com/roster-go/roster/backends/memory"
	rosterfx "github.com/roster-go/roster/contrib/rosterfx"
	rosterhttp "github.com/roster-go/roster/contrib/rosterhttp"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
)

// Server is an HTTP server in the usual fx shape.
type Server struct{ ln net.Listener }

func NewServer(lc fx.Lifecycle) *Server {
	s := &Server{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello")
	})}
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			s.ln = ln
			go srv.Serve(ln)
			return nil
		},
		OnStop: srv.Shutdown,
	})
	return s
}

// One app with a service announcing itself and a client calling it by
// name. On Stop the service deregisters, waits its drain window, and only
// then does the server stop.
func Example() {
	var hc *http.Client
	app := fx.New(
		fx.NopLogger,
		fx.Supply(rosterfx.Config{URL: "mem://example"}), // or $ROSTER_REGISTRY
		rosterfx.Module,
		rosterfx.ClientModule,
		fx.Provide(NewServer),
		rosterfx.Announce(func(s *Server) rosterfx.Announcement {
			return rosterfx.Announcement{
				Instance:    registry.Instance{Service: "greeter"},
				Addr:        func() string { return s.ln.Addr().String() },
				HealthPath:  "/healthz",
				DrainWindow: 100 * time.Millisecond,
			}
		}),
		fx.Provide(func(c *middleware.Client) *http.Client {
			return &http.Client{Transport: rosterhttp.New(c)}
		}),
		fx.Populate(&hc),
	)
	ctx := context.Background()
	if err := app.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	resp, err := hc.Get("http://greeter/")
	if err != nil {
		fmt.Println(err)
		return
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(string(b))
	if err := app.Stop(ctx); err != nil {
		fmt.Println(err)
	}
	// Output: hello
}
