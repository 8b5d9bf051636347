package agent_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/roster-go/roster/agent"
	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
)

// digAnswer is what dig printed: the status, the header flags and the
// answer section's records, each split in fields.
type digAnswer struct {
	status  string
	flags   []string
	records [][]string
}

func (d digAnswer) has(flag string) bool { return slices.Contains(d.flags, flag) }

// data returns the last field of each record (the address, or the SRV
// target), sorted.
func (d digAnswer) data() []string {
	var out []string
	for _, r := range d.records {
		out = append(out, strings.Join(r[4:], " "))
	}
	slices.Sort(out)
	return out
}

// needDig skips the test when Debian's dnsutils is not installed
// (scripts/test.sh installs it).
func needDig(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("dig")
	if err != nil {
		t.Fatal("dig not installed: scripts/test.sh installs it (apt-get install dnsutils)")
	}
	return p
}

// dig runs Debian's dig against the agent's DNS address.
func dig(t *testing.T, addr string, args ...string) digAnswer {
	t.Helper()
	d, err := runDig(addr, args...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// runDig is dig for goroutines other than the test's.
func runDig(addr string, args ...string) (digAnswer, error) {
	host, port, _ := net.SplitHostPort(addr)
	argv := append([]string{"@" + host, "-p", port, "+tries=1", "+time=3", "+nocmd", "+noquestion", "+nostats",
		"+noauthority", "+noadditional"}, args...)
	out, err := exec.Command("dig", argv...).CombinedOutput()
	if err != nil {
		return digAnswer{}, errors.New("dig " + strings.Join(argv, " ") + ": " + err.Error() + ": " + string(out))
	}
	var d digAnswer
	for line := range strings.Lines(string(out)) {
		line = strings.TrimSpace(line)
		if _, st, ok := strings.Cut(line, "status: "); ok {
			d.status, _, _ = strings.Cut(st, ",")
		}
		if _, fl, ok := strings.Cut(line, ";; flags: "); ok {
			fl, _, _ = strings.Cut(fl, ";")
			d.flags = strings.Fields(fl)
		}
		if line != "" && !strings.HasPrefix(line, ";") {
			d.records = append(d.records, strings.Fields(line))
		}
	}
	if d.status == "" {
		return d, errors.New("dig " + strings.Join(argv, " ") + ": no status in " + string(out))
	}
	return d, nil
}

func newDNSFixture(t *testing.T, cfg agent.Config) (*fixture, string) {
	t.Helper()
	if cfg.DNS == "" {
		cfg.DNS = "127.0.0.1:0"
	}
	f := newFixture(t, startRedis(t), cfg)
	return f, f.agent.DNSAddr().String()
}

// TestDNSDig: dig resolves A, AAAA and SRV records of the usable
// instances on a real Redis, with the name's filters, and gets NXDOMAIN,
// NODATA, REFUSED and NOTIMP where DNS says so; the agent never offers
// recursion.
func TestDNSDig(t *testing.T) {
	needDig(t)
	f, addr := newDNSFixture(t, agent.Config{})
	f.register(registry.Instance{ID: "a", Service: "api", Address: "10.0.0.1:80", Version: "v1", Zone: "z1", Tags: []string{"canary"},
		Endpoints: []registry.Endpoint{{Name: "http", Address: "10.0.0.1:80"}, {Name: "grpc", Address: "10.0.0.1:9090"}}})
	f.register(registry.Instance{ID: "b", Service: "api", Address: "10.0.0.2:80", Version: "v2", Zone: "z2", Weight: 300,
		Endpoints: []registry.Endpoint{{Name: "http", Address: "10.0.0.2:80"}}})
	f.register(registry.Instance{ID: "c", Service: "api", Address: "[fd00::3]:80", Version: "v2", Zone: "z2",
		Endpoints: []registry.Endpoint{{Name: "http", Address: "[fd00::3]:80"}}})
	d := f.register(registry.Instance{ID: "d", Service: "api", Address: "10.0.0.4:80"})
	if err := d.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.waitInstances("api", 10*time.Second, func(in agent.Instances) bool {
		return len(in.Instances) == 4 && in.Instances[3].Weight == 0
	})
	for _, c := range []struct {
		name, qtype, status string
		want                []string
	}{
		{"api.roster.", "A", "NOERROR", []string{"10.0.0.1", "10.0.0.2"}}, // d drains: left out
		{"API.Roster.", "A", "NOERROR", []string{"10.0.0.1", "10.0.0.2"}}, // names are case-insensitive
		{"api.roster.", "AAAA", "NOERROR", []string{"fd00::3"}},
		{"canary.tag.api.roster.", "A", "NOERROR", []string{"10.0.0.1"}},
		{"v2.version.api.roster.", "A", "NOERROR", []string{"10.0.0.2"}},
		{"z2.zone.v2.version.api.roster.", "AAAA", "NOERROR", []string{"fd00::3"}},
		{"_grpc._tcp.api.roster.", "SRV", "NOERROR", []string{"1 100 9090 0a000001.addr.roster."}},
		{"_http._tcp.api.roster.", "SRV", "NOERROR", []string{
			"1 100 80 0a000001.addr.roster.", "1 100 80 fd000000000000000000000000000003.addr.roster.", "1 300 80 0a000002.addr.roster."}},
		{"api.roster.", "SRV", "NOERROR", []string{
			"1 100 80 0a000001.addr.roster.", "1 100 80 fd000000000000000000000000000003.addr.roster.", "1 300 80 0a000002.addr.roster."}},
		{"0a000002.addr.roster.", "A", "NOERROR", []string{"10.0.0.2"}}, // an SRV target resolves
		{"canary.tag.api.roster.", "AAAA", "NOERROR", nil},              // NODATA: the name has no IPv6 address
		{"api.roster.", "TXT", "NOERROR", nil},                          // NODATA: no such type
		{"nosuch.roster.", "A", "NXDOMAIN", nil},                        // no instance ever
		{"beta.tag.api.roster.", "A", "NXDOMAIN", nil},                  // no instance passes the filter
		{"_x._udp.api.roster.", "SRV", "NXDOMAIN", nil},                 // not a roster name
		{"example.com.", "A", "REFUSED", nil},                           // no recursion
		{"api.roster.", "ANY", "NOTIMP", nil},                           // no amplification
	} {
		got := dig(t, addr, c.name, c.qtype)
		if got.status != c.status || !slices.Equal(got.data(), c.want) {
			t.Errorf("dig %s %s: %s %v, want %s %v", c.name, c.qtype, got.status, got.data(), c.status, c.want)
		}
		if got.has("ra") || got.status != "REFUSED" && !got.has("aa") {
			t.Errorf("dig %s %s: flags %v, want aa and no ra", c.name, c.qtype, got.flags)
		}
		for _, r := range got.records {
			if r[1] != "5" {
				t.Errorf("dig %s %s: TTL %s, want 5 (the default)", c.name, c.qtype, r[1])
			}
		}
	}
}

// TestDNSTruncation: an answer larger than 512 bytes is truncated over
// UDP without EDNS0 (TC set), dig's retry over TCP gets it whole, an
// EDNS0 buffer of 4096 is capped at 1232 bytes, and no answer holds
// more than 32 records.
func TestDNSTruncation(t *testing.T) {
	needDig(t)
	f, addr := newDNSFixture(t, agent.Config{})
	for i := range 40 {
		f.register(registry.Instance{Service: "big", Address: "[fd00::" + strconv.Itoa(i+1) + "]:80"})
	}
	f.waitInstances("big", 10*time.Second, has(40))
	udp := dig(t, addr, "+noedns", "+ignore", "big.roster.", "AAAA")
	if !udp.has("tc") || len(udp.records) == 0 || len(udp.records) >= 32 {
		t.Errorf("UDP, no EDNS0: flags %v, %d records; want tc and a part", udp.flags, len(udp.records))
	}
	retry := dig(t, addr, "+noedns", "big.roster.", "AAAA") // dig retries over TCP on TC
	if retry.has("tc") || len(retry.records) != 32 {
		t.Errorf("TCP retry: flags %v, %d records; want 32, no tc", retry.flags, len(retry.records))
	}
	edns := dig(t, addr, "+bufsize=4096", "+ignore", "big.roster.", "AAAA")
	if edns.has("tc") || len(edns.records) != 32 {
		t.Errorf("UDP, EDNS0 4096: flags %v, %d records; want 32, no tc", edns.flags, len(edns.records))
	}
	// The same over a raw UDP exchange: the packet's size is the bound.
	m := new(dns.Msg).SetQuestion("big.roster.", dns.TypeSRV)
	m.SetEdns0(4096, false)
	q, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(q); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65535)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	r := new(dns.Msg)
	if err := r.Unpack(buf[:n]); err != nil {
		t.Fatal(err)
	}
	if n > 1232 || !r.Truncated {
		t.Errorf("UDP SRV answer of %d bytes (tc %v, %d answers), want at most 1232 and tc: 32 SRV records and their addresses do not fit",
			n, r.Truncated, len(r.Answer))
	}
}

// TestDNSPython: Python's dnspython (Debian's python3-dnspython), a
// resolver nobody here wrote, resolves the SRV record of a named
// endpoint and its target.
func TestDNSPython(t *testing.T) {
	python := ""
	for _, p := range []string{"python3", "/usr/bin/python3"} { // Debian's, when another python3 comes first on PATH
		if exec.Command(p, "-c", "import dns.resolver").Run() == nil {
			python = p
			break
		}
	}
	if python == "" {
		t.Fatal("python3 with dnspython not installed: scripts/test.sh installs it (apt-get install python3-dnspython)")
	}
	f, addr := newDNSFixture(t, agent.Config{})
	f.register(registry.Instance{ID: "a", Service: "pay", Address: "10.0.0.7:80",
		Endpoints: []registry.Endpoint{{Name: "http", Address: "10.0.0.7:80"}, {Name: "grpc", Address: "10.0.0.7:9000"}}})
	f.waitInstances("pay", 10*time.Second, has(1))
	host, port, _ := net.SplitHostPort(addr)
	script := `
import sys, dns.resolver
r = dns.resolver.Resolver(configure=False)
r.nameservers = [sys.argv[1]]
r.port = int(sys.argv[2])
for srv in r.resolve("_grpc._tcp.pay.roster.", "SRV"):
    for a in r.resolve(srv.target, "A"):
        print(f"{a.address}:{srv.port}")
`
	out, err := exec.Command(python, "-c", script, host, port).CombinedOutput()
	if err != nil {
		t.Fatalf("python3: %v: %s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "10.0.0.7:9000" {
		t.Errorf("dnspython resolved %q, want 10.0.0.7:9000", got)
	}
}

// TestDNSRollingRestart: dig resolves the service every 50 ms while
// each of its three instances is replaced by a new one. Every answer
// names at least one instance, and no answer asked for after the
// agent's list dropped an instance names it.
func TestDNSRollingRestart(t *testing.T) {
	needDig(t)
	f, addr := newDNSFixture(t, agent.Config{})
	ctx := context.Background()
	leases := map[string]*registry.Lease{}
	for i := 1; i <= 3; i++ {
		ip := "10.0.1." + strconv.Itoa(i)
		leases[ip] = f.register(registry.Instance{Service: "roll", Address: ip + ":80"})
	}
	f.waitInstances("roll", 10*time.Second, has(3))

	type sample struct {
		at  time.Time // when the query was sent
		ips []string
		err error
	}
	var (
		mu      sync.Mutex
		samples []sample
		gone    = map[string]time.Time{} // stopped instance → when the agent's list dropped it
		dereg   = map[string]time.Time{} // stopped instance → when it was deregistered
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			at := time.Now()
			d, err := runDig(addr, "roll.roster.", "A")
			if err == nil && d.status != "NOERROR" {
				err = errors.New("status " + d.status)
			}
			mu.Lock()
			samples = append(samples, sample{at: at, ips: d.data(), err: err})
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	for i := 1; i <= 3; i++ {
		old, nu := "10.0.1."+strconv.Itoa(i), "10.0.2."+strconv.Itoa(i)
		f.register(registry.Instance{Service: "roll", Address: nu + ":80"})
		f.waitInstances("roll", 10*time.Second, has(4))
		mu.Lock()
		dereg[old] = time.Now()
		seen := len(samples)
		mu.Unlock()
		if err := leases[old].Deregister(ctx); err != nil {
			t.Fatal(err)
		}
		f.waitInstances("roll", 10*time.Second, has(3))
		mu.Lock()
		gone[old] = time.Now()
		mu.Unlock()
		// Let the resolver loop see this step: five queries since.
		for deadline := time.Now().Add(10 * time.Second); ; {
			mu.Lock()
			n := len(samples)
			mu.Unlock()
			if n >= seen+5 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the resolver loop is stuck at %d queries", n)
			}
			time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
		}
	}
	close(stop)
	<-done

	stale := 0
	for _, s := range samples {
		if s.err != nil || len(s.ips) == 0 {
			t.Errorf("query at %v: %v, %v", s.at.Format(time.StampMilli), s.ips, s.err)
			continue
		}
		for _, ip := range s.ips {
			if g, ok := gone[ip]; ok && s.at.After(g) {
				t.Errorf("query at %v named %s, dropped from the agent's list at %v", s.at.Format(time.StampMilli), ip, g.Format(time.StampMilli))
			}
			if d, ok := dereg[ip]; ok && s.at.After(d) {
				stale++ // asked for between the deregistration and its propagation
			}
		}
	}
	if len(samples) < 10 {
		t.Errorf("only %d queries during the restart", len(samples))
	}
	last := samples[len(samples)-1].ips
	if !slices.Equal(last, []string{"10.0.2.1", "10.0.2.2", "10.0.2.3"}) {
		t.Errorf("last answer %v, want the three new instances", last)
	}
	t.Logf("%d queries during the rolling restart, %d answers named an instance being deregistered, before the agent's list dropped it", len(samples), stale)
}

// TestDNSConfig: a listener address that is not loopback is refused
// unless DNSAllowRemote is set, and so are a bad domain and TTL; the
// error names the field.
func TestDNSConfig(t *testing.T) {
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	defer reg.Close()
	for _, c := range []struct {
		cfg   agent.Config
		field string
	}{
		{agent.Config{DNS: "0.0.0.0:0"}, "Config.DNSAllowRemote"},
		{agent.Config{DNS: ":0"}, "Config.DNSAllowRemote"},
		{agent.Config{DNS: "10.1.2.3:53"}, "Config.DNSAllowRemote"},
		{agent.Config{DNS: "127.0.0.1"}, "Config.DNS"},
		{agent.Config{DNS: "127.0.0.1:0", DNSDomain: "bad..name"}, "Config.DNSDomain"},
		{agent.Config{DNS: "127.0.0.1:0", DNSDomain: "."}, "Config.DNSDomain"},
		{agent.Config{DNS: "127.0.0.1:0", DNSTTL: -time.Second}, "Config.DNSTTL"},
		{agent.Config{DNS: "127.0.0.1:0", DNSTTL: 2 * time.Hour}, "Config.DNSTTL"},
	} {
		c.cfg.Registry = reg
		a, err := agent.New(c.cfg)
		if err == nil {
			a.Close()
			t.Errorf("%+v: no error", c.cfg)
			continue
		}
		if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%+v: %v, want ErrInvalid naming %s", c.cfg, err, c.field)
		}
	}
	a, err := agent.New(agent.Config{Registry: reg, DNS: "127.0.0.1:0", DNSDomain: "Svc.Example"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.DNSAddr() == nil {
		t.Fatal("no DNS address")
	}
}

// TestDNSRateLimit: one source past its rate gets REFUSED over TCP and
// silence over UDP.
func TestDNSRateLimit(t *testing.T) {
	f, addr := newDNSFixture(t, agent.Config{DNSRate: 5})
	f.register(registry.Instance{Service: "api", Address: "10.0.0.1:80"})
	f.waitInstances("api", 10*time.Second, has(1))
	c := &dns.Client{Net: "tcp", Timeout: 2 * time.Second}
	conn, err := c.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	ok, refused := 0, 0
	for range 30 {
		r, _, err := c.ExchangeWithConn(new(dns.Msg).SetQuestion("api.roster.", dns.TypeA), conn)
		if err != nil {
			t.Fatal(err)
		}
		switch r.Rcode {
		case dns.RcodeSuccess:
			ok++
		case dns.RcodeRefused:
			refused++
		default:
			t.Fatalf("rcode %s", dns.RcodeToString[r.Rcode])
		}
	}
	if allowed := 5 + int(time.Since(start).Seconds()*5) + 1; ok > allowed || refused == 0 {
		t.Errorf("%d answered, %d refused in %v; want at most %d answered", ok, refused, time.Since(start), allowed)
	}
	u := &dns.Client{Net: "udp", Timeout: 100 * time.Millisecond}
	if r, _, err := u.Exchange(new(dns.Msg).SetQuestion("api.roster.", dns.TypeA), addr); err == nil {
		t.Errorf("UDP past the rate: rcode %s, want silence", dns.RcodeToString[r.Rcode])
	}
}

// An agent with Config.DNS answers DNS queries for its services.
func ExampleAgent_DNSAddr() {
	ctx := context.Background()
	reg := registry.New(memory.NewDriver(memory.NewServer()))
	defer reg.Close()
	if _, err := reg.Register(ctx, registry.Instance{Service: "api", Address: "10.0.0.5:8080"}); err != nil {
		panic(err)
	}
	a, err := agent.New(agent.Config{Registry: reg, DNS: "127.0.0.1:0"})
	if err != nil {
		panic(err)
	}
	defer a.Close()
	c := &dns.Client{Net: "udp"}
	r, _, err := c.Exchange(new(dns.Msg).SetQuestion("_http._tcp.api.roster.", dns.TypeSRV), a.DNSAddr().String())
	if err != nil {
		panic(err)
	}
	srv := r.Answer[0].(*dns.SRV)
	fmt.Println(srv.Port, srv.Target)
	// Output: 8080 0a000005.addr.roster.
}
