// Command fx-service is a complete Roster service and client built with
// go.uber.org/fx. Run it:
//
//	go run ./examples/fx-service                           # embedded etcd
//	ROSTER_REGISTRY=etcd://127.0.0.1:2379 go run ./examples/fx-service   # e.g. on "roster dev"
//
// Two instances of a "greeter" HTTP service announce themselves with
// rosterfx. A client calls http://greeter/ through rosterhttp. One
// instance stops gracefully while the client is calling, and no request
// fails. It exits by itself after a few seconds.
//
// Each fx app here stands for a separate process. They share a process
// only to make the demonstration self-contained.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	_ "github.com/roster-go/roster/backends/all" // $ROSTER_REGISTRY may name any scheme
	"github.com/roster-go/roster/backends/etcd/etcdlocal"
	rosterfx "github.com/roster-go/roster/contrib/rosterfx"
	rosterhttp "github.com/roster-go/roster/contrib/rosterhttp"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
)

// Server is the greeter's HTTP server, in the usual fx shape: it listens
// when the app starts and shuts down gracefully when it stops.
type Server struct {
	name string
	srv  *http.Server
	ln   net.Listener
}

// NewServer builds the server and appends its lifecycle hooks.
func NewServer(lc fx.Lifecycle, name string) *Server {
	s := &Server{name: name}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", s.name)
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			s.ln = ln
			go s.srv.Serve(ln)
			return nil
		},
		OnStop: func(ctx context.Context) error {
			log.Printf("%s: server stops accepting (in-flight requests finish)", s.name)
			return s.srv.Shutdown(ctx)
		},
	})
	return s
}

// Addr is the address the server listens on, once started.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// fxLogger logs fx's events through slog: errors (a constructor or a
// start hook that failed) at error level, the rest at debug, hidden by
// default. With fx.NopLogger a failed start would exit 1 saying nothing.
func fxLogger() fxevent.Logger {
	l := &fxevent.SlogLogger{Logger: slog.Default()}
	l.UseLogLevel(slog.LevelDebug)
	return l
}

// greeter is one instance of the service: one process, one fx app.
func greeter(url, name string) *fx.App {
	return fx.New(
		fx.WithLogger(fxLogger),
		fx.Supply(rosterfx.Config{URL: url}),
		rosterfx.Module,
		fx.Provide(func(lc fx.Lifecycle) *Server { return NewServer(lc, name) }),
		// The announcement takes the server: fx starts the server first and
		// stops it last, around the registration.
		rosterfx.Announce(func(s *Server) rosterfx.Announcement {
			return rosterfx.Announcement{
				Instance:    registry.Instance{Service: "greeter", Version: "1.0.0", Metadata: map[string]string{"name": name}},
				Addr:        s.Addr,
				HealthPath:  "/healthz",
				DrainWindow: time.Second,
			}
		}),
	)
}

// client is the calling service: a middleware.Client from ClientModule
// behind an http.Client.
func client(url string, hc **http.Client) *fx.App {
	return fx.New(
		fx.WithLogger(fxLogger),
		fx.Supply(rosterfx.Config{URL: url}),
		rosterfx.Module,
		rosterfx.ClientModule,
		fx.Provide(func(c *middleware.Client) *http.Client {
			return &http.Client{Transport: rosterhttp.New(c), Timeout: 5 * time.Second}
		}),
		fx.Populate(hc),
	)
}

func main() {
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	if err := run(); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := os.Getenv(rosterfx.EnvURL)
	if url == "" {
		srv, err := etcdlocal.Start(ctx, etcdlocal.Config{Addr: "127.0.0.1:0"}) // free port, throwaway data
		if err != nil {
			return err
		}
		defer srv.Close()
		url = srv.URL() + "?prefix=/roster-example"
		log.Printf("%s is unset: started an embedded etcd, %s", rosterfx.EnvURL, url)
	}

	g1, g2 := greeter(url, "greeter-1"), greeter(url, "greeter-2")
	for _, app := range []*fx.App{g1, g2} {
		if err := app.Start(ctx); err != nil {
			return err
		}
	}
	defer g2.Stop(context.Background())
	log.Print("greeter-1 and greeter-2: listening, healthy, registered")

	var hc *http.Client
	cl := client(url, &hc)
	if err := cl.Start(ctx); err != nil {
		return err
	}
	defer cl.Stop(context.Background())

	for range 4 {
		body, err := get(ctx, hc)
		if err != nil {
			return err
		}
		log.Printf("client: GET http://greeter/ → %s", body)
	}

	// Keep calling while greeter-1 leaves: deregister, drain window, stop.
	var ok, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				if _, err := get(ctx, hc); err != nil {
					failed.Add(1)
					log.Printf("client: %v", err)
					continue
				}
				ok.Add(1)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	log.Print("greeter-1: stopping (deregister → wait for watchers → stop the server)")
	if err := g1.Stop(ctx); err != nil {
		return err
	}
	log.Print("greeter-1: stopped")
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	log.Printf("client: %d requests during greeter-1's shutdown, %d failed", ok.Load(), failed.Load())
	if failed.Load() > 0 {
		return fmt.Errorf("%d requests failed", failed.Load())
	}
	return nil
}

func get(ctx context.Context, hc *http.Client) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://greeter/", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
