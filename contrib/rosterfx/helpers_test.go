package rosterfx_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/goleak"

	rosterfx "github.com/roster-go/roster/contrib/rosterfx"
	"github.com/roster-go/roster/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testServer is an HTTP server in the usual fx shape: it listens in
// OnStart and shuts down gracefully in OnStop. It records when it stopped
// accepting.
type testServer struct {
	name      string
	srv       *http.Server
	ln        net.Listener
	done      chan struct{}
	calls     atomic.Int64
	stoppedAt atomic.Pointer[time.Time]
	healthy   atomic.Bool
}

func newTestServer(name string) *testServer {
	s := &testServer{name: name, done: make(chan struct{})}
	s.healthy.Store(true)
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if !s.healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		io.WriteString(w, s.name)
	})
	s.srv = &http.Server{Handler: mux}
	return s
}

func (s *testServer) listen() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.ln = ln
	go func() { defer close(s.done); _ = s.srv.Serve(ln) }()
	return nil
}

func (s *testServer) shutdown(ctx context.Context) error {
	now := time.Now()
	s.stoppedAt.Store(&now)
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}

func (s *testServer) Addr() string { return s.ln.Addr().String() }

// provide returns the fx constructor of the server, hooks included.
func (s *testServer) provide() fx.Option {
	return fx.Provide(func(lc fx.Lifecycle) *testServer {
		lc.Append(fx.Hook{
			OnStart: func(context.Context) error { return s.listen() },
			OnStop:  s.shutdown,
		})
		return s
	})
}

// announce is the announcement that depends on the server, as the
// package doc asks.
func announce(service string, window time.Duration, drain bool) fx.Option {
	return rosterfx.Announce(func(s *testServer) rosterfx.Announcement {
		return rosterfx.Announcement{
			Instance:            registry.Instance{Service: service, Metadata: map[string]string{"name": s.name}},
			Addr:                s.Addr,
			HealthPath:          "/healthz",
			HealthCheckInterval: 200 * time.Millisecond,
			DrainWindow:         window,
			Drain:               drain,
			Options:             []registry.RegisterOption{registry.WithTTL(3 * time.Second)},
		}
	})
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// history records, from a watch, when each instance (by name) was seen
// with which weight and when it disappeared.
type history struct {
	mu     sync.Mutex
	events []event
	cancel context.CancelFunc
	done   chan struct{}
}

type event struct {
	at     time.Time
	name   string
	weight uint32
	gone   bool
}

func watchHistory(t *testing.T, reg *registry.Registry, service string) *history {
	t.Helper()
	w, err := reg.Watch(context.Background(), service)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &history{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		defer w.Close()
		prev := map[string]uint32{}
		for {
			s, err := w.Next(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				continue
			}
			now := time.Now()
			cur := map[string]uint32{}
			h.mu.Lock()
			for _, in := range s.Instances {
				n := in.Metadata["name"]
				cur[n] = in.Weight
				if w, ok := prev[n]; !ok || w != in.Weight {
					h.events = append(h.events, event{at: now, name: n, weight: in.Weight})
				}
			}
			for n := range prev {
				if _, ok := cur[n]; !ok {
					h.events = append(h.events, event{at: now, name: n, gone: true})
				}
			}
			h.mu.Unlock()
			prev = cur
		}
	}()
	t.Cleanup(h.stop)
	return h
}

func (h *history) stop() {
	h.cancel()
	<-h.done
}

func (h *history) find(f func(event) bool) (event, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.events {
		if f(e) {
			return e, true
		}
	}
	return event{}, false
}
