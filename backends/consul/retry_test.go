package consul

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roster-go/roster/registry"
)

// scripted serves the agent's write endpoints with the statuses of script,
// one per request (the last one repeats), and counts the requests.
type scripted struct {
	mu     sync.Mutex
	script []scriptStep
	n      int
}

type scriptStep struct {
	code int
	body string
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	st := s.script[min(s.n, len(s.script)-1)]
	s.n++
	s.mu.Unlock()
	if st.code != http.StatusOK {
		http.Error(w, st.body, st.code)
	}
}

func (s *scripted) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func scriptedDriver(t *testing.T, steps ...scriptStep) (*Driver, *scripted) {
	t.Helper()
	s := &scripted{script: steps}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	d, err := NewDriver(Options{Address: strings.TrimPrefix(srv.URL, "http://"), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, s
}

var (
	ok         = scriptStep{http.StatusOK, ""}
	tooMany    = scriptStep{http.StatusTooManyRequests, "Your IP is issuing too many concurrent connections"}
	noLeader   = scriptStep{http.StatusInternalServerError, "No cluster leader"}
	unknown    = scriptStep{http.StatusNotFound, `Unknown check ID "service:x"`}
	noTTL      = scriptStep{http.StatusInternalServerError, `CheckID "service:x" does not have associated TTL`}
	badRequest = scriptStep{http.StatusBadRequest, "Invalid service address"}
)

// mapped is err as Registry returns it: with the sentinel ErrorKind
// gives, unless it wraps one already.
func mapped(d *Driver, err error) error {
	if err == nil || isRegistryError(err) {
		return err
	}
	return fmt.Errorf("%w: %w", err, d.ErrorKind(err))
}

var inst = registry.Instance{ID: "svc-1", Service: "svc", Address: "127.0.0.1:80", Weight: 1}

// 429 and 5xx are retried within the call; 404, the old agents' lost-check
// 500 and 400 are not.
func TestWritesRetryBusyAgent(t *testing.T) {
	t.Run("register after 429, 500", func(t *testing.T) {
		d, s := scriptedDriver(t, tooMany, noLeader, ok)
		if _, err := d.Register(t.Context(), inst, 3*time.Second); err != nil {
			t.Fatalf("Register = %v, want success on the third attempt", err)
		}
		if n := s.requests(); n != 3 {
			t.Errorf("%d requests, want 3", n)
		}
	})
	t.Run("register 400", func(t *testing.T) {
		d, s := scriptedDriver(t, badRequest, ok)
		if _, err := d.Register(t.Context(), inst, 3*time.Second); !errors.Is(mapped(d, err), registry.ErrInvalid) {
			t.Fatalf("Register = %v, want ErrInvalid", err)
		}
		if n := s.requests(); n != 1 {
			t.Errorf("%d requests, want 1: a bad request is not retried", n)
		}
	})
	for _, c := range []struct {
		name string
		lost scriptStep
	}{{"404", unknown}, {"500 without TTL", noTTL}} {
		t.Run("heartbeat lost check "+c.name, func(t *testing.T) {
			d, s := scriptedDriver(t, ok, c.lost, ok)
			reg, err := d.Register(t.Context(), inst, 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if err := reg.Heartbeat(t.Context()); !errors.Is(mapped(d, err), registry.ErrNotFound) {
				t.Fatalf("Heartbeat = %v, want ErrNotFound", err)
			}
			if n := s.requests(); n != 2 {
				t.Errorf("%d requests, want 2: a lost check is not retried", n)
			}
		})
	}
	t.Run("heartbeat after 429", func(t *testing.T) {
		d, s := scriptedDriver(t, ok, tooMany, tooMany, ok)
		reg, err := d.Register(t.Context(), inst, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Heartbeat(t.Context()); err != nil {
			t.Fatalf("Heartbeat = %v, want success on the third attempt", err)
		}
		if n := s.requests(); n != 4 {
			t.Errorf("%d requests, want 4", n)
		}
	})
	t.Run("update after 503", func(t *testing.T) {
		d, _ := scriptedDriver(t, ok, scriptStep{http.StatusServiceUnavailable, "busy"}, ok)
		reg, err := d.Register(t.Context(), inst, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Update(t.Context(), inst); err != nil {
			t.Fatalf("Update = %v, want success on the second attempt", err)
		}
	})
}

// A 429 that lasts is ErrUnavailable, saying 429, within the caller's
// deadline.
func TestPersistent429IsUnavailable(t *testing.T) {
	d, s := scriptedDriver(t, tooMany)
	ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := d.Register(ctx, inst, 3*time.Second)
	if !errors.Is(mapped(d, err), registry.ErrUnavailable) || !strings.Contains(err.Error(), "429") {
		t.Fatalf("Register = %v, want ErrUnavailable saying 429", err)
	}
	if took := time.Since(start); took > 700*time.Millisecond+500*time.Millisecond {
		t.Errorf("Register took %v, past its 700ms deadline", took)
	}
	if n := s.requests(); n < 3 {
		t.Errorf("%d requests within 700ms, want a few retries", n)
	}
}

// Deregister retries until it succeeds or its context ends; gone already
// is success.
func TestDeregisterRetriesUntilContextEnds(t *testing.T) {
	t.Run("until success", func(t *testing.T) {
		d, s := scriptedDriver(t, ok, tooMany, noLeader, noLeader, noLeader, unknown)
		reg, err := d.Register(t.Context(), inst, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Deregister(t.Context()); err != nil {
			t.Fatalf("Deregister = %v, want success (404: gone) after retries", err)
		}
		if n := s.requests(); n != 6 {
			t.Errorf("%d requests, want 6", n)
		}
	})
	t.Run("until the context ends", func(t *testing.T) {
		d, s := scriptedDriver(t, ok, noLeader)
		reg, err := d.Register(t.Context(), inst, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// Longer than the driver's 2s timeout: deregister is not bounded by it.
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		start := time.Now()
		if err := reg.Deregister(ctx); err == nil {
			t.Fatal("Deregister succeeded against an agent answering 500")
		}
		if took := time.Since(start); took < 2*time.Second {
			t.Errorf("Deregister gave up after %v, before its context ended (3s)", took)
		}
		t.Logf("%d requests", s.requests())
	})
}

// Heartbeats never queue behind registrations: with every connection but
// the reserved quarter taken by registrations the agent is slow to answer,
// and more registrations waiting, a heartbeat goes through at once.
func TestHeartbeatsPassQueuedRegistrations(t *testing.T) {
	release := make(chan struct{})
	var blocking atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/agent/service/register") && blocking.Load() {
			<-release // an agent busy with a burst of registrations
		}
	}))
	defer srv.Close()
	defer close(release) // before srv.Close: its handlers must return
	d, err := NewDriver(Options{Address: strings.TrimPrefix(srv.URL, "http://"), MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	reg, err := d.Register(t.Context(), inst, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	blocking.Store(true)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for i := range 10 {
		other := inst
		other.ID = fmt.Sprintf("svc-other-%d", i)
		go func() { _, _ = d.Register(ctx, other, 10*time.Second) }()
	}
	// Wait until the registrations hold every connection they may.
	for deadline := time.Now().Add(5 * time.Second); len(d.bulk) < cap(d.bulk); {
		if time.Now().After(deadline) {
			t.Fatalf("%d registrations in flight after 5s, want %d", len(d.bulk), cap(d.bulk))
		}
		time.Sleep(time.Millisecond) // polling period
	}
	hctx, hcancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer hcancel()
	if err := reg.Heartbeat(hctx); err != nil {
		t.Fatalf("Heartbeat behind %d registrations = %v, want it through at once", 10, err)
	}
}
