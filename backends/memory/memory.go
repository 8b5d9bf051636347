// Package memory is an in-process registry backend with real TTL expiry.
// Import it for its side effect and open it by URL with registry.Open:
//
//	import _ "github.com/roster-go/roster/backends/memory"
//
//	reg, err := registry.Open(ctx, "mem://")      // a private server
//	reg, err := registry.Open(ctx, "mem://shop")  // shared by name in the process
//
// To hold the server yourself, call [NewServer] and pass [NewDriver](srv)
// to registry.New. Several drivers on one server act as separate processes.
//
// It is for unit tests of the layers above and for examples. It passes the
// same conformance suite as the other backends, but it never proves that a
// networked backend works.
//
// A [Server]'s SetReachable, Wipe and Delete are the fault hooks the
// conformance suite uses. [Driver.SetReachable] cuts one driver off alone. Package memorytest is its
// conformance harness.
package memory

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/roster-go/roster/registry/driver"
)

// Scheme is the URL scheme of this backend.
const Scheme = "mem"

func init() {
	driver.Register(Scheme, func(_ context.Context, u *url.URL) (driver.Driver, error) {
		// ParseQuery rejects "mem:name" (the "//" forgotten), which would
		// otherwise open a private server silently.
		if _, err := backend.ParseQuery(Scheme, u); err != nil {
			return nil, err
		}
		if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
			return nil, backend.InvalidURL(Scheme, "it takes only a name (mem://name)")
		}
		if u.Host == "" {
			return NewDriver(NewServer()), nil
		}
		return NewDriver(Named(u.Host)), nil
	})
}

var (
	namedMu sync.Mutex
	named   = map[string]*Server{}
)

// Named returns the process-wide server with the given name, creating it
// on first use.
func Named(name string) *Server {
	namedMu.Lock()
	defer namedMu.Unlock()
	s := named[name]
	if s == nil {
		s = NewServer()
		named[name] = s
	}
	return s
}

// Server is the shared store: what a real backend's server would be.
type Server struct {
	mu       sync.Mutex
	rev      uint64
	services map[string]map[string]*record
	down     bool
	changed  chan struct{} // closed and replaced on every change
	timer    *time.Timer   // fires at the earliest deadline
	timerAt  time.Time
	records  map[string]driver.Record // the record store (store.go)
	recSeq   uint64                   // last record version given
}

type record struct {
	inst     driver.Instance
	deadline time.Time
}

// NewServer returns an empty server.
func NewServer() *Server {
	return &Server{services: map[string]map[string]*record{}, changed: make(chan struct{})}
}

// SetReachable simulates a network partition: while false, every client
// call fails with ErrUnavailable and open watch streams break. TTLs keep
// running on the server, as they would on a real one.
func (s *Server) SetReachable(ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = !ok
	s.notify()
}

// Wipe deletes all data and resets the revision counter, as a backend
// restarted on an empty data directory would.
func (s *Server) Wipe() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.services = map[string]map[string]*record{}
	s.records = nil
	s.rev = 0
	s.notify()
}

// Delete removes one instance behind its owner's back.
func (s *Server) Delete(service, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.services[service][id]; !ok {
		return false
	}
	delete(s.services[service], id)
	s.bump()
	return true
}

// bump records a change; s.mu held.
func (s *Server) bump() {
	s.rev++
	s.notify()
}

func (s *Server) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// sweep deletes expired records and re-arms the expiry timer; s.mu held.
func (s *Server) sweep(now time.Time) {
	var next time.Time
	removed := false
	for svc, m := range s.services {
		for id, r := range m {
			if !r.deadline.After(now) {
				delete(m, id)
				removed = true
				continue
			}
			if next.IsZero() || r.deadline.Before(next) {
				next = r.deadline
			}
		}
		if len(m) == 0 {
			delete(s.services, svc)
		}
	}
	if removed {
		s.bump()
	}
	s.arm(next)
}

// arm makes the timer fire at t (zero: no timer); s.mu held. A timer is
// not a goroutine, so an idle server leaks nothing.
func (s *Server) arm(t time.Time) {
	if t.IsZero() {
		if s.timer != nil {
			s.timer.Stop()
		}
		s.timerAt = time.Time{}
		return
	}
	if !s.timerAt.IsZero() && !t.Before(s.timerAt) && s.timer != nil {
		return
	}
	s.timerAt = t
	d := time.Until(t)
	if s.timer == nil {
		s.timer = time.AfterFunc(d, s.expire)
	} else {
		s.timer.Reset(d)
	}
}

func (s *Server) expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timerAt = time.Time{}
	s.sweep(time.Now())
}

// The driver's errors, classified by ErrorKind.
var (
	errDown = errors.New("memory: server unreachable")
	errCut  = errors.New("memory: connection cut")
	errGone = errors.New("instance gone")
)

func (s *Server) unavailable() error {
	if s.down {
		return errDown
	}
	return nil
}

func (s *Server) put(inst driver.Instance, ttl time.Duration) {
	m := s.services[inst.Service]
	if m == nil {
		m = map[string]*record{}
		s.services[inst.Service] = m
	}
	dl := time.Now().Add(ttl)
	m[inst.ID] = &record{inst: inst.Clone(), deadline: dl}
	s.bump()
	s.arm(dl)
}

// list returns the live instances of service, in no order; s.mu held.
func (s *Server) list(service string) driver.Snapshot {
	now := time.Now()
	snap := driver.Snapshot{Service: service, Revision: s.rev, At: now, Instances: []driver.Instance{}}
	for _, r := range s.services[service] {
		if r.deadline.After(now) {
			snap.Instances = append(snap.Instances, r.inst.Clone())
		}
	}
	return snap
}

// Driver is a client of a Server.
type Driver struct {
	srv  *Server
	mu   sync.Mutex
	cut  bool
	wake chan struct{} // closed and replaced when cut changes
}

// NewDriver returns a driver talking to srv. Wrap it with registry.New.
func NewDriver(srv *Server) *Driver { return &Driver{srv: srv, wake: make(chan struct{})} }

// SetReachable cuts this client off from the server (false) or reconnects
// it (true), leaving other clients alone: a one-sided network partition.
func (d *Driver) SetReachable(ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cut = !ok
	close(d.wake)
	d.wake = make(chan struct{})
}

// link returns the channel closed when the link next changes, and
// errCut while the link is cut.
func (d *Driver) link() (<-chan struct{}, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		return d.wake, errCut
	}
	return d.wake, nil
}

// begin starts a call: it checks the link and the server, and returns
// the server locked. The caller unlocks s.mu.
func (d *Driver) begin() (*Server, error) {
	if _, err := d.link(); err != nil {
		return nil, err
	}
	s := d.srv
	s.mu.Lock()
	if err := s.unavailable(); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	return s, nil
}

// Limits: TTLs down to 10ms, millisecond granularity.
func (d *Driver) Limits() driver.Limits {
	return driver.Limits{MinTTL: 10 * time.Millisecond, TTLGranularity: time.Millisecond}
}

// Local reports true: the server is in this process, so loopback
// addresses are served (see registry.AllowLoopback).
func (d *Driver) Local() bool { return true }

// Register implements driver.Driver.
func (d *Driver) Register(_ context.Context, inst driver.Instance, ttl time.Duration) (driver.Registration, error) {
	s, err := d.begin()
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	s.put(inst, ttl)
	return &registration{d: d, service: inst.Service, id: inst.ID, ttl: ttl}, nil
}

type registration struct {
	d           *Driver
	service, id string
	ttl         time.Duration
}

func (r *registration) Heartbeat(context.Context) error {
	s, err := r.d.begin()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	rec := s.services[r.service][r.id]
	if rec == nil || !rec.deadline.After(time.Now()) {
		return fmt.Errorf("memory: heartbeat %s: %w", r.id, errGone)
	}
	rec.deadline = time.Now().Add(r.ttl)
	s.arm(rec.deadline)
	return nil
}

func (r *registration) Update(_ context.Context, inst driver.Instance) error {
	s, err := r.d.begin()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	s.put(inst, r.ttl)
	return nil
}

func (r *registration) Deregister(context.Context) error {
	s, err := r.d.begin()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, ok := s.services[r.service][r.id]; ok {
		delete(s.services[r.service], r.id)
		if len(s.services[r.service]) == 0 {
			delete(s.services, r.service)
		}
		s.bump()
	}
	return nil
}

// List implements driver.Driver.
func (d *Driver) List(_ context.Context, service string) (driver.Snapshot, error) {
	s, err := d.begin()
	if err != nil {
		return driver.Snapshot{}, err
	}
	defer s.mu.Unlock()
	return s.list(service), nil
}

// Services implements driver.Driver.
func (d *Driver) Services(context.Context) ([]string, error) {
	s, err := d.begin()
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []string
	for svc := range s.services {
		if len(s.list(svc).Instances) > 0 {
			out = append(out, svc)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Watch implements driver.Driver.
func (d *Driver) Watch(_ context.Context, service string) (driver.Stream, error) {
	s, err := d.begin()
	if err != nil {
		return nil, err
	}
	s.mu.Unlock()
	return &stream{d: d, service: service, closed: make(chan struct{})}, nil
}

type stream struct {
	d       *Driver
	service string
	changed <-chan struct{} // closed at the server's next change; nil before the first Next
	wake    <-chan struct{} // closed at the link's next change
	closed  chan struct{}
	once    sync.Once
}

// Next returns the current state at once the first time, then after each
// change of the server or the link. A change of another service returns
// the same state again: Registry drops repeats.
func (st *stream) Next(ctx context.Context) (driver.Snapshot, error) {
	var snap driver.Snapshot
	err := st.wait(ctx, func(s *Server) { snap = s.list(st.service) })
	return snap, err
}

// wait returns at once the first time, then after each change of the
// server or the link, and calls read with the server locked.
func (st *stream) wait(ctx context.Context, read func(*Server)) error {
	if st.changed != nil {
		select {
		case <-st.changed:
		case <-st.wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-st.closed:
			return fmt.Errorf("memory: watch: %w", driver.ErrClosed)
		}
	}
	// Read the link's channel before checking the link, so a cut made
	// after the check still wakes the next wait.
	wake, err := st.d.link()
	if err != nil {
		return err
	}
	s := st.d.srv
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.unavailable(); err != nil {
		return err
	}
	st.changed, st.wake = s.changed, wake
	read(s)
	return nil
}

func (st *stream) Close() error {
	st.once.Do(func() { close(st.closed) })
	return nil
}

// Close implements driver.Driver. The server lives on.
func (d *Driver) Close() error { return nil }

// ErrorKind implements driver.Driver: a heartbeat of an instance the
// server no longer holds is ErrNotFound; an unreachable server and a cut
// link are ErrUnavailable.
func (d *Driver) ErrorKind(err error) error {
	if errors.Is(err, errGone) {
		return driver.ErrNotFound
	}
	return driver.ErrUnavailable
}
