package dnssrv_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/goleak"

	"github.com/roster-go/roster/backends/dnssrv"
	"github.com/roster-go/roster/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// zone is a DNS server on loopback (UDP and TCP) that answers from a
// record set the test changes, and counts the SRV questions it gets.
type zone struct {
	mu      sync.Mutex
	answer  func(q dns.Question) (rcode int, ans, extra []dns.RR)
	srvQs   atomic.Int32
	srvAt   []time.Time // when each SRV question came
	udp     *dns.Server
	tcp     *dns.Server
	addr    string
	truncUD bool // answer UDP questions truncated and empty
}

func startZone(t *testing.T) *zone {
	t.Helper()
	pc, ln := listenBoth(t)
	z := &zone{addr: pc.LocalAddr().String()}
	var started sync.WaitGroup
	started.Add(2)
	z.udp = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(z.serve), NotifyStartedFunc: started.Done}
	z.tcp = &dns.Server{Listener: ln, Handler: dns.HandlerFunc(z.serve), NotifyStartedFunc: started.Done}
	go func() { _ = z.udp.ActivateAndServe() }()
	go func() { _ = z.tcp.ActivateAndServe() }()
	started.Wait()
	t.Cleanup(func() { _ = z.udp.Shutdown(); _ = z.tcp.Shutdown() })
	return z
}

// listenBoth listens on one free loopback port over UDP and TCP; the TCP
// port of a free UDP port may be taken, so it tries a few.
func listenBoth(t *testing.T) (net.PacketConn, net.Listener) {
	t.Helper()
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln
		}
		pc.Close()
	}
	t.Fatal("no loopback port free over both UDP and TCP")
	return nil, nil
}

func (z *zone) questions() []time.Time {
	z.mu.Lock()
	defer z.mu.Unlock()
	return append([]time.Time(nil), z.srvAt...)
}

func (z *zone) set(f func(q dns.Question) (int, []dns.RR, []dns.RR)) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.answer = f
}

func (z *zone) serve(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	q := req.Question[0]
	z.mu.Lock()
	if q.Qtype == dns.TypeSRV {
		z.srvQs.Add(1)
		z.srvAt = append(z.srvAt, time.Now())
	}
	f, trunc := z.answer, z.truncUD
	z.mu.Unlock()
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp && trunc {
		m.Truncated = true
		_ = w.WriteMsg(m)
		return
	}
	m.Rcode, m.Answer, m.Extra = f(q)
	_ = w.WriteMsg(m)
}

func rr(t *testing.T, s string) dns.RR {
	t.Helper()
	r, err := dns.NewRR(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// srvAnswer answers "<svc>.test." with the SRV records given, and the
// targets' addresses in the additional section.
func srvAnswer(t *testing.T, ttl string, srv []string, extra []string) func(dns.Question) (int, []dns.RR, []dns.RR) {
	var ans, ext []dns.RR
	for _, s := range srv {
		ans = append(ans, rr(t, "api.test. "+ttl+" IN SRV "+s))
	}
	for _, s := range extra {
		ext = append(ext, rr(t, s))
	}
	return func(q dns.Question) (int, []dns.RR, []dns.RR) {
		if q.Qtype == dns.TypeSRV && q.Name == "api.test." {
			return dns.RcodeSuccess, ans, ext
		}
		return dns.RcodeNameError, nil, nil
	}
}

func open(t *testing.T, z *zone, query string, opts ...registry.Option) *registry.Registry {
	t.Helper()
	r, err := registry.Open(t.Context(), "dns+srv://"+z.addr+"/{service}.test?"+query, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestRecordsToInstances: address from the additional section or an A/AAAA
// question, port and weight from the record, "." skipped, one instance
// per address.
func TestRecordsToInstances(t *testing.T) {
	z := startZone(t)
	srv := []string{"1 10 8080 a.test.", "1 0 9090 b.test.", "1 5 80 .", "1 10 8080 a.test."}
	base := srvAnswer(t, "30", srv, []string{"a.test. 30 IN A 10.0.0.1"})
	bAAAA := rr(t, "b.test. 30 IN AAAA 2001:db8::2")
	z.set(func(q dns.Question) (int, []dns.RR, []dns.RR) {
		if q.Name == "b.test." && q.Qtype == dns.TypeAAAA {
			return dns.RcodeSuccess, []dns.RR{bAAAA}, nil
		}
		if q.Name == "b.test." {
			return dns.RcodeSuccess, nil, nil
		}
		return base(q)
	})
	snap, err := open(t, z, "").Lookup(t.Context(), "api")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range snap.Instances {
		got = append(got, in.ID+" "+in.Address+" "+in.Metadata["srv_target"]+" "+string(rune('0'+in.Weight/5)))
	}
	want := []string{"10.0.0.1-8080 10.0.0.1:8080 a.test 2", "2001-db8--2--9090 [2001:db8::2]:9090 b.test 0"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("instances:\n got  %v\n want %v", got, want)
	}
	if snap.Instances[1].Weight != 0 {
		t.Fatalf("SRV weight 0 became %d, want 0 (draining)", snap.Instances[1].Weight)
	}
}

// TestPollHonoursTTL: a watch asks again after the records' TTL, no sooner
// than min_poll and no later than max_poll. Timers never fire early, so
// the lower bound is exact; the upper one leaves a loaded machine 1s.
func TestPollHonoursTTL(t *testing.T) {
	for _, tc := range []struct {
		ttl, query string
		gap        time.Duration
	}{
		{"1", "min_poll=100ms", time.Second},                              // the TTL
		{"0", "min_poll=200ms", 200 * time.Millisecond},                   // min_poll
		{"3600", "min_poll=100ms&max_poll=500ms", 500 * time.Millisecond}, // max_poll
	} {
		z := startZone(t)
		z.set(srvAnswer(t, tc.ttl, []string{"1 1 80 a.test."}, []string{"a.test. " + tc.ttl + " IN A 10.0.0.1"}))
		w, err := open(t, z, tc.query).Watch(t.Context(), "api")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Next(t.Context()); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for z.srvQs.Load() < 4 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		w.Close()
		at := z.questions()
		if len(at) < 4 {
			t.Fatalf("TTL %s, %s: %d questions in 10s", tc.ttl, tc.query, len(at))
		}
		for i := 1; i < 4; i++ {
			if gap := at[i].Sub(at[i-1]); gap < tc.gap-5*time.Millisecond || gap > tc.gap+time.Second {
				t.Errorf("TTL %s, %s: %v between questions, want %v", tc.ttl, tc.query, gap, tc.gap)
			}
		}
	}
}

// TestWatchDeliversChanges: a change in the records reaches the watcher at
// the next poll; a failing server is ErrUnavailable with the last state
// kept (stale), and its return is a fresh snapshot.
func TestWatchDeliversChanges(t *testing.T) {
	z := startZone(t)
	z.set(srvAnswer(t, "0", []string{"1 1 80 a.test."}, []string{"a.test. 0 IN A 10.0.0.1"}))
	r := open(t, z, "min_poll=50ms", registry.WithRecoveryWindow(0))
	w, err := r.Watch(t.Context(), "api")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	next := func() registry.Snapshot {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		s, err := w.Next(ctx)
		if err != nil && !s.Stale {
			t.Fatal(err)
		}
		return s
	}
	if s := next(); len(s.Instances) != 1 {
		t.Fatalf("first: %v", s.Instances)
	}
	z.set(srvAnswer(t, "0", []string{"1 1 80 a.test.", "1 1 81 a.test."}, []string{"a.test. 0 IN A 10.0.0.1"}))
	if s := next(); len(s.Instances) != 2 {
		t.Fatalf("after an addition: %v", s.Instances)
	}
	z.set(func(dns.Question) (int, []dns.RR, []dns.RR) { return dns.RcodeServerFailure, nil, nil })
	if s := next(); !s.Stale || len(s.Instances) != 2 {
		t.Fatalf("server failing: stale=%v %v, want the last 2 instances, stale", s.Stale, s.Instances)
	}
	z.set(srvAnswer(t, "0", []string{"1 1 80 a.test."}, []string{"a.test. 0 IN A 10.0.0.1"}))
	// No recovery window: the first answer after the failure is served.
	if s := next(); s.Stale || len(s.Instances) != 1 {
		t.Fatalf("server back: stale=%v %v", s.Stale, s.Instances)
	}
}

// TestTruncatedAnswerAskedOverTCP: with udp=true, a truncated answer is
// asked again over TCP.
func TestTruncatedAnswerAskedOverTCP(t *testing.T) {
	z := startZone(t)
	z.set(srvAnswer(t, "0", []string{"1 1 80 a.test."}, []string{"a.test. 0 IN A 10.0.0.1"}))
	z.mu.Lock()
	z.truncUD = true
	z.mu.Unlock()
	snap, err := open(t, z, "udp=true").Lookup(t.Context(), "api")
	if err != nil || len(snap.Instances) != 1 {
		t.Fatalf("Lookup: %v, %v", snap.Instances, err)
	}
}

// TestUnknownNameIsEmpty: NXDOMAIN is an empty snapshot, not an error.
func TestUnknownNameIsEmpty(t *testing.T) {
	z := startZone(t)
	z.set(srvAnswer(t, "0", nil, nil))
	snap, err := open(t, z, "").Lookup(t.Context(), "nobody")
	if err != nil || snap.Instances == nil || len(snap.Instances) != 0 {
		t.Fatalf("Lookup of an unknown name: %#v, %v", snap.Instances, err)
	}
}

// TestUnreachableResolverIsUnavailable: no server at the address is
// ErrUnavailable within the timeout.
func TestUnreachableResolverIsUnavailable(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0") // bound, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	r, err := registry.Open(t.Context(), "dns+srv://"+pc.LocalAddr().String()+"/x.test?timeout=200ms")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	start := time.Now()
	_, err = r.Lookup(t.Context(), "api")
	if !errors.Is(err, registry.ErrUnavailable) || time.Since(start) > 5*time.Second {
		t.Fatalf("Lookup on a silent resolver: %v after %v", err, time.Since(start))
	}
}

// TestServerAnswersClassified: an answer the server will never change
// (FORMERR, NOTIMP) is ErrInvalid; one that may pass is ErrUnavailable.
// Each error names the answer and the resolver.
func TestServerAnswersClassified(t *testing.T) {
	z := startZone(t)
	r := open(t, z, "")
	for rcode, want := range map[int]error{
		dns.RcodeFormatError:    registry.ErrInvalid,
		dns.RcodeNotImplemented: registry.ErrInvalid,
		dns.RcodeServerFailure:  registry.ErrUnavailable,
		dns.RcodeRefused:        registry.ErrUnavailable,
	} {
		z.set(func(dns.Question) (int, []dns.RR, []dns.RR) { return rcode, nil, nil })
		_, err := r.Lookup(t.Context(), "api")
		if !errors.Is(err, want) || err == nil || !strings.Contains(err.Error(), dns.RcodeToString[rcode]+" from ") {
			t.Errorf("Lookup answered %s = %v, want %v naming the answer", dns.RcodeToString[rcode], err, want)
		}
	}
}

// TestReadOnly: Register and Services are invalid, saying why.
func TestReadOnly(t *testing.T) {
	d, err := dnssrv.New(dnssrv.Options{Resolver: "127.0.0.1:53", Name: "{service}.test"})
	if err != nil {
		t.Fatal(err)
	}
	r := registry.New(d)
	defer r.Close()
	if _, err := r.Register(t.Context(), registry.Instance{Service: "api", Address: "10.0.0.1:80"}); !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("Register: %v", err)
	}
	if _, err := r.Services(t.Context()); !errors.Is(err, registry.ErrInvalid) {
		t.Fatalf("Services: %v", err)
	}
	if got := dnssrv.NameOf(d, "api"); got != "api.test." {
		t.Fatalf("NameOf = %q", got)
	}
}
