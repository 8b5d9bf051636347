package memory_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
)

// The driver's errors get their kinds from its ErrorKind: a cut link and
// a server down are ErrUnavailable, a heartbeat of a deleted instance is
// ErrNotFound (the lease then registers it again).
func TestErrorKinds(t *testing.T) {
	srv := memory.NewServer()
	d := memory.NewDriver(srv)
	r := registry.New(d)
	defer r.Close()
	ctx := t.Context()
	d.SetReachable(false)
	if _, err := r.Lookup(ctx, "api"); !errors.Is(err, registry.ErrUnavailable) || !strings.Contains(err.Error(), "connection cut") {
		t.Errorf("Lookup over a cut link = %v, want ErrUnavailable saying so", err)
	}
	d.SetReachable(true)
	srv.SetReachable(false)
	if _, err := r.Services(ctx); !errors.Is(err, registry.ErrUnavailable) || !strings.Contains(err.Error(), "server unreachable") {
		t.Errorf("Services on a server down = %v, want ErrUnavailable saying so", err)
	}
	srv.SetReachable(true)
	got := make(chan error, 8)
	l, err := r.Register(ctx, registry.Instance{Service: "api", Address: "127.0.0.1:1"}, registry.WithTTL(time.Second),
		registry.WithHeartbeatInterval(20*time.Millisecond),
		registry.WithStateHook(func(_ registry.LeaseState, err error) { got <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Deregister(ctx)
	srv.Delete("api", l.Instance().ID)
	select {
	case err := <-got:
		if !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("lease error after an external delete = %v, want ErrNotFound", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no lease state change within 5s of an external delete")
	}
}
