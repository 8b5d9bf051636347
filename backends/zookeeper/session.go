package zookeeper

import (
	"errors"
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
	authed    chan struct{} // closed once the client's credentials are in
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
	dial, hosts := transport(s.d.opts.TLS)
	conn, _, err := zk.Connect(s.d.opts.Servers, s.timeout,
		zk.WithLogger(libLogger{}), zk.WithDialer(dial), zk.WithHostProvider(hosts),
		zk.WithEventCallback(func(ev zk.Event) { s.onEvent(gen, ev) }))
	if err != nil {
		return fmt.Errorf("zookeeper: %w: %v", driver.ErrInvalid, err)
	}
	s.conn, s.downSince, s.authed = conn, time.Now(), make(chan struct{})
	if s.d.opts.User == "" {
		close(s.authed)
	} else {
		go s.addAuth(conn, gen, s.authed)
	}
	return nil
}

// addAuth adds the digest credentials to a new client, retrying while no
// server answers, and closes done when they are in (or refused, or the
// client replaced). The library sends them again by itself on every
// reconnect, before any other request.
func (s *session) addAuth(conn *zk.Conn, gen int, done chan struct{}) {
	defer close(done)
	cred := []byte(s.d.opts.User + ":" + s.d.opts.Password)
	for {
		err := conn.AddAuth("digest", cred)
		s.mu.Lock()
		stale := s.closed || gen != s.gen
		s.mu.Unlock()
		if err == nil || stale || errors.Is(err, zk.ErrAuthFailed) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
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
		s.d.ports.Sound() // a server answered: client and port speak the same protocol
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
	conn, authed := s.conn, s.authed
	s.mu.Unlock()
	if stuck {
		old.Close()
	}
	// Requests sent before the credentials would be made, and their
	// znodes created, without the identity.
	select {
	case <-authed:
	default:
		t := time.NewTimer(s.d.opts.RequestTimeout)
		defer t.Stop()
		select {
		case <-authed:
		case <-t.C:
		}
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
