package registry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// probe is a backend whose List and Services record the deadline of the
// context they are given and answer at once, or, when block is set, only
// when that context ends (a backend that never answers).
type probe struct {
	driver.Driver
	block     bool
	ioTimeout bool           // when blocking, end as a connection deadline does: at the deadline, own error
	deadlines chan time.Time // zero: no deadline
	release   chan struct{}  // closed at cleanup, should a call outlive the test
}

func newProbe(t *testing.T, block bool) (*probe, *registry.Registry) {
	p := &probe{Driver: memory.NewDriver(memory.NewServer()), block: block, deadlines: make(chan time.Time, 8), release: make(chan struct{})}
	r := registry.New(p)
	t.Cleanup(func() { close(p.release); r.Close() })
	return p, r
}

func (p *probe) wait(ctx context.Context) error {
	d, _ := ctx.Deadline()
	p.deadlines <- d
	if !p.block {
		return nil
	}
	if p.ioTimeout {
		for time.Now().Before(d) {
			time.Sleep(time.Until(d) / 2)
		}
		return errors.New("read tcp: i/o timeout")
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-p.release:
		return errors.New("released")
	}
}

func (p *probe) List(ctx context.Context, svc string) (driver.Snapshot, error) {
	return driver.Snapshot{Service: svc}, p.wait(ctx)
}

func (p *probe) Services(ctx context.Context) ([]string, error) { return nil, p.wait(ctx) }

// calls are the two registry calls that ask the backend once.
func calls(r *registry.Registry) map[string]func(context.Context) error {
	return map[string]func(context.Context) error{
		"Lookup":   func(ctx context.Context) error { _, err := r.Lookup(ctx, "api"); return err },
		"Services": func(ctx context.Context) error { _, err := r.Services(ctx); return err },
	}
}

// The backend is asked under the caller's deadline, shorter or longer
// than the default, or DefaultLookupTimeout when the caller has none.
func TestLookupDeadline(t *testing.T) {
	p, r := newProbe(t, false)
	for what, call := range calls(r) {
		start := time.Now()
		if err := call(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := <-p.deadlines
		if d := got.Sub(start); got.IsZero() || d < registry.DefaultLookupTimeout || d > registry.DefaultLookupTimeout+time.Second {
			t.Errorf("%s without a deadline: the backend was asked with deadline %v (zero: none); want DefaultLookupTimeout (%v) away", what, got, registry.DefaultLookupTimeout)
		}
		for _, d := range []time.Duration{time.Hour, time.Second} {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			want, _ := ctx.Deadline()
			err := call(ctx)
			cancel()
			if got := <-p.deadlines; err != nil || !got.Equal(want) {
				t.Errorf("%s with a deadline %v away: the backend's is %v, want the caller's %v (err %v)", what, d, got, want, err)
			}
		}
	}
}

// A backend that never answers: a call without a deadline ends at the
// default bound with ErrUnavailable; one with a deadline ends at it with
// the caller's context error.
func TestLookupBoundedAgainstSilentBackend(t *testing.T) {
	p, r := newProbe(t, true)
	registry.SetLookupTimeout(r, 100*time.Millisecond)
	for what, call := range calls(r) {
		err := within(t, 5*time.Second, what, func() error { return call(context.Background()) })
		<-p.deadlines
		if !errors.Is(err, registry.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "within 100ms") {
			t.Errorf("%s past the default bound: %v; want ErrUnavailable and DeadlineExceeded, naming the bound", what, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err = within(t, 5*time.Second, what, func() error { return call(ctx) })
		cancel()
		<-p.deadlines
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, registry.ErrUnavailable) {
			t.Errorf("%s past the caller's deadline: %v; want its DeadlineExceeded, not ErrUnavailable", what, err)
		}
	}
}

// A backend whose connection deadline, set from the context, ends the
// call a moment before the context reports its expiry: past the default
// bound, the error is still the bound's.
func TestLookupBoundedAgainstIOTimeout(t *testing.T) {
	p, r := newProbe(t, true)
	p.ioTimeout = true
	registry.SetLookupTimeout(r, 20*time.Millisecond)
	for range 20 {
		for what, call := range calls(r) {
			err := within(t, 5*time.Second, what, func() error { return call(context.Background()) })
			<-p.deadlines
			if !errors.Is(err, registry.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s ended by an i/o timeout at the default bound: %v; want ErrUnavailable and DeadlineExceeded", what, err)
			}
		}
	}
}

// within runs f and fails the test if it does not return within d.
func within(t *testing.T, d time.Duration, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("%s: no answer within %v from a backend that never answers", what, d)
		return nil
	}
}
