package consul_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/roster-go/roster/internal/servers/consultest"
	"github.com/roster-go/roster/registry"
)

// The tests run against a real Consul agent (v1.13.9, MPL-2.0), built from
// the Go module proxy by tools/consul. scripts/test.sh builds it once into
// $ROSTER_CONSUL_BIN (default ~/.cache/roster/consul-1.13.9); consultest
// starts it.

func TestMain(m *testing.M) {
	code := m.Run()
	if code != 0 && shared.a != nil {
		// The agent's warnings and errors, for whoever reads the failure.
		fmt.Fprintf(os.Stderr, "--- consul agent log (tail) ---\n%s\n", shared.a.LogTail(6000))
	}
	shared.stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// sharedAgent is the one agent of the test binary, started on first use
// and killed by TestMain.
var shared sharedT

type sharedT struct {
	once sync.Once
	a    *consultest.Agent
	err  error
}

func sharedAgent(tb testing.TB) *consultest.Agent {
	tb.Helper()
	shared.once.Do(func() { shared.a, shared.err = consultest.NewAgent("") })
	if shared.err != nil {
		tb.Fatalf("cannot start the Consul agent: %v", shared.err)
	}
	return shared.a
}

// openRegistry opens a registry on a as the conformance suite does.
func openRegistry(tb testing.TB, a *consultest.Agent) (*registry.Registry, error) {
	h := consultest.NewHarness(tb, a)
	d, err := h.MakeDriver(context.Background())
	if err != nil {
		return nil, err
	}
	return registry.New(d, registry.WithResyncInterval(h.Config().ResyncInterval)), nil
}

func (s *sharedT) stop() {
	if s.a == nil {
		return
	}
	s.a.Stop()
	if p := os.Getenv("ROSTER_CONSUL_LOG"); p != "" {
		// Keep the agent's log (warnings and errors) for a post-mortem.
		if b, err := os.ReadFile(s.a.LogPath()); err == nil {
			_ = os.WriteFile(p, b, 0o644)
		}
	}
	s.a.Close()
}
