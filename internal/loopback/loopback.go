// Package loopback holds the networking pieces backend tests share. It
// finds free loopback ports, and its TCP proxy can cut a client off from
// its server, the conformance suite's partition hook.
package loopback

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
// It lies below the range the kernel draws the local ports of outgoing
// connections from (32768 up on Linux): a port handed out from that range
// can be taken by any client's connection while a test's server is down,
// and the server restarted on it fails with "address already in use".
func FreePort() (int, error) {
	for range 100 {
		p := minFreePort + rand.IntN(maxFreePort-minFreePort)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err == nil {
			l.Close()
			return p, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0") // a crowded range: any free port
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// The range FreePort draws from: below the ephemeral ports, and below
// the conformance suite's fake instance addresses (20000 up), which are
// registered but never bound.
const minFreePort, maxFreePort = 10000, 20000

// FreeAddr returns "127.0.0.1:<free port>".
func FreeAddr() (string, error) {
	p, err := FreePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

// Proxy forwards TCP connections from its own loopback address to a
// target. SetConnected(false) closes every forwarded connection and
// refuses new ones (accepted then closed at once), as a network partition
// would look to the client; SetConnected(true) lets traffic through again.
type Proxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	connected bool
	conns     map[net.Conn]struct{}
	closed    bool
	wg        sync.WaitGroup
}

// NewProxy starts a proxy to target on a free loopback port.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, connected: true, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients should dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetTarget changes where new connections go (a restarted server on a new
// port, say).
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// SetConnected cuts or restores the link. It has the signature of the
// conformance suite's Link.
func (p *Proxy) SetConnected(_ context.Context, ok bool) error {
	p.mu.Lock()
	p.connected = ok
	var drop []net.Conn
	if !ok {
		for c := range p.conns {
			drop = append(drop, c)
		}
	}
	p.mu.Unlock()
	for _, c := range drop {
		c.Close()
	}
	return nil
}

// DropConnections closes every forwarded connection once, leaving the link
// up: a reconnect, as after a server restart or a load balancer reset.
func (p *Proxy) DropConnections() {
	p.mu.Lock()
	var drop []net.Conn
	for c := range p.conns {
		drop = append(drop, c)
	}
	p.mu.Unlock()
	for _, c := range drop {
		c.Close()
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.DropConnections()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.connected || p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		p.wg.Add(1)
		go p.forward(c, target)
	}
}

func (p *Proxy) forward(c net.Conn, target string) {
	defer p.wg.Done()
	defer p.untrack(c)
	s, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	if !p.track(s) {
		s.Close()
		return
	}
	defer p.untrack(s)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(s, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); done <- struct{}{} }()
	<-done
	// One direction ended: close both so the other copy returns too.
	c.Close()
	s.Close()
	<-done
}
