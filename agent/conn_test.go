package agent_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roster-go/roster/agent"
	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
)

// serveReal serves an agent as roster agent does: its Server on its
// Listener, over a real loopback listener.
func serveReal(t *testing.T, cfg agent.Config) (*agent.Agent, string) {
	t.Helper()
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	cfg.Registry = reg
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := a.Server()
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(a.Listener(ln)) }()
	t.Cleanup(func() {
		a.Close()
		srv.Close()
		<-done
		reg.Close()
	})
	return a, ln.Addr().String()
}

// openFDs counts the process's open file descriptors (Linux).
func openFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal("counting open file descriptors needs /proc/self/fd (Linux):", err)
	}
	return len(fds)
}

// TestTricklingConnectionsAreCutOff: 300 connections send a request's
// headers and then trickle its body, a byte at a time. With a cap of 50
// connections the agent holds at most 50 of them, cuts each off at its
// ReadTimeout, and then serves a normal client.
func TestTricklingConnectionsAreCutOff(t *testing.T) {
	const slow, capConns, timeout = 300, 50, 300 * time.Millisecond
	_, addr := serveReal(t, agent.Config{MaxConns: capConns, ReadTimeout: timeout})
	base := openFDs(t)
	var conns []net.Conn
	for range slow {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST /v1/report HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n{")
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	closed := make(chan time.Time, slow)
	for _, c := range conns {
		wg.Go(func() { // trickle until the agent hangs up
			go func() {
				_, _ = io.Copy(io.Discard, c) // ends when the agent closes the connection
				closed <- time.Now()
			}()
			tick := time.NewTicker(timeout / 10)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := c.Write([]byte(" ")); err != nil {
						return
					}
				}
			}
		})
	}
	defer func() {
		close(stop)
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
	}()

	// Each round of 50 is cut off after the timeout: 6 rounds, then the
	// normal client, queued behind them.
	bound := (slow/capConns + 2) * timeout
	deadline := time.After(bound + timeout)
	peak := 0
	for n := 0; n < slow; {
		select {
		case <-closed:
			n++
		case <-time.After(timeout / 5):
			peak = max(peak, openFDs(t)-base-slow)
		case <-deadline:
			t.Fatalf("%d of %d trickling connections still open after %v", slow-n, slow, bound+timeout)
		}
	}
	if peak > capConns+10 {
		t.Errorf("the agent held %d connections at once, want at most %d", peak, capConns)
	}
	start := time.Now()
	resp, err := (&http.Client{Timeout: bound}).Get("http://" + addr + "/v1/services/api")
	if err != nil {
		t.Fatalf("a normal client after the flood: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || time.Since(start) > timeout {
		t.Errorf("a normal client after the flood: %s in %v, want 200 within %v", resp.Status, time.Since(start), timeout)
	}
}

// TestLongPollOutlivesTimeouts: a long poll and the event stream last
// longer than the read and write timeouts, and answer.
func TestLongPollOutlivesTimeouts(t *testing.T) {
	const timeout = 200 * time.Millisecond
	_, addr := serveReal(t, agent.Config{ReadTimeout: timeout, WriteTimeout: timeout})
	url := "http://" + addr
	start := time.Now()
	resp, err := http.Get(url + "/v1/services/api?index=1&wait=" + (5 * timeout).String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || time.Since(start) < 5*timeout {
		t.Errorf("long poll of %v: %s after %v", 5*timeout, resp.Status, time.Since(start))
	}
	resp, err = http.Get(url + "/v1/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	start = time.Now()
	events := 0
	for time.Since(start) < 5*timeout && sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			events++
		}
	}
	if time.Since(start) < 5*timeout || events < 2 {
		t.Errorf("event stream: %d events, cut after %v (%v)", events, time.Since(start), sc.Err())
	}
}
