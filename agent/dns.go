package agent

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/roster-go/roster/internal/backend"
	"github.com/roster-go/roster/registry"
)

// DNS defaults and bounds. The TTL is short because the answer is the
// agent's usable list: an instance that leaves, drains or is ejected
// should stop being dialled within seconds, not minutes, and the agent
// answers from memory, so frequent re-resolution is cheap.
const (
	DefaultDNSDomain = "roster."
	DefaultDNSTTL    = 5 * time.Second
	// DefaultDNSRate is the queries per second one source address may
	// send (a token bucket of as many queries); beyond it UDP queries go
	// unanswered and TCP ones are REFUSED.
	DefaultDNSRate = 2000
	maxDNSTTL      = time.Hour
	// dnsMaxAnswers bounds the records of one answer, whatever the
	// transport: a client needs a handful, and a bounded answer keeps
	// the agent from being an amplifier.
	dnsMaxAnswers = 32
	// dnsMaxUDP is the largest UDP answer, whatever EDNS0 advertises
	// (the DNS flag day 2020 figure, below common MTUs).
	dnsMaxUDP = 1232
	// dnsFirstWait bounds the wait for a service's first list from the
	// registry; past it the query fails with SERVFAIL.
	dnsFirstWait = 2 * time.Second
	// dnsMaxSources bounds the rate limiter's table of sources.
	dnsMaxSources = 1 << 14
)

// dnsName is a parsed query name below the domain: see docs/agent.md
// section "DNS" for the scheme.
type dnsName struct {
	service  string
	endpoint string // from _<endpoint>._tcp, "" for the primary address
	filter   routeFilter
	addr     netip.Addr // a <hex>.addr name: the SRV target of an IP
	apex     bool
}

// errDNSName is returned by parseDNSName for a name that names nothing.
var errDNSName = errors.New("agent: not a roster DNS name")

// parseDNSName parses rel, a lower-case name below the domain without
// the domain and without a trailing dot. From the left: an optional
// _<endpoint>._tcp, then any <value>.tag, <value>.version and
// <value>.zone filters, then the service (which may hold dots).
func parseDNSName(rel string) (dnsName, error) {
	if rel == "" {
		return dnsName{apex: true}, nil
	}
	labels := strings.Split(rel, ".")
	if len(labels) == 2 && labels[1] == "addr" {
		if a, ok := parseHexAddr(labels[0]); ok {
			return dnsName{addr: a}, nil
		}
	}
	var n dnsName
	i := 0
	if strings.HasPrefix(labels[0], "_") {
		if len(labels) < 3 || labels[1] != "_tcp" {
			return dnsName{}, errDNSName
		}
		n.endpoint = labels[0][1:]
		if err := backend.ValidateEndpointName("endpoint", n.endpoint); err != nil {
			return dnsName{}, errDNSName
		}
		i = 2
	}
	for ; i+1 < len(labels); i += 2 {
		v, key := labels[i], labels[i+1]
		if key != "tag" && key != "version" && key != "zone" {
			break
		}
		if v == "" {
			return dnsName{}, errDNSName
		}
		switch key {
		case "tag":
			if !slices.Contains(n.filter.tags, v) {
				n.filter.tags = append(n.filter.tags, v)
			}
		case "version":
			if n.filter.version != "" && n.filter.version != v {
				return dnsName{}, errDNSName
			}
			n.filter.version = v
		case "zone":
			if n.filter.zone != "" && n.filter.zone != v {
				return dnsName{}, errDNSName
			}
			n.filter.zone = v
		}
	}
	if i >= len(labels) {
		return dnsName{}, errDNSName
	}
	n.service = strings.Join(labels[i:], ".")
	if err := backend.ValidateService(n.service); err != nil {
		return dnsName{}, errDNSName
	}
	n.filter.endpoint = n.endpoint
	return n, nil
}

// parseHexAddr parses the 8 (IPv4) or 32 (IPv6) hex digits of an
// address name.
func parseHexAddr(s string) (netip.Addr, bool) {
	if len(s) != 8 && len(s) != 32 {
		return netip.Addr{}, false
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return netip.Addr{}, false
	}
	a, ok := netip.AddrFromSlice(b)
	return a, ok
}

// dnsServer serves the agent's usable instances over DNS, UDP and TCP
// on the same port.
type dnsServer struct {
	a       *Agent
	domain  string // lower case, fully qualified
	ttl     uint32
	udp     *dns.Server
	tcp     *dns.Server
	limiter *dnsLimiter
	wg      sync.WaitGroup
}

// checkDNS checks the DNS fields of the Config.
func (c Config) checkDNS() error {
	if c.DNS == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(c.DNS)
	if err != nil {
		return fmt.Errorf("%w: agent: Config.DNS %q is not host:port: %v", registry.ErrInvalid, c.DNS, err)
	}
	if !c.DNSAllowRemote {
		ip, err := netip.ParseAddr(host)
		if host != "localhost" && (err != nil || !ip.IsLoopback()) {
			return fmt.Errorf("%w: agent: Config.DNS %q is not a loopback address (set Config.DNSAllowRemote to serve others)", registry.ErrInvalid, c.DNS)
		}
	}
	if c.DNSDomain != "" {
		if _, ok := dns.IsDomainName(c.DNSDomain); !ok || dns.Fqdn(c.DNSDomain) == "." {
			return fmt.Errorf("%w: agent: Config.DNSDomain %q is not a domain name", registry.ErrInvalid, c.DNSDomain)
		}
	}
	if c.DNSTTL < 0 || c.DNSTTL > maxDNSTTL {
		return fmt.Errorf("%w: agent: Config.DNSTTL %v is not between 0 and %v", registry.ErrInvalid, c.DNSTTL, maxDNSTTL)
	}
	return nil
}

// startDNS binds Config.DNS (UDP, then TCP on the UDP port) and serves it.
func startDNS(a *Agent) (*dnsServer, error) {
	cfg := a.cfg
	domain := strings.ToLower(dns.Fqdn(orDefault(cfg.DNSDomain, DefaultDNSDomain)))
	ttl := cfg.DNSTTL
	if ttl == 0 {
		ttl = DefaultDNSTTL
	}
	rate := cfg.DNSRate
	if rate == 0 {
		rate = DefaultDNSRate
	}
	s := &dnsServer{a: a, domain: domain, ttl: uint32(ttl / time.Second), limiter: newDNSLimiter(rate)}
	pc, ln, err := listenDNS(cfg.DNS)
	if err != nil {
		return nil, err
	}
	s.udp = &dns.Server{PacketConn: pc, Handler: s, UDPSize: dnsMaxUDP}
	s.tcp = &dns.Server{Listener: ln, Handler: s, ReadTimeout: cfg.ReadTimeout, WriteTimeout: cfg.WriteTimeout,
		MaxTCPQueries: 1024}
	for _, srv := range []*dns.Server{s.udp, s.tcp} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		s.wg.Add(1)
		go func() { defer s.wg.Done(); _ = srv.ActivateAndServe() }()
		<-started // Shutdown before the start would leave the server running
	}
	return s, nil
}

// listenDNS binds addr over UDP, then TCP on the same port. Port 0
// takes a free UDP port, which TCP may hold: a few tries find a pair.
func listenDNS(addr string) (net.PacketConn, net.Listener, error) {
	_, port, _ := net.SplitHostPort(addr)
	for try := 0; ; try++ {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("agent: Config.DNS: %w", err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		if port != "0" || try == 8 {
			return nil, nil, fmt.Errorf("agent: Config.DNS (tcp): %w", err)
		}
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (s *dnsServer) stop() {
	_ = s.udp.Shutdown()
	_ = s.tcp.Shutdown()
	s.wg.Wait()
}

// DNSAddr returns the address the DNS listener is bound to (UDP and TCP
// share it), or nil when Config.DNS is empty.
func (a *Agent) DNSAddr() net.Addr {
	if a.dns == nil {
		return nil
	}
	return a.dns.udp.PacketConn.LocalAddr()
}

// ServeDNS answers one query. It never recurses, answers one question
// of class IN, and bounds the answer by the transport.
func (s *dnsServer) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	udp := w.LocalAddr().Network() == "udp"
	if r.Response {
		return // never answer an answer: no reflection loops
	}
	if !s.limiter.allow(w.RemoteAddr(), time.Now()) {
		if udp {
			return // silence: a spoofed flood gets nothing back
		}
		s.write(w, r, udp, dns.RcodeRefused)
		return
	}
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	m.RecursionAvailable = false
	size := dns.MinMsgSize
	if opt := r.IsEdns0(); opt != nil {
		size = min(max(int(opt.UDPSize()), dns.MinMsgSize), dnsMaxUDP)
		if opt.Version() != 0 {
			m.SetEdns0(uint16(size), false)
			m.Rcode = dns.RcodeBadVers
			_ = w.WriteMsg(m)
			return
		}
	}
	switch {
	case r.Opcode != dns.OpcodeQuery:
		m.Rcode = dns.RcodeNotImplemented
	case len(r.Question) != 1:
		m.Rcode = dns.RcodeFormatError
	default:
		s.answer(m, r.Question[0])
	}
	if r.IsEdns0() != nil {
		m.SetEdns0(uint16(size), false)
	}
	if udp {
		m.Truncate(size)
	} else {
		m.Compress = true
	}
	_ = w.WriteMsg(m)
}

// write answers r with rcode alone.
func (s *dnsServer) write(w dns.ResponseWriter, r *dns.Msg, udp bool, rcode int) {
	m := new(dns.Msg)
	m.SetRcode(r, rcode)
	m.Question = nil
	_ = w.WriteMsg(m)
}

// answer fills m for question q.
func (s *dnsServer) answer(m *dns.Msg, q dns.Question) {
	name := strings.ToLower(q.Name)
	if q.Qclass != dns.ClassINET && q.Qclass != dns.ClassANY || !dns.IsSubDomain(s.domain, name) {
		m.Rcode = dns.RcodeRefused // not ours, and no recursion
		return
	}
	if q.Qtype == dns.TypeANY || q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR {
		m.Rcode = dns.RcodeNotImplemented // no amplification
		return
	}
	rel := strings.TrimSuffix(strings.TrimSuffix(name, s.domain), ".")
	n, err := parseDNSName(rel)
	if err != nil {
		s.negative(m, dns.RcodeNameError)
		return
	}
	switch {
	case n.apex:
		if q.Qtype == dns.TypeSOA {
			m.Answer = append(m.Answer, s.soa())
			return
		}
		s.negative(m, dns.RcodeSuccess)
		return
	case n.addr.IsValid():
		if rr := s.addrRR(q.Name, n.addr, q.Qtype); rr != nil {
			m.Answer = append(m.Answer, rr)
			return
		}
		s.negative(m, dns.RcodeSuccess)
		return
	}
	targets, rcode := s.usable(n)
	if rcode != dns.RcodeSuccess || len(targets) == 0 {
		s.negative(m, cmpRcode(rcode))
		return
	}
	shuffle(targets)
	for _, t := range targets {
		if len(m.Answer) >= dnsMaxAnswers {
			break
		}
		switch q.Qtype {
		case dns.TypeA, dns.TypeAAAA:
			if rr := s.addrRR(q.Name, t.ip, q.Qtype); rr != nil {
				m.Answer = append(m.Answer, rr)
			}
		case dns.TypeSRV:
			target := t.host
			if t.ip.IsValid() {
				target = s.addrName(t.ip)
				m.Extra = append(m.Extra, s.addrRR(target, t.ip, addrType(t.ip)))
			} else {
				target = dns.Fqdn(target)
			}
			m.Answer = append(m.Answer, &dns.SRV{Hdr: s.hdr(q.Name, dns.TypeSRV), Priority: 1,
				Weight: uint16(min(t.weight, math.MaxUint16)), Port: t.port, Target: target})
		}
	}
	if len(m.Answer) == 0 {
		s.negative(m, dns.RcodeSuccess) // NODATA: the name exists, not this type
	}
}

// cmpRcode maps an empty usable list (rcode success) to NXDOMAIN.
func cmpRcode(rcode int) int {
	if rcode == dns.RcodeSuccess {
		return dns.RcodeNameError
	}
	return rcode
}

// dnsTarget is one usable instance's address for an answer.
type dnsTarget struct {
	ip     netip.Addr // invalid when the host is a name
	host   string
	port   uint16
	weight uint32
	key    float64 // the weighted shuffle's sort key
}

// usable returns the addresses of the instances the HTTP pick API would
// pick from (weight above 0, not quarantined, passing the name's
// filters), and an rcode other than success when the agent has no list.
func (s *dnsServer) usable(n dnsName) ([]dnsTarget, int) {
	a := s.a
	v, err := a.view(n.service)
	if err != nil {
		return nil, dns.RcodeServerFailure // closed, or Config.MaxServices reached
	}
	ctx, cancel := context.WithTimeout(a.ctx, dnsFirstWait)
	cur, err := v.wait(ctx, 0)
	cancel()
	if err != nil {
		return nil, dns.RcodeServerFailure // no list from the registry yet
	}
	if cur.Stale && a.cfg.MaxStaleness > 0 {
		if since := v.staleSince(); !since.IsZero() && time.Since(since) > a.cfg.MaxStaleness {
			return nil, dns.RcodeServerFailure
		}
	}
	var ejected map[string]bool
	if a.anyQuarantine() {
		ejected = a.quarantined(n.service)
	}
	out := make([]dnsTarget, 0, len(cur.Instances))
	for i := range cur.Instances {
		in := &cur.Instances[i]
		if in.Weight == 0 || ejected[in.ID] || n.filter.excluded(in) {
			continue
		}
		e, _ := in.Endpoint(n.endpoint)
		host, port, err := net.SplitHostPort(e.Address)
		if err != nil {
			continue
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			continue
		}
		t := dnsTarget{host: host, port: uint16(p), weight: in.Weight}
		if ip, err := netip.ParseAddr(host); err == nil {
			t.ip = ip.Unmap()
		}
		out = append(out, t)
	}
	return out, dns.RcodeSuccess
}

// anyQuarantine reports whether some pick strategy is in use, so that a
// quarantine may hold instances out.
func (a *Agent) anyQuarantine() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.quarantines) > 0
}

// shuffle orders ts by weighted random sampling without replacement
// (Efraimidis and Spirakis): a client taking the first answer spreads
// its calls by weight.
func shuffle(ts []dnsTarget) {
	for i := range ts {
		ts[i].key = -math.Log(1-rand.Float64()) / float64(ts[i].weight)
	}
	slices.SortFunc(ts, func(x, y dnsTarget) int {
		switch {
		case x.key < y.key:
			return -1
		case x.key > y.key:
			return 1
		}
		return 0
	})
}

func (s *dnsServer) hdr(name string, t uint16) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: s.ttl}
}

func addrType(ip netip.Addr) uint16 {
	if ip.Is4() {
		return dns.TypeA
	}
	return dns.TypeAAAA
}

// addrRR returns the A or AAAA record of ip, or nil if qtype is the
// other family (or neither).
func (s *dnsServer) addrRR(name string, ip netip.Addr, qtype uint16) dns.RR {
	switch {
	case !ip.IsValid():
		return nil
	case qtype == dns.TypeA && ip.Is4():
		return &dns.A{Hdr: s.hdr(name, dns.TypeA), A: ip.AsSlice()}
	case qtype == dns.TypeAAAA && ip.Is6():
		return &dns.AAAA{Hdr: s.hdr(name, dns.TypeAAAA), AAAA: ip.AsSlice()}
	}
	return nil
}

// addrName is the SRV target of an IP: <hex>.addr.<domain>, as
// Consul's, so that the target resolves here too.
func (s *dnsServer) addrName(ip netip.Addr) string {
	b := ip.AsSlice()
	return hex.EncodeToString(b) + ".addr." + s.domain
}

func (s *dnsServer) soa() dns.RR {
	return &dns.SOA{Hdr: s.hdr(s.domain, dns.TypeSOA), Ns: "ns." + s.domain, Mbox: "hostmaster." + s.domain,
		Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: s.ttl}
}

// negative sets rcode with the SOA in the authority section, whose
// minimum TTL bounds how long resolvers cache the negative answer.
func (s *dnsServer) negative(m *dns.Msg, rcode int) {
	m.Rcode = rcode
	if rcode == dns.RcodeSuccess || rcode == dns.RcodeNameError {
		m.Ns = append(m.Ns, s.soa())
	}
}

// dnsLimiter is a token bucket per source address: rate queries per
// second, bursts of as many. Its table is bounded: when full, sources
// whose bucket refilled are forgotten, and if none did the table starts
// over (a flood of sources resets it rather than growing it).
type dnsLimiter struct {
	rate float64 // <= 0: no limit
	mu   sync.Mutex
	src  map[netip.Addr]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newDNSLimiter(rate int) *dnsLimiter {
	return &dnsLimiter{rate: float64(rate), src: map[netip.Addr]*bucket{}}
}

func (l *dnsLimiter) allow(remote net.Addr, now time.Time) bool {
	if l.rate <= 0 {
		return true
	}
	var ip netip.Addr
	switch a := remote.(type) {
	case *net.UDPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	}
	ip = ip.Unmap()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.src[ip]
	if !ok {
		if len(l.src) >= dnsMaxSources {
			l.forget(now)
		}
		b = &bucket{tokens: l.rate, at: now}
		l.src[ip] = b
	}
	b.tokens = min(l.rate, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

func (l *dnsLimiter) forget(now time.Time) {
	for ip, b := range l.src {
		if b.tokens+now.Sub(b.at).Seconds()*l.rate >= l.rate {
			delete(l.src, ip)
		}
	}
	if len(l.src) >= dnsMaxSources {
		clear(l.src)
	}
}
