package consul_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/roster-go/roster/registry"
)

// Issue #12: after an agent restart without data (a -dev agent, a
// container without a volume) every lease is back in a fresh Lookup within
// TTL + 1s of the agent being ready again, every time.
func TestRestartLosingDataRecoversWithinTTL(t *testing.T) {
	const n, ttl, runs = 5, 3 * time.Second, 3
	a := defaultLimitAgent(t)
	open := func() *registry.Registry {
		t.Helper()
		r, err := registry.Open(t.Context(), a.URL(""))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	owner, watching, looking := open(), open(), open()
	svc := "restarted"
	for i := range n {
		if _, err := owner.Register(t.Context(), registry.Instance{Service: svc, Address: fmt.Sprintf("10.2.0.%d:80", i+1)},
			registry.WithTTL(ttl)); err != nil {
			t.Fatal(err)
		}
	}
	w, err := watching.Watch(t.Context(), svc)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	whole := followWatch(t, w, n)
	select {
	case <-whole:
	case <-time.After(10 * time.Second):
		t.Fatalf("the watcher did not see the %d instances within 10s", n)
	}

	for run := range runs {
		if err := a.Restart(t.Context(), false); err != nil {
			t.Fatal(err)
		}
		ready := time.Now()
		// A fresh Lookup every 10ms until all n are back, or too late.
		deadline := ready.Add(ttl + time.Second)
		got := -1
		for {
			ctx, cancel := context.WithDeadline(t.Context(), deadline)
			sn, err := looking.Lookup(ctx, svc)
			cancel()
			if err == nil {
				got = len(sn.Instances)
			}
			if got == n || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond) // polling period
		}
		took := time.Since(ready)
		if got != n {
			t.Fatalf("run %d: %d of %d instances in Lookup %v after the agent was ready again, want all within TTL+1s = %v",
				run, got, n, took.Round(time.Millisecond), ttl+time.Second)
		}
		// The watcher recovers by itself too (its reopen backoff is the
		// registry's business; this only bounds it loosely).
		var watched time.Time
		select {
		case watched = <-whole:
		case <-time.After(10 * time.Second):
			t.Fatalf("run %d: the watcher did not see the %d instances again within 10s of the agent being ready", run, n)
		}
		t.Logf("run %d: all %d back in Lookup %v after the agent was ready, in the watcher %v", run, n,
			took.Round(time.Millisecond), watched.Sub(ready).Round(time.Millisecond))
	}
}

// followWatch reads w until the test ends and sends the time of every
// delivery that makes the set whole again: a fresh snapshot of n
// instances after one that was stale or had fewer. A watcher that never
// noticed the outage (it may skip states) sends nothing, so the reader
// runs on its own and never lags the cache.
func followWatch(t *testing.T, w *registry.Watcher, n int) <-chan time.Time {
	whole := make(chan time.Time, 16)
	done := make(chan struct{})
	t.Cleanup(func() { w.Close(); <-done })
	go func() {
		defer close(done)
		ok := false
		for {
			sn, err := w.Next(context.Background())
			if errors.Is(err, registry.ErrClosed) {
				return
			}
			now := !sn.Stale && len(sn.Instances) == n
			if now && !ok {
				select {
				case whole <- time.Now():
				default: // the test reads one per restart; never block the reader
				}
			}
			ok = now
		}
	}()
	return whole
}

// Issue #12: a deregistration is never lost to an agent that cannot be
// reached for a while: it is retried until the agent answers (or its
// context ends), and the instance is gone.
func TestDeregisterOutlastsUnreachableAgent(t *testing.T) {
	a := defaultLimitAgent(t)
	p := newCutProxy(t, a.Addr())
	r, err := registry.Open(t.Context(), "consul://"+p.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	l, err := r.Register(t.Context(), registry.Instance{Service: "leaving", Address: "10.3.0.1:80"}, registry.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	p.cut(true)
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		errc <- l.Deregister(ctx)
	}()
	// Let it fail twice, then restore the link.
	deadline := time.Now().Add(10 * time.Second)
	for p.refusals() < 2 {
		select {
		case err := <-errc:
			t.Fatalf("Deregister returned %v while the agent could not be reached; want it to retry", err)
		case <-time.After(10 * time.Millisecond): // polling period
		}
		if time.Now().After(deadline) {
			t.Fatalf("Deregister made %d attempts in 10s", p.refusals())
		}
	}
	p.cut(false)
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Deregister = %v, want success once the agent answers", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Deregister did not return within 10s of the agent answering again")
	}
	if n, err := agentServices(t.Context(), a.Addr(), "leaving"); err != nil || n != 0 {
		t.Fatalf("the agent holds %d instances after Deregister (%v), want 0", n, err)
	}
}

// cutProxy forwards TCP connections to a target; while cut it closes
// every connection it had and refuses new ones (accepts and closes them),
// counting the refusals.
type cutProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	isCut   bool
	refused int
	conns   map[net.Conn]bool
	wg      sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.cut(true)
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) refusals() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

func (p *cutProxy) cut(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.isCut = on
	if on {
		for c := range p.conns {
			c.Close()
		}
	}
}

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.isCut {
			p.refused++
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.mu.Unlock()
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *cutProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}
