package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// slowZone is a DNS server on loopback (TCP, the dns+srv default) whose
// "api.test." has n SRV targets without addresses; each target's A and
// AAAA answer comes delay late.
func slowZone(t *testing.T, n int, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	srv := &dns.Server{Listener: ln, NotifyStartedFunc: func() { close(started) }, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		q := req.Question[0]
		switch {
		case q.Qtype == dns.TypeSRV && q.Name == "api.test.":
			for i := range n {
				m.Answer = append(m.Answer, &dns.SRV{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: 30},
					Priority: 1, Weight: 1, Port: 80, Target: fmt.Sprintf("t%d.test.", i)})
			}
		case q.Qtype == dns.TypeA || q.Qtype == dns.TypeAAAA:
			time.Sleep(delay)
			var i int
			if _, err := fmt.Sscanf(q.Name, "t%d.test.", &i); err == nil && q.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30},
					A: net.IPv4(10, 0, 1, byte(i))})
			}
		default:
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return ln.Addr().String()
}

// TestLsSlowDNSTargets: roster ls of a dns+srv service whose 50 targets'
// address answers each come 1.5s late takes about 1.5s (it took 150s).
func TestLsSlowDNSTargets(t *testing.T) {
	addr := slowZone(t, 50, 1500*time.Millisecond)
	start := time.Now()
	out, errOut, err := execute(context.Background(), "ls", "api", "--registry", "dns+srv://"+addr+"/{service}.test")
	took := time.Since(start)
	if err != nil {
		t.Fatalf("roster ls: %v\n%s", err, errOut)
	}
	// Sequential questions took 150s, and past the 15s bound failed;
	// 6s leaves a loaded machine room over the 1.5s measured.
	if n := strings.Count(out, "srv_target=t"); n != 50 || took > 6*time.Second {
		t.Fatalf("roster ls of 50 slow targets: %d instances in %v; want 50 in about 1.5s\n%s", n, took, out)
	}
	t.Logf("roster ls, 50 targets each answering 1.5s late: %v", took)
}
