package registry_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// rawDriver is a driver that does none of the chores: it returns
// instances out of order, raw errors, and records every call it gets.
type rawDriver struct {
	calls   atomic.Int32
	closed  atomic.Bool
	listErr error
	block   chan struct{} // List blocks on it until its context ends
	late    atomic.Bool   // a call arrived after Close
}

func (d *rawDriver) enter() {
	d.calls.Add(1)
	if d.closed.Load() {
		d.late.Store(true)
	}
}

func (d *rawDriver) Register(context.Context, driver.Instance, time.Duration) (driver.Registration, error) {
	d.enter()
	return nil, errors.New("raw: register refused")
}

func (d *rawDriver) List(ctx context.Context, service string) (driver.Snapshot, error) {
	d.enter()
	if d.block != nil {
		close(d.block)
		<-ctx.Done()
		return driver.Snapshot{}, errors.New("raw: list gave up")
	}
	if d.listErr != nil {
		return driver.Snapshot{}, d.listErr
	}
	return driver.Snapshot{Service: service, Revision: 1, Instances: []driver.Instance{
		{ID: "c", Service: service, Address: "10.0.0.3:80", Weight: 1},
		{ID: "a", Service: service, Address: "10.0.0.1:80", Weight: 1},
		{ID: "b", Service: service, Address: "10.0.0.2:80", Weight: 1},
	}}, nil
}

func (d *rawDriver) Watch(context.Context, string) (driver.Stream, error) {
	d.enter()
	return nil, errors.New("raw: no watch")
}

func (d *rawDriver) Services(context.Context) ([]string, error) { d.enter(); return nil, nil }
func (d *rawDriver) Limits() driver.Limits                      { return driver.Limits{} }

// ErrorKind classifies by text, as a table over a client's errors would.
func (d *rawDriver) ErrorKind(err error) error {
	if err.Error() == "raw: register refused" {
		return driver.ErrInvalid
	}
	return nil // not a sentinel: Registry counts it as unavailable
}

func (d *rawDriver) Close() error { d.closed.Store(true); return nil }

func TestRegistrySortsWhatTheDriverReturns(t *testing.T) {
	r := registry.New(&rawDriver{})
	defer r.Close()
	s, err := r.Lookup(t.Context(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, in := range s.Instances {
		ids = append(ids, in.ID)
	}
	if !slices.Equal(ids, []string{"a", "b", "c"}) {
		t.Errorf("Lookup order %v, want [a b c]: Registry sorts by ID", ids)
	}
}

func TestRegistryMapsDriverErrorsOnce(t *testing.T) {
	d := &rawDriver{listErr: errors.New("raw: connection reset")}
	r := registry.New(d)
	defer r.Close()
	_, err := r.Lookup(t.Context(), "svc")
	if !errors.Is(err, registry.ErrUnavailable) || !errors.Is(err, d.listErr) {
		t.Errorf("Lookup: %v, want the driver's error wrapped with ErrUnavailable", err)
	}
	_, err = r.Register(t.Context(), registry.Instance{Service: "svc", Address: "10.0.0.1:80"})
	if !errors.Is(err, registry.ErrInvalid) {
		t.Errorf("Register: %v, want ErrInvalid, the driver's ErrorKind", err)
	}
}

func TestRegistryKeepsEndedContextsFromTheDriver(t *testing.T) {
	d := &rawDriver{}
	r := registry.New(d)
	defer r.Close()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := r.Lookup(ctx, "svc"); !errors.Is(err, context.Canceled) {
		t.Errorf("Lookup on an ended context: %v, want context.Canceled", err)
	}
	if _, err := r.Services(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Services on an ended context: %v, want context.Canceled", err)
	}
	if n := d.calls.Load(); n != 0 {
		t.Errorf("the driver got %d calls on an ended context, want 0", n)
	}
}

// TestRegistryClosesTheDriverLast: a call in flight at Close is ended,
// the driver's Close runs after it returned, and no call follows.
func TestRegistryClosesTheDriverLast(t *testing.T) {
	d := &rawDriver{block: make(chan struct{})}
	r := registry.New(d)
	errc := make(chan error, 1)
	go func() { _, err := r.Lookup(context.Background(), "svc"); errc <- err }()
	<-d.block
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Lookup in flight at Close: %v, want ErrClosed", err)
	}
	if _, err := r.Lookup(context.Background(), "svc"); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Lookup after Close: %v, want ErrClosed", err)
	}
	if d.late.Load() {
		t.Error("the driver was called after its Close")
	}
}
