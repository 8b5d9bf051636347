package redis_test

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

// blackhole forwards TCP to a target until frozen; then it keeps every
// connection open and silently drops what flows through, as a dead
// network path does (no RST, no FIN).
type blackhole struct {
	ln     net.Listener
	target string
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
	closed bool // a connection accepted while closing is closed at once
	wg     sync.WaitGroup
}

func newBlackhole(t *testing.T, target string) *blackhole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln, target: target}
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(b.close)
	return b
}

func (b *blackhole) accept() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", b.target)
		if err != nil {
			c.Close()
			continue
		}
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		b.conns = append(b.conns, c, s)
		b.mu.Unlock()
		b.wg.Add(2)
		go b.pipe(s, c)
		go b.pipe(c, s)
	}
}

func (b *blackhole) pipe(dst, src net.Conn) {
	defer b.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !b.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or closed
		}
	}
}

func (b *blackhole) close() {
	b.ln.Close()
	b.mu.Lock()
	b.closed = true
	for _, c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// A watcher behind a silent link (packets vanish, nothing is closed)
// reports Stale once the client's read timeout and retries run out: about
// (1 + max_retries) × read_timeout, here 4 × 500ms; with go-redis's
// defaults (3s, 3 retries) about 10s.
func TestHashWatcherStaleOnSilentLink(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	bh := newBlackhole(t, srv.Addr())
	r := open(t, "redis://"+srv.Addr())
	obs := open(t, "redis://"+bh.ln.Addr().String()+"?sweep=200ms&quiet=30s&read_timeout=500ms")
	if _, err := r.Register(ctx, registry.Instance{Service: "silent", Address: "127.0.0.1:1"}, registry.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	w, err := obs.Watch(ctx, "silent")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if s, err := w.Next(ctx); err != nil || len(s.Instances) != 1 {
		t.Fatalf("first Next = %v, %v", s.Instances, err)
	}
	bh.frozen.Store(true)
	start := time.Now()
	s, err := w.Next(ctx)
	if !s.Stale || !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("Next on a silent link = stale %v, %v; want Stale and ErrUnavailable", s.Stale, err)
	}
	if el := time.Since(start); el > 8*time.Second {
		t.Fatalf("stale reported after %v", el)
	}
	t.Logf("stale after %v: %v", time.Since(start), err)
	bh.frozen.Store(false)
}
