package agent

import (
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// Server returns an http.Server for the agent with the timeouts of its
// Config, so that a slow or silent client cannot hold a connection. Serve
// it on Listener(ln), which caps the connections.
//
// The write timeout bounds the writing of an answer. A long poll's
// answer is due when its wait ends, so it moves its own deadline to then,
// and the event stream moves it before each event.
func (a *Agent) Server() *http.Server {
	return &http.Server{
		Handler:           a,
		ReadHeaderTimeout: min(10*time.Second, a.cfg.ReadTimeout),
		ReadTimeout:       a.cfg.ReadTimeout,
		WriteTimeout:      a.cfg.WriteTimeout,
		IdleTimeout:       a.cfg.IdleTimeout,
	}
}

// Listener returns ln accepting at most Config.MaxConns connections at a
// time. Past it, new connections wait in the kernel's backlog, not in
// the agent's file descriptors, until one closes.
func (a *Agent) Listener(ln net.Listener) net.Listener {
	return netutil.LimitListener(ln, a.cfg.MaxConns)
}

// extendDeadlines makes room for an answer due in d: the write deadline
// moves to d plus the write timeout, and the read deadline is lifted (a
// request whose body is read is done reading; the server still sees the
// client hang up). Without a server deadline, as under httptest, nothing
// is set.
func (a *Agent) extendDeadlines(w http.ResponseWriter, d time.Duration) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Now().Add(d + a.cfg.WriteTimeout))
}
