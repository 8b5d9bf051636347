package rosterfx_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/fx"

	_ "github.com/roster-go/roster/backends/redis"
	rosterfx "github.com/roster-go/roster/contrib/rosterfx"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

// lockedBuffer is a log destination that slog and the test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// downApp starts an announcing app on a Redis server that is stopped.
func downApp(t *testing.T, wait bool) (*redistest.Server, string, *lockedBuffer, *fx.App, error) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr() + "/0?dial_timeout=300ms"
	srv.Stop()
	logs := &lockedBuffer{}
	ts := newTestServer("late")
	app := fx.New(fx.NopLogger,
		fx.Supply(rosterfx.Config{URL: url}),
		rosterfx.Module,
		ts.provide(),
		rosterfx.Announce(func(s *testServer) rosterfx.Announcement {
			return rosterfx.Announcement{
				Instance:       registry.Instance{Service: "late", Metadata: map[string]string{"name": s.name}},
				Addr:           s.Addr,
				HealthPath:     "/healthz",
				DrainWindow:    200 * time.Millisecond,
				Options:        []registry.RegisterOption{registry.WithTTL(3 * time.Second)},
				WaitRegistered: wait,
				Logger:         slog.New(slog.NewTextHandler(logs, nil)),
			}
		}),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv, url, logs, app, app.Start(ctx)
}

// A service starts while its registry is down, serves, and registers
// once the registry is up; on stop it deregisters, drains, stops.
func TestStartWhileTheRegistryIsDown(t *testing.T) {
	srv, url, logs, app, err := downApp(t, false)
	if err != nil {
		t.Fatalf("start with the registry down: %v", err)
	}
	waitFor(t, 10*time.Second, "a logged retry", func() bool { return strings.Contains(logs.String(), "cannot register yet") })

	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	observer := openMem(t, url)
	h := watchHistory(t, observer, "late")
	waitFor(t, 20*time.Second, "registered once the registry is up", func() bool {
		_, ok := h.find(func(e event) bool { return e.name == "late" && !e.gone })
		return ok
	})
	stopApp(t, app)
	if _, ok := h.find(func(e event) bool { return e.name == "late" && e.gone }); !ok {
		t.Fatalf("not deregistered on stop:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "rosterfx: registered") {
		t.Errorf("no word of the registration:\n%s", logs.String())
	}
}

// Stopped before the registry came back: the stop is clean and nothing
// registers afterwards.
func TestStopNeverRegistered(t *testing.T) {
	srv, url, logs, app, err := downApp(t, false)
	if err != nil {
		t.Fatal(err)
	}
	stopApp(t, app)
	if !strings.Contains(logs.String(), "never registered") {
		t.Errorf("stop did not say it had nothing to deregister:\n%s", logs.String())
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	s, err := openMem(t, url).Lookup(context.Background(), "late")
	if err != nil || len(s.Instances) != 0 {
		t.Fatalf("after a stop while unregistered: %v %v", s.Instances, err)
	}
}

// WaitRegistered: the start fails as long as the registry is down.
func TestWaitRegisteredFailsWhileDown(t *testing.T) {
	_, _, _, app, err := downApp(t, true)
	if err == nil {
		stopApp(t, app)
		t.Fatal("started with the registry down and WaitRegistered")
	}
	if !strings.Contains(err.Error(), "rosterfx: announce late at 127.0.0.1:") {
		t.Fatalf("start error %v does not name the service", err)
	}
}
