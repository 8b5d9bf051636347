package consul_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/servers/consultest"
	"github.com/roster-go/roster/registry"
)

// reqCounter is a reverse proxy in front of the agent that counts the
// requests of the process behind it, and the bytes it is sent, by kind.
type reqCounter struct {
	srv *httptest.Server
	mu  sync.Mutex
	n   map[string]int
	b   map[string]int64
}

func countRequests(t *testing.T, agent string) *reqCounter {
	t.Helper()
	target := &url.URL{Scheme: "http", Host: agent}
	p := httputil.NewSingleHostReverseProxy(target)
	p.FlushInterval = -1
	// Uncompressed answers: the bytes counted are what the agent encodes.
	direct := p.Director
	p.Director = func(r *http.Request) {
		direct(r)
		r.Header.Del("Accept-Encoding")
	}
	p.ErrorLog = log.New(io.Discard, "", 0) // cancelled blocking queries at the end
	p.Transport = &http.Transport{MaxIdleConnsPerHost: 128}
	c := &reqCounter{n: map[string]int{}, b: map[string]int64{}}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &countingWriter{ResponseWriter: w}
		p.ServeHTTP(cw, r)
		k := kind(r.URL.Path)
		c.mu.Lock()
		c.n[k]++
		c.b[k] += cw.n
		c.mu.Unlock()
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// kind names a request by its endpoint: a watched service's read is
// /v1/health/service/*, the hub's probe of a name no one registers is
// counted apart.
func kind(path string) string {
	if rest, ok := strings.CutPrefix(path, "/v1/health/service/"); ok && rest != "" && rest != "_roster-probe" {
		return "/v1/health/service/*"
	}
	return path
}

// take returns the counts since the last take, and resets them.
func (c *reqCounter) take() (map[string]int, map[string]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, b := c.n, c.b
	c.n, c.b = map[string]int{}, map[string]int64{}
	return n, b
}

type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

func (w *countingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// catalogPut writes the body to the agent's catalog endpoint (register or
// deregister), as another party would.
func catalogPut(ctx context.Context, addr, op, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+addr+"/v1/catalog/"+op, strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT /v1/catalog/%s: %s", op, resp.Status)
	}
	return nil
}

// readCostSize is the number of watched services:
// $ROSTER_CONSUL_READCOST, default 100. The figures in docs/benchmarks.md
// are for 1000.
func readCostSize(t *testing.T) int {
	n := 100
	if v := os.Getenv("ROSTER_CONSUL_READCOST"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("ROSTER_CONSUL_READCOST=%q: want a count", v)
		}
	}
	return n
}

// watchMany opens a registry through the counting proxy and watches n
// services, half of them holding one instance with a passing check, and
// returns the watchers after their first state.
func watchMany(t *testing.T, a *consultest.Agent, c *reqCounter, n int) []*registry.Watcher {
	t.Helper()
	ctx := t.Context()
	for i := 0; i < n; i += 2 {
		body := fmt.Sprintf(`{"Node":"node-w%d","Address":"10.2.0.%d","Service":{"ID":"w-%d","Service":"watched-%04d","Port":80},`+
			`"Check":{"CheckID":"w-%d","Name":"w","ServiceID":"w-%d","Status":"passing"}}`, i%10, i%10+1, i, i, i, i)
		if err := catalogPut(ctx, a.Addr(), "register", body); err != nil {
			t.Fatal(err)
		}
	}
	// The registry's resync (a read per service every 30-60s) is off:
	// the counts are the driver's own.
	r, err := registry.Open(ctx, "consul://"+c.srv.Listener.Addr().String(), registry.WithResyncInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	ws := make([]*registry.Watcher, n)
	for i := range ws {
		if ws[i], err = r.Watch(ctx, fmt.Sprintf("watched-%04d", i)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ws[i].Close() })
	}
	for i, w := range ws {
		if s, err := w.Next(ctx); err != nil || len(s.Instances) != 1-i%2 {
			t.Fatalf("watcher %d: %v, %v", i, s.Instances, err)
		}
	}
	return ws
}

// churn runs step at rate per second for d, and returns how many steps
// it made.
func churn(t *testing.T, rate int, d time.Duration, step func(i int) error) int {
	t.Helper()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); n++ {
		if err := step(n); err != nil {
			t.Fatal(err)
		}
		<-tick.C
	}
	return n
}

// settle waits until the process has made no service read for a quiet
// second, so that a measurement starts from rest.
func settle(t *testing.T, c *reqCounter) {
	t.Helper()
	for range 30 {
		time.Sleep(time.Second) // the quiet period being measured
		if n, _ := c.take(); n["/v1/health/service/*"] == 0 {
			return
		}
	}
	t.Fatal("the watches never came to rest")
}

func report(t *testing.T, what string, n map[string]int, b map[string]int64, d time.Duration) {
	var buf bytes.Buffer
	for _, k := range []string{"/v1/health/service/*", "/v1/health/state/any", "/v1/catalog/services", "/v1/health/service/_roster-probe"} {
		fmt.Fprintf(&buf, "\n  %-32s %7.1f req/s %9.0f B/s", k, float64(n[k])/d.Seconds(), float64(b[k])/d.Seconds())
	}
	t.Logf("%s:%s", what, buf.String())
}

// Issue #28: one process watches many services; another party flaps a
// check-less catalog registration of an unrelated service at 40/s. The
// watches must not read their services for it: before the fix every flap
// woke every watch (about 1,000 service reads a second for 1,000
// watches). A change to a watched service still reaches its watcher.
func TestUnrelatedCatalogChurnReadCost(t *testing.T) {
	a := defaultLimitAgent(t)
	c := countRequests(t, a.Addr())
	n := readCostSize(t)
	ws := watchMany(t, a, c, n)
	settle(t, c)

	const rate, d = 40, 3 * time.Second
	start := time.Now()
	flaps := churn(t, rate, d, func(i int) error {
		if i%2 == 1 {
			return catalogPut(t.Context(), a.Addr(), "deregister", `{"Node":"node-flap","ServiceID":"flap-1"}`)
		}
		return catalogPut(t.Context(), a.Addr(), "register",
			`{"Node":"node-flap","Address":"10.3.0.1","Service":{"ID":"flap-1","Service":"unrelated-flap","Port":80}}`)
	})
	took := time.Since(start)
	got, bytes := c.take()
	report(t, fmt.Sprintf("%d watches, %d check-less flaps of an unrelated service in %v", n, flaps, took.Round(time.Millisecond)), got, bytes, took)
	if reads := got["/v1/health/service/*"]; reads > 10 {
		t.Errorf("%d service reads during unrelated churn, want at most 10 (none are explained)", reads)
	}

	// The hub still sees a change to a watched service.
	body := `{"Node":"node-w9","Address":"10.2.0.10","Service":{"ID":"late-1","Service":"watched-0001","Port":80}}`
	if err := catalogPut(t.Context(), a.Addr(), "register", body); err != nil {
		t.Fatal(err)
	}
	if s, err := ws[1].Next(t.Context()); err != nil || len(s.Instances) != 1 {
		t.Fatalf("watcher 1 after a check-less registration: %v, %v", s.Instances, err)
	}
	// And a check-less instance added to a service that has one already:
	// no name, tag or check explains it.
	body = `{"Node":"node-w9","Address":"10.2.0.10","Service":{"ID":"late-0","Service":"watched-0000","Port":81}}`
	if err := catalogPut(t.Context(), a.Addr(), "register", body); err != nil {
		t.Fatal(err)
	}
	for {
		s, err := ws[0].Next(t.Context())
		if err != nil {
			t.Fatalf("watcher 0 after a second, check-less instance: %v", err)
		}
		if len(s.Instances) == 2 {
			break
		}
	}
}

// Issue #28: every check change anywhere made every watching process
// download every check of the datacenter. Here 500 unrelated instances
// with checks, one of which flaps its status at 10/s: the watching
// process reads the checks of the services it watches only.
func TestUnrelatedCheckChurnReadCost(t *testing.T) {
	a := defaultLimitAgent(t)
	ctx := t.Context()
	const others = 500
	for i := range others {
		body := fmt.Sprintf(`{"Node":"node-o%d","Address":"10.4.0.%d","Service":{"ID":"o-%d","Service":"other-%04d","Port":80},`+
			`"Check":{"CheckID":"o-%d","Name":"o","ServiceID":"o-%d","Status":"passing","Notes":"%s"}}`,
			i%20, i%20+1, i, i, i, i, strings.Repeat("x", 100))
		if err := catalogPut(ctx, a.Addr(), "register", body); err != nil {
			t.Fatal(err)
		}
	}
	c := countRequests(t, a.Addr())
	n := readCostSize(t)
	ws := watchMany(t, a, c, n)
	// A watch opened after the hub's last checks read is first covered at
	// the next check change anywhere, and reads its service once then
	// (docs/backends/consul.md). One flip before measuring covers them
	// all: what is measured is the steady state.
	flip := func(status string) error {
		return catalogPut(ctx, a.Addr(), "register", fmt.Sprintf(`{"Node":"node-o0","Address":"10.4.0.1",`+
			`"Check":{"CheckID":"o-0","Name":"o","ServiceID":"o-0","Status":%q}}`, status))
	}
	if err := flip("warning"); err != nil {
		t.Fatal(err)
	}
	settle(t, c)

	const rate, d = 10, 3 * time.Second
	start := time.Now()
	flips := churn(t, rate, d, func(i int) error { return flip([]string{"critical", "passing"}[i%2]) })
	took := time.Since(start)
	got, bytes := c.take()
	report(t, fmt.Sprintf("%d watches, %d status flips of an unrelated check (%d other checks) in %v", n, flips, others, took.Round(time.Millisecond)), got, bytes, took)
	// A check is about 400 bytes as JSON, 570 with these notes: the
	// datacenter's 500+n/2 checks are 286kB at n=100, the watched
	// services' n/2 and their 10 nodes' checks 21kB.
	perFlip := bytes["/v1/health/state/any"] / int64(max(flips, 1))
	if bound := int64(600 * (n/2 + 20)); perFlip > bound {
		t.Errorf("%d bytes of checks read per unrelated check change, want the watched services' only (< %d)", perFlip, bound)
	}
	if reads := got["/v1/health/service/*"]; reads > 10 {
		t.Errorf("%d service reads during unrelated check churn, want at most 10", reads)
	}
	// A watched service's check change still reaches its watcher.
	if err := catalogPut(ctx, a.Addr(), "register", `{"Node":"node-w0","Address":"10.2.0.1",`+
		`"Check":{"CheckID":"w-0","Name":"w","ServiceID":"w-0","Status":"critical"}}`); err != nil {
		t.Fatal(err)
	}
	if s, err := ws[0].Next(ctx); err != nil || len(s.Instances) != 0 {
		t.Fatalf("watcher 0 after its check went critical: %v, %v", s.Instances, err)
	}
}
