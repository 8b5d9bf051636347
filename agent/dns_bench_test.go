package agent_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/roster-go/roster/agent"
	_ "github.com/roster-go/roster/backends/consul"
	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/internal/servers/consultest"
	"github.com/roster-go/roster/registry"
)

// BenchmarkDNSQuery: A queries for a service of 10 instances over
// loopback UDP, from parallel clients with a socket each, against the
// agent and against Consul's own DNS interface serving the same 10
// instances (registered through Roster's Consul backend); each reports
// queries per second and the p99 latency. The agent answers from its
// followed list, so its backend (in memory here) is not on the path.
// The Consul case needs ROSTER_CONSUL_BIN (or ROSTER_CACHE).
//
//	go test -run '^$' -bench BenchmarkDNSQuery -benchtime 3s ./agent
func BenchmarkDNSQuery(b *testing.B) {
	b.Run("agent", func(b *testing.B) {
		reg := registry.New(memory.NewDriver(memory.NewServer()))
		defer reg.Close()
		register10(b, reg)
		a, err := agent.New(agent.Config{Registry: reg, DNS: "127.0.0.1:0", DNSRate: -1})
		if err != nil {
			b.Fatal(err)
		}
		defer a.Close()
		benchDNS(b, a.DNSAddr().String(), "api.roster.", 10)
	})
	b.Run("consul", func(b *testing.B) {
		// Consul answers 3 records over UDP by default: 10, as the agent.
		c := consultest.Start(b, "-hcl", "dns_config { udp_answer_limit = 10 }")
		reg, err := registry.Open(context.Background(), c.URL(""))
		if err != nil {
			b.Fatal(err)
		}
		defer reg.Close()
		register10(b, reg)
		// Consul answers once the TTL checks pass: poll for all 10.
		for deadline := time.Now().Add(30 * time.Second); ; {
			r, _, err := (&dns.Client{Net: "tcp"}).Exchange(new(dns.Msg).SetQuestion("api.service.consul.", dns.TypeA), c.DNSAddr())
			if err == nil && len(r.Answer) == 10 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("Consul DNS: %v, %v", r, err)
			}
			time.Sleep(100 * time.Millisecond) // polling a condition with a deadline
		}
		benchDNS(b, c.DNSAddr(), "api.service.consul.", 1) // it trims to 8 records within 512 bytes
	})
}

func register10(b *testing.B, reg *registry.Registry) {
	for i := range 10 {
		if _, err := reg.Register(context.Background(), registry.Instance{Service: "api", Address: "10.0.0." + strconv.Itoa(i+1) + ":80"}); err != nil {
			b.Fatal(err)
		}
	}
}

func benchDNS(b *testing.B, addr, name string, want int) {
	var (
		mu  sync.Mutex
		lat []time.Duration
	)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
		conn, err := c.Dial(addr)
		if err != nil {
			b.Error(err)
			return
		}
		defer conn.Close()
		q := new(dns.Msg).SetQuestion(name, dns.TypeA)
		var own []time.Duration
		for pb.Next() {
			t0 := time.Now()
			r, _, err := c.ExchangeWithConn(q, conn)
			if err != nil || len(r.Answer) < want {
				b.Errorf("answer %v: %v", r, err)
				return
			}
			own = append(own, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, own...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "queries/s")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
