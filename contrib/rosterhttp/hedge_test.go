package rosterhttp_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	rosterhttp "github.com/roster-go/roster/contrib/rosterhttp"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
)

// payload returns n bytes in which a truncated, shifted or mixed-up copy
// shows.
func payload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>10)
	}
	return b
}

// pair makes requests wait for each other two by two, so that both
// attempts of a hedged call are in flight at once.
type pair struct {
	mu      sync.Mutex
	waiting chan struct{} // the request waiting for a partner, if any
	met     atomic.Int64  // requests that found a partner
}

// meet blocks until another request arrives; it gives up after 5 s (a
// call that was never hedged) and reports whether it met one.
func (p *pair) meet() bool {
	p.mu.Lock()
	if w := p.waiting; w != nil {
		p.waiting = nil
		p.mu.Unlock()
		close(w)
		p.met.Add(2)
		return true
	}
	w := make(chan struct{})
	p.waiting = w
	p.mu.Unlock()
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-w:
		return true
	case <-t.C:
		p.mu.Lock()
		if p.waiting == w {
			p.waiting = nil
		}
		p.mu.Unlock()
		return false
	}
}

// conns counts a server's open connections.
type conns struct{ open atomic.Int64 }

func (c *conns) track(_ net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		c.open.Add(1)
	case http.StateClosed, http.StateHijacked:
		c.open.Add(-1)
	}
}

// serve starts an instance of service on loopback that answers with h and
// counts its connections.
func serve(t *testing.T, reg *registry.Registry, service string, h http.HandlerFunc) *conns {
	t.Helper()
	c := &conns{}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = c.track
	srv.Start()
	t.Cleanup(srv.Close)
	register(t, reg, service, srv.Listener.Addr().String())
	return c
}

// hedgedClient returns an http.Client whose calls are hedged after 1 ms,
// with maxAttempts attempts of Retry around the hedge, and its base
// transport.
func hedgedClient(t *testing.T, reg *registry.Registry, maxAttempts int) (*http.Client, *http.Transport) {
	t.Helper()
	rt, tr := hedgedTransport(t, reg, maxAttempts)
	return &http.Client{Transport: rt, Timeout: 20 * time.Second}, tr
}

// hedgedTransport is hedgedClient's Transport.
func hedgedTransport(t *testing.T, reg *registry.Registry, maxAttempts int) (*rosterhttp.Transport, *http.Transport) {
	t.Helper()
	q := middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: 1 << 30})
	mc, err := middleware.NewClient(reg, middleware.WithQuarantine(q), middleware.WithMiddleware(
		middleware.Retry(middleware.RetryConfig{MaxAttempts: maxAttempts, BudgetRatio: 1, BudgetMinPerSecond: 1000}),
		middleware.Hedge(middleware.HedgeConfig{Delay: time.Millisecond}), // shares the Retry's budget
		q.Middleware()))
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		mc.Close()
	})
	return &rosterhttp.Transport{Client: mc, Base: tr}, tr
}

// readWhole reads resp's body after RoundTrip has returned and checks it
// against want. The request context the response arrived on must be alive
// until the body is closed, and released then.
func readWhole(t *testing.T, resp *http.Response, want []byte) {
	t.Helper()
	ctx := resp.Request.Context()
	if err := ctx.Err(); err != nil {
		t.Errorf("the response's request context ended when RoundTrip returned: %v", context.Cause(ctx))
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("status %d: read %d of %d bytes after RoundTrip returned (intact: %v): %v",
			resp.StatusCode, len(got), len(want), bytes.Equal(got, want), err)
	}
	if ctx.Err() == nil {
		t.Fatal("the response's request context is still alive after Body.Close: it leaks")
	}
}

// pairedBase returns responses two by two: each attempt's response waits
// for the other attempt's, so that both attempts of a hedged call often
// succeed before the call returns, and the loser must close its own.
type pairedBase struct {
	http.RoundTripper
	p pair
}

func (b *pairedBase) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := b.RoundTripper.RoundTrip(r)
	b.p.meet()
	return resp, err
}

// noLeaks checks, at the end of the test, that the goroutines running
// now are the only ones left.
func noLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// allClosed waits until every connection to the servers is closed once
// the client's idle ones are: a response body nobody closed keeps its
// connection busy, and open.
func allClosed(t *testing.T, tr *http.Transport, servers ...*conns) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		tr.CloseIdleConnections()
		var open int64
		for _, s := range servers {
			open += s.open.Load()
		}
		if open == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still open after the bodies were read and idle connections closed: a response body leaked", open)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Both attempts of a hedged GET are in flight at once and both answer
// 1 MB: the caller reads the winner's body whole after RoundTrip has
// returned, and the loser's connection is closed, not leaked.
func TestHedgedBodyOutlivesTheCall(t *testing.T) {
	noLeaks(t)
	reg := openMem(t)
	want := payload(1 << 20)
	p := &pair{}
	big := func(w http.ResponseWriter, r *http.Request) {
		p.meet()
		w.Write(want)
	}
	a, b := serve(t, reg, "files", big), serve(t, reg, "files", big)
	rt, tr := hedgedTransport(t, reg, 1)
	paired := &pairedBase{RoundTripper: tr}
	rt.Base = paired
	hc := &http.Client{Transport: rt, Timeout: 20 * time.Second}
	const rounds = 10
	for range rounds {
		resp, err := hc.Get("http://files/blob")
		if err != nil {
			t.Fatal(err)
		}
		readWhole(t, resp, want)
	}
	if n := p.met.Load(); n != 2*rounds {
		t.Fatalf("%d of %d requests ran alongside their hedge: the attempts were not concurrent", n, 2*rounds)
	}
	if n := paired.p.met.Load(); n != 2*rounds {
		t.Fatalf("%d of %d responses came alongside their hedge's", n, 2*rounds)
	}
	allClosed(t, tr, a, b)
}

// When both concurrent attempts answer 503, the caller gets one of the
// 503s with its whole body, and the other response is closed.
func TestHedgedFailureBodyOutlivesTheCall(t *testing.T) {
	noLeaks(t)
	reg := openMem(t)
	want := payload(1 << 20)
	p := &pair{}
	failing := func(w http.ResponseWriter, r *http.Request) {
		p.meet()
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write(want)
	}
	a, b := serve(t, reg, "files", failing), serve(t, reg, "files", failing)
	hc, tr := hedgedClient(t, reg, 1)
	const rounds = 3
	for range rounds {
		resp, err := hc.Get("http://files/blob")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("status %d, want the instances' 503", resp.StatusCode)
		}
		readWhole(t, resp, want)
	}
	if n := p.met.Load(); n != 2*rounds {
		t.Fatalf("%d of %d requests ran alongside their hedge: the attempts were not concurrent", n, 2*rounds)
	}
	allClosed(t, tr, a, b)
}

// A request that must not be sent twice is never hedged: a POST, and a PUT
// whose body cannot be replayed.
func TestUnsafeRequestsAreNotHedged(t *testing.T) {
	noLeaks(t)
	reg := openMem(t)
	var calls atomic.Int64
	p := &pair{}
	slow := func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		io.Copy(io.Discard, r.Body)
		// A hedge leaves 1 ms after the request: wait for it long
		// enough that it would have come.
		done := make(chan bool, 1)
		go func() { done <- p.meet() }()
		select {
		case <-done:
		case <-time.After(300 * time.Millisecond):
		}
		io.WriteString(w, "ok")
	}
	a, b := serve(t, reg, "orders", slow), serve(t, reg, "orders", slow)
	hc, tr := hedgedClient(t, reg, 3)
	for _, mk := range []func() (*http.Request, error){
		func() (*http.Request, error) {
			return http.NewRequest(http.MethodPost, "http://orders/", strings.NewReader("order"))
		},
		func() (*http.Request, error) {
			return http.NewRequest(http.MethodPut, "http://orders/1", io.NopCloser(strings.NewReader("one shot")))
		},
	} {
		req, _ := mk()
		n := calls.Load()
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", req.Method, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if sent := calls.Load() - n; sent != 1 {
			t.Fatalf("%s with a 1 ms hedge delay sent %d times, want once", req.Method, sent)
		}
	}
	// Release the handlers still waiting for a partner.
	p.mu.Lock()
	if p.waiting != nil {
		close(p.waiting)
		p.waiting = nil
	}
	p.mu.Unlock()
	allClosed(t, tr, a, b)
}

// The caller's context still governs the body once RoundTrip has
// returned: cancelling it ends a read that waits for more.
func TestCallerCancelEndsTheBody(t *testing.T) {
	noLeaks(t)
	reg := openMem(t)
	first := payload(32 << 10)
	stream := func(w http.ResponseWriter, r *http.Request) {
		w.Write(first)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the rest never comes
	}
	a, b := serve(t, reg, "feed", stream), serve(t, reg, "feed", stream)
	hc, tr := hedgedClient(t, reg, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://feed/", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadFull(resp.Body, make([]byte, len(first))); err != nil {
		t.Fatalf("first chunk: %v", err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := resp.Body.Read(make([]byte, 1))
		read <- err
	}()
	cancel()
	select {
	case err := <-read:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("read after the caller cancelled: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read still blocked 5 s after the caller cancelled")
	}
	resp.Body.Close()
	allClosed(t, tr, a, b)
}

// A 101 Switching Protocols response keeps its writable body (what
// httputil.ReverseProxy and websocket clients use).
func TestUpgradeBodyStaysWritable(t *testing.T) {
	noLeaks(t)
	reg := openMem(t)
	echo := func(w http.ResponseWriter, r *http.Request) {
		c, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(rw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		rw.Flush()
		line, _ := rw.ReadString('\n')
		rw.WriteString(line)
		rw.Flush()
	}
	a := serve(t, reg, "echo", echo)
	// The transport itself, as httputil.ReverseProxy uses it (an
	// http.Client with a Timeout hides the body's Write).
	rt, tr := hedgedTransport(t, reg, 1)
	req, _ := http.NewRequest(http.MethodGet, "http://echo/", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if resp.StatusCode != http.StatusSwitchingProtocols || !ok {
		t.Fatalf("status %d, body %T: want 101 with an io.ReadWriteCloser body", resp.StatusCode, resp.Body)
	}
	if _, err := io.WriteString(rwc, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(rwc).ReadString('\n'); line != "ping\n" {
		t.Fatalf("echo %q, %v", line, err)
	}
	rwc.Close()
	allClosed(t, tr, a)
}

// A chain that runs the call again after a success (a mirroring
// middleware, say) gets the first response; the later one is closed.
func TestLaterSuccessesAreClosed(t *testing.T) {
	noLeaks(t)
	reg := openMem(t)
	want := payload(1 << 20)
	a := serve(t, reg, "files", func(w http.ResponseWriter, r *http.Request) { w.Write(want) })
	twice := func(next middleware.Handler) middleware.Handler {
		return func(ctx context.Context, req *middleware.Request) error {
			if err := next(ctx, req); err != nil {
				return err
			}
			return next(ctx, req)
		}
	}
	mc, err := middleware.NewClient(reg, middleware.WithMiddleware(twice))
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		mc.Close()
	})
	hc := &http.Client{Transport: &rosterhttp.Transport{Client: mc, Base: tr}, Timeout: 20 * time.Second}
	resp, err := hc.Get("http://files/blob")
	if err != nil {
		t.Fatal(err)
	}
	readWhole(t, resp, want)
	allClosed(t, tr, a)
}
