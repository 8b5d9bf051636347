package chaos

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roster-go/roster/registry"
)

// slowLink puts a delaying TCP proxy in front of every host of a registry
// URL: what the server sends reaches the client the set delay late, as
// from a registry that answers every request late. Requests pass at once.
type slowLink struct {
	url     string
	delay   atomic.Int64 // ns
	proxies []*delayProxy
}

// wrap takes a link's result (see server.link) and returns the same link
// with the proxies in front of its hosts.
func (l *slowLink) wrap(url string, cut func(bool), closeLink func(), err error) (string, func(bool), func(), error) {
	if err != nil {
		return "", nil, nil, err
	}
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok {
		closeLink()
		return "", nil, nil, fmt.Errorf("slow link: %q is no URL", url)
	}
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	var hosts []string
	for _, h := range strings.Split(rest[:end], ",") {
		p, err := newDelayProxy(h, &l.delay)
		if err != nil {
			l.close()
			closeLink()
			return "", nil, nil, err
		}
		l.proxies = append(l.proxies, p)
		hosts = append(hosts, p.ln.Addr().String())
	}
	l.url = scheme + "://" + strings.Join(hosts, ",") + rest[end:]
	return l.url, cut, func() { l.close(); closeLink() }, nil
}

func (l *slowLink) set(d time.Duration) { l.delay.Store(int64(d)) }

func (l *slowLink) close() {
	for _, p := range l.proxies {
		p.close()
	}
}

// probe times a Lookup through the link on a new Registry, and returns
// why the link is not slow, or "" if it is.
func (l *slowLink) probe(fx *fixture) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg, err := registry.Open(ctx, l.url)
	if err != nil {
		return fmt.Sprintf("slow link: open: %v", err)
	}
	defer reg.Close()
	start := time.Now()
	if _, err := reg.Lookup(ctx, service); err != nil {
		return fmt.Sprintf("slow link: lookup: %v", err)
	}
	if d := time.Since(start); d < slowBy {
		return fmt.Sprintf("a Lookup through the slow link took %v, under %v: the fault had no effect", d, slowBy)
	}
	return ""
}

// delayProxy forwards connections to target, holding back each chunk the
// target sends until delay after it arrived.
type delayProxy struct {
	ln     net.Listener
	target string
	delay  *atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func newDelayProxy(target string, delay *atomic.Int64) (*delayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{ln: ln, target: target, delay: delay, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *delayProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.forward(c)
	}
}

// track records c, or closes it and returns false once the proxy closed.
func (p *delayProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *delayProxy) forward(c net.Conn) {
	defer p.wg.Done()
	if !p.track(c) {
		return
	}
	s, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(s) {
		c.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { copyNow(s, c); done <- struct{}{} }()
	go func() { p.copyLate(c, s); done <- struct{}{} }()
	<-done
	c.Close()
	s.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

func copyNow(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// chunk is data read from the target, due at a time.
type chunk struct {
	b   []byte
	due time.Time
}

// copyLate copies src to dst, each chunk delay after it was read.
func (p *delayProxy) copyLate(dst, src net.Conn) {
	q := make(chan chunk, 4096)
	go func() {
		defer close(q)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{append([]byte(nil), buf[:n]...), time.Now().Add(time.Duration(p.delay.Load()))}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range q {
		time.Sleep(time.Until(ch.due))
		if _, err := dst.Write(ch.b); err != nil {
			dst.Close()
			src.Close() // ends the reader, which closes q
			for range q {
			}
			return
		}
	}
}

func (p *delayProxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}
