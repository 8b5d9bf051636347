package dnssrv_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/roster-go/roster/internal/logbuf"
	"github.com/roster-go/roster/registry"
)

// slowTargets answers "api.test." with n SRV records of priority 1,
// targets t0.test. … without addresses, and each target's A question
// (10.0.1.i) and AAAA question (none) after delay. It records the most
// address questions in flight at once.
type slowTargets struct {
	t        *testing.T
	n        int
	delay    time.Duration
	inFlight atomic.Int32
	mu       sync.Mutex
	most     int32
}

func (s *slowTargets) answer(q dns.Question) (int, []dns.RR, []dns.RR) {
	if q.Qtype == dns.TypeSRV {
		if q.Name != "api.test." {
			return dns.RcodeNameError, nil, nil
		}
		var ans []dns.RR
		for i := range s.n {
			ans = append(ans, rr(s.t, fmt.Sprintf("api.test. 30 IN SRV 1 1 80 t%d.test.", i)))
		}
		return dns.RcodeSuccess, ans, nil
	}
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	s.mu.Lock()
	s.most = max(s.most, n)
	s.mu.Unlock()
	time.Sleep(s.delay)
	var i int
	if _, err := fmt.Sscanf(q.Name, "t%d.test.", &i); err != nil || q.Qtype != dns.TypeA {
		return dns.RcodeSuccess, nil, nil
	}
	return dns.RcodeSuccess, []dns.RR{rr(s.t, fmt.Sprintf("%s 30 IN A 10.0.1.%d", q.Name, i))}, nil
}

// TestSlowTargetsResolvedTogether: 50 targets whose address answers each
// come 1.5s late are resolved together, under one deadline: the Lookup
// (whose context has none: the registry's default applies) takes about
// 1.5s, not 50 × 2 × 1.5s.
func TestSlowTargetsResolvedTogether(t *testing.T) {
	z := startZone(t)
	st := &slowTargets{t: t, n: 50, delay: 1500 * time.Millisecond}
	z.set(st.answer)
	r := open(t, z, "")
	start := time.Now()
	snap, err := r.Lookup(context.Background(), "api")
	took := time.Since(start)
	if err != nil || len(snap.Instances) != 50 {
		t.Fatalf("Lookup of 50 slow targets: %d instances, %v after %v; want 50", len(snap.Instances), err, took)
	}
	// Every question in flight at once is the proof; the clock's bound
	// leaves a loaded machine room.
	if st.most != 100 || took > 4500*time.Millisecond {
		t.Fatalf("Lookup of 50 targets each answering 1.5s late: %d of 100 questions in flight at most, %v; want all 100 together, about 1.5s", st.most, took)
	}
	t.Logf("50 targets, each A and AAAA answer 1.5s late: Lookup %v, %d questions in flight at most", took, st.most)
}

// TestAddressQuestionsBounded: 100 targets are 200 address questions; at
// most 128 are in flight at once, and every target still resolves.
func TestAddressQuestionsBounded(t *testing.T) {
	z := startZone(t)
	st := &slowTargets{t: t, n: 100, delay: 300 * time.Millisecond}
	z.set(st.answer)
	snap, err := open(t, z, "").Lookup(t.Context(), "api")
	if err != nil || len(snap.Instances) != 100 {
		t.Fatalf("Lookup of 100 targets: %d instances, %v", len(snap.Instances), err)
	}
	if st.most > 128 || st.most <= 64 {
		t.Fatalf("%d address questions in flight at once; want at most 128, and more than 64 (together)", st.most)
	}
}

// captureWarnings sends slog.Default to a buffer for the test.
func captureWarnings(t *testing.T) *logbuf.Buffer {
	b := &logbuf.Buffer{}
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(b, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return b
}

// TestTargetPastDeadlineLeftOut: a target whose addresses do not come
// within the caller's deadline is left out, with a warning naming it;
// the targets that resolved are served at the deadline.
func TestTargetPastDeadlineLeftOut(t *testing.T) {
	logs := captureWarnings(t)
	z := startZone(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // before the zone's shutdown
	base := srvAnswer(t, "30", []string{"1 1 80 a.test.", "1 1 80 b.test.", "1 1 80 slow.test."}, nil)
	z.set(func(q dns.Question) (int, []dns.RR, []dns.RR) {
		switch {
		case q.Name == "slow.test.":
			<-release // past any deadline
			return dns.RcodeSuccess, nil, nil
		case q.Qtype == dns.TypeA && q.Name != "api.test.":
			return dns.RcodeSuccess, []dns.RR{rr(t, q.Name+" 30 IN A 10.0.0."+map[string]string{"a.test.": "1", "b.test.": "2"}[q.Name])}, nil
		case q.Qtype == dns.TypeAAAA:
			return dns.RcodeSuccess, nil, nil
		}
		return base(q)
	})
	r := open(t, z, "timeout=5s")
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	start := time.Now()
	snap, err := r.Lookup(ctx, "api")
	took := time.Since(start)
	if err != nil || len(snap.Instances) != 2 || took > 2500*time.Millisecond {
		t.Fatalf("Lookup with a target past the deadline: %v, %v after %v; want a and b at the 1s deadline", snap.Instances, err, took)
	}
	if l := logs.String(); !strings.Contains(l, "left out") || !strings.Contains(l, "slow.test") {
		t.Fatalf("no warning names the target left out; logged:\n%s", l)
	}
	t.Logf("a target past the 1s deadline: Lookup %v, %v", took, addrs(snap))
}

// prio answers api.test. with two targets of priority 1 (p1a, p1b) and
// one of priority 2 (p2), with addresses asked for; up reports whether the
// priority 1 targets resolve (else NXDOMAIN).
func prio(t *testing.T, up *atomic.Bool) func(dns.Question) (int, []dns.RR, []dns.RR) {
	base := srvAnswer(t, "0", []string{"2 10 80 p2.test.", "1 10 80 p1a.test.", "1 30 80 p1b.test."}, nil)
	addr := map[string]string{"p1a.test.": "10.0.0.1", "p1b.test.": "10.0.0.2", "p2.test.": "10.0.0.9"}
	return func(q dns.Question) (int, []dns.RR, []dns.RR) {
		ip, ok := addr[q.Name]
		switch {
		case !ok:
			return base(q)
		case strings.HasPrefix(q.Name, "p1") && !up.Load():
			return dns.RcodeNameError, nil, nil
		case q.Qtype == dns.TypeA:
			return dns.RcodeSuccess, []dns.RR{rr(t, q.Name+" 0 IN A "+ip)}, nil
		}
		return dns.RcodeSuccess, nil, nil
	}
}

func addrs(s registry.Snapshot) string {
	var a []string
	for _, in := range s.Instances {
		a = append(a, in.Address+"/"+in.Metadata["srv_priority"])
	}
	return strings.Join(a, " ")
}

// TestPriorityLowestFirst: only the lowest priority's targets are
// instances (RFC 2782); the next priority serves only when none of them
// resolves, and the lowest serves again once one does.
func TestPriorityLowestFirst(t *testing.T) {
	z := startZone(t)
	var up atomic.Bool
	up.Store(true)
	z.set(prio(t, &up))
	r := open(t, z, "min_poll=50ms")
	snap, err := r.Lookup(t.Context(), "api")
	if want := "10.0.0.1:80/1 10.0.0.2:80/1"; err != nil || addrs(snap) != want {
		t.Fatalf("Lookup: %q, %v; want the priority 1 targets alone, %q", addrs(snap), err, want)
	}
	w, err := r.Watch(t.Context(), "api")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	next := func(want string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		s, err := w.Next(ctx)
		if err != nil || addrs(s) != want {
			t.Fatalf("watcher: %q, %v; want %q", addrs(s), err, want)
		}
	}
	next("10.0.0.1:80/1 10.0.0.2:80/1")
	up.Store(false) // the priority 1 targets gone: NXDOMAIN
	next("10.0.0.9:80/2")
	up.Store(true)
	next("10.0.0.1:80/1 10.0.0.2:80/1")
}
