package chaos

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	rostergrpc "github.com/roster-go/roster/contrib/rostergrpc"
	rosterhttp "github.com/roster-go/roster/contrib/rosterhttp"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
)

// Caller kinds, the four paths: middleware.Client.Do, an http.Client over
// contrib/rosterhttp's Transport, a gRPC ClientConn through contrib/rostergrpc's
// resolver and balancer, and a PHP worker through a roster agent process.
const (
	viaDo    = "Do"
	viaHTTP  = "http"
	viaGRPC  = "grpc"
	viaAgent = "agent"
)

var kinds = [...]string{viaDo, viaHTTP, viaGRPC, viaAgent}

// load calls the service without pause from a few callers, each one call
// every pace, and counts every call in the current phase.
type load struct {
	mc    *middleware.Client
	q     *middleware.Quarantine // mc's
	plain *http.Transport        // Do's calls
	base  *http.Transport        // contrib/rosterhttp's attempts
	do    *http.Client           // plain
	hc    *http.Client           // contrib/rosterhttp over base
	conn  *grpc.ClientConn
	agent *agentProc
	php   []*phpWorker

	mu  sync.RWMutex
	cur *phase

	smu    sync.Mutex
	served map[string]int64 // successful calls by instance ID

	stop chan struct{}
	wg   sync.WaitGroup
}

// loadShape is how many callers of each kind call, how often.
type loadShape struct {
	callers int // of each kind
	pace    time.Duration
}

var defaultLoad = loadShape{callersPerKind, pace}

// newLoad starts the callers of every kind: mc's, and a gRPC ClientConn
// and a roster agent process on the client's registry (reg, at regURL),
// each with its default options. Only the base HTTP transports are the
// test's own, with a per-attempt timeout, so that their idle connections
// can be closed at the end. The agent and the PHP workers log in dir.
func newLoad(mc *middleware.Client, q *middleware.Quarantine, reg *registry.Registry, regURL, dir string, first *phase, shape loadShape) (*load, error) {
	l := &load{
		mc:     mc,
		q:      q,
		plain:  attemptTransport(),
		base:   attemptTransport(),
		cur:    first,
		served: map[string]int64{},
		stop:   make(chan struct{}),
	}
	l.do = &http.Client{Transport: l.plain}
	tr := rosterhttp.New(mc)
	tr.Base = l.base
	l.hc = &http.Client{Transport: tr, Timeout: callTimeout}
	var err error
	if l.conn, err = rostergrpc.NewClient(reg, service, nil, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		return nil, err
	}
	if l.agent, err = startAgent(regURL, dir); err != nil {
		l.conn.Close()
		return nil, err
	}
	for range shape.callers {
		w, err := startPHP(l.agent.url, dir)
		if err != nil {
			l.close()
			return nil, err
		}
		l.php = append(l.php, w)
	}
	for i := range shape.callers {
		l.wg.Add(4)
		go l.run(viaDo, shape.pace, l.callDo)
		go l.run(viaHTTP, shape.pace, l.callHTTP)
		go l.run(viaGRPC, shape.pace, l.callGRPC)
		go l.run(viaAgent, shape.pace, l.php[i].call)
	}
	return l, nil
}

func attemptTransport() *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: attemptTimeout}).DialContext,
		ResponseHeaderTimeout: attemptTimeout,
		MaxIdleConnsPerHost:   4,
	}
}

// close stops the callers, the PHP workers and the agent, and closes the
// connections.
func (l *load) close() {
	close(l.stop)
	l.wg.Wait()
	for _, w := range l.php {
		w.close()
	}
	l.agent.stop()
	_ = l.conn.Close()
	l.plain.CloseIdleConnections()
	l.base.CloseIdleConnections()
}

func (l *load) run(kind string, pace time.Duration, call func() (string, error)) {
	defer l.wg.Done()
	tick := time.NewTicker(pace)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		p := l.enter()
		start := time.Now()
		id, err := call()
		p.record(kind, start, time.Since(start), err, l.mc, l.q)
		p.inflight.Done()
		if err == nil {
			l.smu.Lock()
			l.served[id]++
			l.smu.Unlock()
		}
	}
}

// enter returns the current phase with the call counted in flight, so
// that begin can wait for the calls of the phase it ends.
func (l *load) enter() *phase {
	l.mu.RLock()
	defer l.mu.RUnlock()
	l.cur.inflight.Add(1)
	return l.cur
}

// begin makes next the current phase and returns the previous one once
// its last call has finished.
func (l *load) begin(next *phase) *phase {
	l.mu.Lock()
	prev := l.cur
	l.cur = next
	l.mu.Unlock()
	prev.inflight.Wait()
	prev.ended = time.Now()
	return prev
}

// servedBy returns a copy of the successful calls by instance ID.
func (l *load) servedBy() map[string]int64 {
	l.smu.Lock()
	defer l.smu.Unlock()
	m := make(map[string]int64, len(l.served))
	for id, n := range l.served {
		m[id] = n
	}
	return m
}

// agentLog returns the agent's log tail if p had failed agent calls.
func (l *load) agentLog(p *phase) string {
	if l == nil || p.failed[kindIndex(viaAgent)].Load() == 0 {
		return ""
	}
	return "\n  roster agent's log:\n    " + strings.ReplaceAll(tail(l.agent.logPath, 2000), "\n", "\n    ")
}

func (l *load) callDo() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var id string
	err := l.mc.Do(ctx, service, func(ctx context.Context, in registry.Instance) error {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		defer cancel()
		var err error
		id, err = get(actx, l.do, "http://"+in.Address+"/")
		return err
	})
	return id, err
}

func (l *load) callHTTP() (string, error) {
	return get(context.Background(), l.hc, "http://"+service+"/")
}

// callGRPC calls the health service and returns the instance named in
// the answer's header.
func (l *load) callGRPC() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var md metadata.MD
	if _, err := healthpb.NewHealthClient(l.conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md)); err != nil {
		return "", err
	}
	if ids := md.Get(idHeader); len(ids) == 1 {
		return ids[0], nil
	}
	return "", fmt.Errorf("answer names no instance: %v", md)
}

// get sends a GET and returns the body of a 200 answer (the instance ID).
func get(ctx context.Context, hc *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d: %.80s", resp.StatusCode, b)
	}
	return string(b), nil
}

// ---- phases ----

// maxSamples is how many failed calls a phase keeps in full.
const maxSamples = 5

// phase counts the calls made during one fault (or between two) and keeps
// what explains a failure: a timeline of the fault's events and the
// first failed calls, timed from the phase's start.
type phase struct {
	name     string
	start    time.Time
	ended    time.Time
	inflight sync.WaitGroup

	calls, failed [len(kinds)]atomic.Int64 // by kind, in the order of kinds
	maxLatency    atomic.Int64             // ns
	recovery      time.Duration            // after a registry restart: ready → every instance listed; -1 if not measured

	mu        sync.Mutex
	events    []string
	samples   []string
	kinds     map[string]int // normalised error text → count
	firstFail time.Duration
	lastFail  time.Duration
}

func newPhase(name string) *phase {
	return &phase{name: name, start: time.Now(), recovery: -1, kinds: map[string]int{}}
}

func kindIndex(kind string) int { return slices.Index(kinds[:], kind) }

// since formats a time relative to the phase's start.
func (p *phase) since(t time.Time) string { return fmt.Sprintf("+%.2fs", t.Sub(p.start).Seconds()) }

// event adds a line to the phase's timeline and returns its time.
func (p *phase) event(format string, args ...any) time.Time {
	now := time.Now()
	p.mu.Lock()
	p.events = append(p.events, p.since(now)+" "+fmt.Sprintf(format, args...))
	p.mu.Unlock()
	return now
}

func (p *phase) record(kind string, start time.Time, d time.Duration, err error, mc *middleware.Client, q *middleware.Quarantine) {
	k := kindIndex(kind)
	p.calls[k].Add(1)
	for {
		m := p.maxLatency.Load()
		if int64(d) <= m || p.maxLatency.CompareAndSwap(m, int64(d)) {
			break
		}
	}
	if err == nil {
		return
	}
	p.failed[k].Add(1)
	at := start.Sub(p.start)
	norm := normalise(err.Error())
	var sample string
	if _, failed := p.total(); failed <= maxSamples {
		// What the client picked from when the call failed.
		snap, ok := mc.Snapshot(service)
		sample = fmt.Sprintf("+%.3fs %s (%v): %v [client: %d instances, stale %v, have %v, ejected %d]",
			at.Seconds(), kind, d.Round(time.Millisecond), err,
			len(snap.Instances), snap.Stale, ok, len(q.Ejected(service)))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.firstFail == 0 || at < p.firstFail {
		p.firstFail = at
	}
	p.lastFail = max(p.lastFail, at)
	if sample != "" && len(p.samples) < maxSamples {
		p.samples = append(p.samples, sample)
	}
	if len(p.kinds) < 20 || p.kinds[norm] > 0 {
		p.kinds[norm]++
	}
}

var (
	hexRun   = regexp.MustCompile(`[0-9a-f]{16}`)
	digitRun = regexp.MustCompile(`[0-9]+`)
)

// normalise turns an error's text into its kind: IDs, ports and
// durations replaced, so that one cause counts once.
func normalise(s string) string {
	s = hexRun.ReplaceAllString(s, "<id>")
	s = digitRun.ReplaceAllString(s, "N")
	if len(s) > 240 {
		s = s[:240] + "…"
	}
	return s
}

// total returns the calls and failures of every kind.
func (p *phase) total() (calls, failed int64) {
	for k := range kinds {
		calls += p.calls[k].Load()
		failed += p.failed[k].Load()
	}
	return calls, failed
}

// byKind formats counts as "N Do, N http, N grpc, N agent".
func byKind(n *[len(kinds)]atomic.Int64) string {
	s := make([]string, len(kinds))
	for k, name := range kinds {
		s[k] = fmt.Sprintf("%d %s", n[k].Load(), name)
	}
	return strings.Join(s, ", ")
}

// summary is the one-line account of an ended phase.
func (p *phase) summary() string {
	calls, failed := p.total()
	s := fmt.Sprintf("%s: %.1fs, %d calls (%s), %d failed (%s), max latency %v",
		p.name, p.ended.Sub(p.start).Seconds(), calls, byKind(&p.calls),
		failed, byKind(&p.failed), time.Duration(p.maxLatency.Load()).Round(time.Millisecond))
	if p.recovery >= 0 {
		s += fmt.Sprintf(", recovery %v", p.recovery.Round(10*time.Millisecond))
	}
	return s
}

// report is the full account of an ended phase: summary, timeline, and
// the failures by kind with the first ones in full.
func (p *phase) report() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	b.WriteString(p.summary())
	if len(p.events) > 0 {
		b.WriteString("\n  timeline:\n    " + strings.Join(p.events, "\n    "))
	}
	if _, failed := p.total(); failed > 0 {
		fmt.Fprintf(&b, "\n  failures from +%.3fs to +%.3fs, by kind:", p.firstFail.Seconds(), p.lastFail.Seconds())
		kinds := make([]string, 0, len(p.kinds))
		for k := range p.kinds {
			kinds = append(kinds, k)
		}
		slices.SortFunc(kinds, func(a, b string) int { return p.kinds[b] - p.kinds[a] })
		for _, k := range kinds {
			fmt.Fprintf(&b, "\n    %6d × %s", p.kinds[k], k)
		}
		b.WriteString("\n  first failures:\n    " + strings.Join(p.samples, "\n    "))
	}
	return b.String()
}
