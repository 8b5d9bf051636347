package agent

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
)

// FuzzDNSName: any name below the domain parses to a valid service and
// endpoint, or to errDNSName; never a panic.
func FuzzDNSName(f *testing.F) {
	for _, s := range []string{"", "api", "a.b.c", "canary.tag.api", "v1.version.z.zone.api", "_grpc._tcp.api",
		"_grpc._tcp.canary.tag.api", "0a000001.addr", "x.tag", "_._tcp.api", "v1.version.v2.version.api", "..", "_grpc._udp.api"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rel string) {
		n, err := parseDNSName(rel)
		if err != nil {
			if err != errDNSName {
				t.Fatalf("%q: %v", rel, err)
			}
			return
		}
		if n.apex || n.addr.IsValid() {
			return
		}
		if n.service == "" || !strings.HasSuffix(rel, n.service) {
			t.Fatalf("%q: service %q", rel, n.service)
		}
		if n.endpoint != "" && !strings.HasPrefix(rel, "_"+n.endpoint+"._tcp.") {
			t.Fatalf("%q: endpoint %q", rel, n.endpoint)
		}
	})
}

// packetWriter is a dns.ResponseWriter over UDP that keeps the packed
// answer.
type packetWriter struct {
	out   []byte
	wrote int
}

func (w *packetWriter) LocalAddr() net.Addr {
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
}
func (w *packetWriter) RemoteAddr() net.Addr {
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
}
func (w *packetWriter) WriteMsg(m *dns.Msg) error {
	b, err := m.Pack()
	if err != nil {
		return err
	}
	return w.write(b)
}
func (w *packetWriter) Write(b []byte) (int, error) { return len(b), w.write(b) }
func (w *packetWriter) write(b []byte) error {
	w.out = append(w.out[:0], b...)
	w.wrote++
	return nil
}
func (w *packetWriter) Close() error        { return nil }
func (w *packetWriter) TsigStatus() error   { return nil }
func (w *packetWriter) TsigTimersOnly(bool) {}
func (w *packetWriter) Hijack()             {}

// FuzzDNSPacket: any packet that unpacks gets at most one answer over
// UDP, never larger than the query allows (512 bytes, or its EDNS0
// buffer up to 1232), and never a panic.
func FuzzDNSPacket(f *testing.F) {
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	defer reg.Close()
	for i := range 40 {
		_, err := reg.Register(context.Background(), registry.Instance{Service: "api", Address: "[fd00::" + strconv.Itoa(i+1) + "]:80",
			Endpoints: []registry.Endpoint{{Name: "grpc", Address: "10.0.0." + strconv.Itoa(i+1) + ":9000"}}}, registry.WithTTL(time.Minute))
		if err != nil {
			f.Fatal(err)
		}
	}
	a, err := New(Config{Registry: reg, MaxServices: 64})
	if err != nil {
		f.Fatal(err)
	}
	defer a.Close()
	s := &dnsServer{a: a, domain: DefaultDNSDomain, ttl: 5, limiter: newDNSLimiter(-1)}
	for _, q := range []struct {
		name string
		t    uint16
		edns uint16
	}{{"api.roster.", dns.TypeAAAA, 0}, {"api.roster.", dns.TypeSRV, 4096}, {"_grpc._tcp.api.roster.", dns.TypeSRV, 700},
		{"api.roster.", dns.TypeANY, 0}, {"example.com.", dns.TypeA, 0}, {"nosuch.roster.", dns.TypeA, 1232}} {
		m := new(dns.Msg).SetQuestion(q.name, q.t)
		if q.edns != 0 {
			m.SetEdns0(q.edns, false)
		}
		b, _ := m.Pack()
		f.Add(b)
	}
	// A compression pointer loop: the name at offset 12 points to itself.
	f.Add([]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := new(dns.Msg)
		if r.Unpack(b) != nil {
			return // the server answers FORMERR before the handler
		}
		limit := dns.MinMsgSize
		if opt := r.IsEdns0(); opt != nil {
			limit = min(max(int(opt.UDPSize()), dns.MinMsgSize), dnsMaxUDP)
		}
		w := &packetWriter{}
		s.ServeDNS(w, r)
		if w.wrote > 1 {
			t.Fatalf("%d answers to one query", w.wrote)
		}
		if len(w.out) > limit {
			t.Fatalf("UDP answer of %d bytes, the query allows %d", len(w.out), limit)
		}
		if w.wrote == 1 {
			m := new(dns.Msg)
			if err := m.Unpack(w.out); err != nil {
				t.Fatalf("answer does not unpack: %v", err)
			}
			if m.RecursionAvailable || len(m.Answer) > dnsMaxAnswers {
				t.Fatalf("answer: ra %v, %d records", m.RecursionAvailable, len(m.Answer))
			}
		}
	})
}
