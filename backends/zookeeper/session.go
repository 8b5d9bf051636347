package zookeeper

import (
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/roster-go/roster/registry/driver"
)

// session is one ZooKeeper session of the driver, on a client that the
// library reconnects by itself. It tells watchers when the connection
// drops (lostC), and replaces the client when it stayed without a session
// for longer than the timeout: the server has expired the session by then,
// and a server that came back without its data refuses a client that saw
// newer transactions, so the old client would retry forever.
type session struct {
	d       *Driver
	timeout time.Duration

	mu        sync.Mutex
	conn      *zk.Conn
	gen       int       // which client the callbacks are about
	downSince time.Time // zero while the client has a session
	lost      chan struct{}
	closed    bool
}

func (d *Driver) newSession(timeout time.Duration) (*session, error) {
	s := &session{d: d, timeout: timeout, lost: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.dialLocked(); err != nil {
		return nil, err
	}
	return s, nil
}

// dialLocked starts a new client; it has no session until it connects.
func (s *session) dialLocked() error {
	s.gen++
	gen := s.gen
	conn, _, err := zk.Connect(s.d.opts.Servers, s.timeout,
		zk.WithLogger(quiet{}), zk.WithLogInfo(false),
		zk.WithEventCallback(func(ev zk.Event) { s.onEvent(gen, ev) }))
	if err != nil {
		return fmt.Errorf("zookeeper: %w: %v", driver.ErrInvalid, err)
	}
	if o := s.d.opts; o.User != "" {
		// Queued now, sent first once connected; the library adds the
		// credentials again on every reconnect.
		go func() { _ = conn.AddAuth("digest", []byte(o.User+":"+o.Password)) }()
	}
	s.conn, s.downSince = conn, time.Now()
	return nil
}

// onEvent follows the client's state. The library calls it from its
// receive loop: it must not block.
func (s *session) onEvent(gen int, ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen {
		return
	}
	switch ev.State {
	case zk.StateHasSession:
		s.downSince = time.Time{}
	case zk.StateDisconnected, zk.StateExpired:
		if s.downSince.IsZero() {
			s.downSince = time.Now()
			close(s.lost)
			s.lost = make(chan struct{})
		}
	}
}

// current returns the client, replacing it first when it has been
// without a session for longer than the session timeout.
func (s *session) current() *zk.Conn {
	s.mu.Lock()
	old := s.conn
	stuck := !s.closed && !s.downSince.IsZero() && time.Since(s.downSince) > s.timeout+time.Second
	if stuck && s.dialLocked() != nil {
		stuck = false
	}
	conn := s.conn
	s.mu.Unlock()
	if stuck {
		old.Close()
	}
	return conn
}

// lostC returns a channel closed when the connection next drops, and
// whether it is up now.
func (s *session) lostC() (<-chan struct{}, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost, s.downSince.IsZero()
}

// id is the current session ID, 0 while there is none.
func (s *session) id() int64 {
	conn := s.current()
	if conn.State() != zk.StateHasSession {
		return 0
	}
	return conn.SessionID()
}

func (s *session) close() {
	s.mu.Lock()
	s.closed = true
	conn := s.conn
	s.gen++
	s.mu.Unlock()
	conn.Close()
}

// quiet drops the client library's log lines: every state change reaches
// the driver as an event, and errors reach the caller.
type quiet struct{}

func (quiet) Printf(string, ...any) {}
