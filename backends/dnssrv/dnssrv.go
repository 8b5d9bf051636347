// Package dnssrv is Roster's read-only backend on DNS SRV records, with
// github.com/miekg/dns. It discovers services from Consul's DNS interface,
// Kubernetes headless services, or any zone with SRV records. Import it for
// its side effect and open a registry by URL with registry.Open:
//
//	import _ "github.com/roster-go/roster/backends/dnssrv"
//
//	reg, err := registry.Open(ctx, "dns+srv://127.0.0.1:8600/{service}.service.consul")
//
// The host is the DNS server to ask, port 53 by default. Without one, the
// first nameserver of /etc/resolv.conf answers. The path is the SRV name,
// with {service} standing for the service's name:
//
//	dns+srv://127.0.0.1:8600/_{service}._tcp.service.consul           Consul, RFC 2782 form
//	dns+srv://10.96.0.10/_http._tcp.{service}.prod.svc.cluster.local  Kubernetes, port "http"
//
// A path without {service} is a domain appended to the service's name.
// [New] builds a driver from [Options] instead, and [ParseURL] reads them
// from a URL.
//
// Each SRV record of the lowest priority is one instance. Its address is
// the target's A or AAAA record with the record's port. [InstanceID] makes
// its ID from that address, so 10.0.0.7:8080 is 10.0.0.7-8080. Its weight
// is the SRV weight, so weight 0 drains. A higher priority is served only
// while no target of the lower one resolves, as RFC 2782 asks.
//
// Named endpoints are SRV records of their own, asked for by name with
// endpoints=http,grpc. Each is RFC 2782's _grpc._tcp before the
// service's name (_grpc._tcp.api.example. beside api.example.), or in
// place of the name's own _http._tcp; endpoint_name sets another form,
// such as {service}-{endpoint}.service.consul for Consul, whose DNS has
// no record for a second port of one service. A record becomes the
// endpoint of the instance at its address, or of the one instance on its
// host. List the primary's own name too: an instance whose primary is
// named serves no name it lacks. DNS carries no protocol.
//
// Questions go over TCP, since Consul trims long UDP answers without
// setting the truncation bit. Set udp=true for servers that set it. A watch
// asks again after the records' smallest TTL, bounded by min_poll and
// max_poll.
//
// Register returns [ErrReadOnly], which wraps registry.ErrInvalid. Register
// instances with the server that owns the records instead. Services wraps
// registry.ErrInvalid too, as DNS cannot list a zone. A failing server
// fails the watch with registry.ErrUnavailable, and the registry serves the
// last snapshot, marked stale.
//
// docs/backends/dns.md has every option, the deadline rules, the guarantees
// and the measurements.
package dnssrv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/miekg/dns"

	"github.com/roster-go/roster/registry/driver"
)

// Scheme is the URL scheme of this backend.
const Scheme = "dns+srv"

// Defaults of Options.
const (
	defaultMinPoll = time.Second
	defaultMaxPoll = 30 * time.Second
	defaultTimeout = 2 * time.Second
)

func init() {
	driver.Register(Scheme, openURL, publicOptions...)
}

// Options configure a driver made with New.
type Options struct {
	Resolver string // host:port of the DNS server
	// Name is the SRV name of a service, with {service} standing for the
	// service's name.
	Name string
	// MinPoll and MaxPoll bound the wait between queries (default 1s and
	// 30s).
	MinPoll, MaxPoll time.Duration
	Timeout          time.Duration // bound on one query (default 2s)
	UDP              bool          // query over UDP instead of TCP
	// Endpoints names the named endpoints to ask for, such as "http" and
	// "grpc"; none by default. Each costs one more SRV question a poll.
	Endpoints []string
	// EndpointName is the SRV name of a named endpoint, with {service}
	// and {endpoint}. The default is RFC 2782's "_{endpoint}._tcp."
	// before Name, or in place of Name's own "_x._tcp." label pair.
	EndpointName string
}

// srvDriver is a read-only driver.Driver on DNS SRV records.
type srvDriver struct {
	opts Options
	udp  *dns.Client
	tcp  *dns.Client
	rev  atomic.Uint64 // orders the snapshots of every query
	warn struct {      // the last left-out warning (leftOut)
		sync.Mutex
		at      time.Time
		skipped int
	}
}

// errReadOnly is the error of Register: the driver knows it is invalid.
var errReadOnly = fmt.Errorf("%w: dns+srv is read-only: register through the server that owns the SRV records (Consul agent, Kubernetes Service)", driver.ErrInvalid)

// New returns a read-only driver. Nothing is asked until the first List
// or Watch. Wrap it with registry.New.
func New(opts Options) (driver.Driver, error) {
	if _, _, err := net.SplitHostPort(opts.Resolver); err != nil {
		return nil, backend.Invalid("resolver", "%q: want host:port", opts.Resolver)
	}
	if !strings.Contains(opts.Name, "{service}") {
		return nil, backend.Invalid("name", "%q has no {service}", opts.Name)
	}
	if opts.MinPoll <= 0 {
		opts.MinPoll = defaultMinPoll
	}
	if opts.MaxPoll <= 0 {
		opts.MaxPoll = max(defaultMaxPoll, opts.MinPoll)
	}
	if opts.MaxPoll < opts.MinPoll {
		return nil, backend.Invalid("max_poll", "%v is below min_poll %v", opts.MaxPoll, opts.MinPoll)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = defaultTimeout
	}
	if err := endpointOptions(&opts); err != nil {
		return nil, err
	}
	return &srvDriver{opts: opts,
		udp: &dns.Client{Net: "udp", Timeout: opts.Timeout, UDPSize: dns.DefaultMsgSize},
		tcp: &dns.Client{Net: "tcp", Timeout: opts.Timeout}}, nil
}

// nameOf returns the SRV name asked for service.
func (d *srvDriver) nameOf(service string) string {
	return dns.Fqdn(strings.ReplaceAll(d.opts.Name, "{service}", service))
}

// endpointOptions checks the endpoint names and sets the default
// EndpointName.
func endpointOptions(o *Options) error {
	for i, n := range o.Endpoints {
		if err := backend.ValidateEndpointName("endpoints", n); err != nil {
			return err
		}
		if slices.Contains(o.Endpoints[:i], n) {
			return backend.Invalid("endpoints", "%q appears twice", n)
		}
	}
	if o.EndpointName == "" {
		o.EndpointName = "_{endpoint}._tcp." + o.Name
		if l := strings.Split(o.Name, "."); len(l) > 2 && strings.HasPrefix(l[0], "_") &&
			!strings.Contains(l[0], "{service}") && (l[1] == "_tcp" || l[1] == "_udp") {
			o.EndpointName = "_{endpoint}." + strings.Join(l[1:], ".")
		}
	}
	if !strings.Contains(o.EndpointName, "{endpoint}") {
		return backend.Invalid("endpoint_name", "%q has no {endpoint}", o.EndpointName)
	}
	return nil
}

// endpointNameOf returns the SRV name asked for an endpoint of service.
func (d *srvDriver) endpointNameOf(service, endpoint string) string {
	return dns.Fqdn(strings.NewReplacer("{service}", service, "{endpoint}", endpoint).Replace(d.opts.EndpointName))
}

// Register implements driver.Driver: always errReadOnly.
func (d *srvDriver) Register(context.Context, driver.Instance, time.Duration) (driver.Registration, error) {
	return nil, errReadOnly
}

// Services implements driver.Driver: DNS cannot list a zone's services.
func (d *srvDriver) Services(context.Context) ([]string, error) {
	return nil, fmt.Errorf("%w: dns+srv cannot list services: DNS has no such query", driver.ErrInvalid)
}

// Limits implements driver.Driver. Nothing registers here; the values
// only keep the registry's TTL checks meaningful.
func (d *srvDriver) Limits() driver.Limits {
	return driver.Limits{MinTTL: time.Second, TTLGranularity: time.Second}
}

// Local reports whether the resolver is on this host: then loopback
// addresses are served (see registry.AllowLoopback). A loopback stub
// resolver that forwards to others (systemd-resolved) counts as local
// too: name the zone's own server in the URL.
func (d *srvDriver) Local() bool { return backend.LocalHosts(d.opts.Resolver) }

// Close implements driver.Driver: there is no connection to release.
func (d *srvDriver) Close() error { return nil }

// List implements driver.Driver with one SRV query (and address queries
// for targets the answer did not resolve).
func (d *srvDriver) List(ctx context.Context, service string) (driver.Snapshot, error) {
	snap, _, err := d.lookup(ctx, service)
	return snap, err
}

// lookup asks for the service's records and returns the snapshot of its
// lowest priority that resolves, with the named endpoints asked for, and
// the smallest TTL of the records used.
func (d *srvDriver) lookup(ctx context.Context, service string) (driver.Snapshot, time.Duration, error) {
	ins, ttl, err := d.records(ctx, service, d.nameOf(service))
	if err != nil {
		return driver.Snapshot{}, 0, err
	}
	if len(ins) > 0 && len(d.opts.Endpoints) > 0 {
		ettl, err := d.endpoints(ctx, service, ins)
		if err != nil {
			return driver.Snapshot{}, 0, err
		}
		if ettl >= 0 {
			ttl = min(ttl, ettl)
		}
	}
	if ins == nil {
		ins = []driver.Instance{}
	}
	return driver.Snapshot{Service: service, Instances: ins, Revision: d.rev.Add(1), At: time.Now()}, ttl, nil
}

// records returns the instances of name's lowest priority that resolves
// and the smallest TTL of the records used.
func (d *srvDriver) records(ctx context.Context, service, name string) ([]driver.Instance, time.Duration, error) {
	resp, err := d.exchange(ctx, name, dns.TypeSRV)
	if err != nil {
		return nil, 0, err
	}
	ttl := time.Duration(-1)
	var groups [][]*dns.SRV
	for _, rr := range resp.Answer {
		if srv, ok := rr.(*dns.SRV); ok && srv.Target != "." {
			ttl = minTTL(ttl, srv.Hdr.Ttl)
			groups = addByPriority(groups, srv)
		}
	}
	// RFC 2782: the lowest priority that has a usable target; the next
	// only when none of its targets resolves.
	var failed []error
	for _, g := range groups {
		ins, gttl, errs := instances(service, g, d.resolve(ctx, resp, g))
		if len(ins) == 0 {
			failed = append(failed, errs...)
			continue
		}
		d.leftOut(service, g[0].Priority, errs)
		return ins, max(minTTL(ttl, gttl), 0), nil
	}
	if len(failed) > 0 {
		return nil, 0, failed[0]
	}
	return nil, max(ttl, 0), nil
}

// endpoints asks for each named endpoint's records, all at once, and
// gives each instance the endpoints on its address: the record at the
// instance's own address (the primary has that name), else the one
// record on its host when no other instance shares the host. A failed
// question fails the lookup: an instance missing its "grpc" endpoint
// would send gRPC callers to its primary port. The TTL is the smallest
// of the records found, -1 when none was.
func (d *srvDriver) endpoints(ctx context.Context, service string, ins []driver.Instance) (time.Duration, error) {
	names := d.opts.Endpoints
	found := make([][]driver.Instance, len(names))
	ttls := make([]time.Duration, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Go(func() { found[i], ttls[i], errs[i] = d.records(ctx, service, d.endpointNameOf(service, n)) })
	}
	wg.Wait()
	if err := cmp.Or(errs...); err != nil {
		return 0, err
	}
	hosts := make(map[string]int, len(ins))
	for _, in := range ins {
		hosts[in.Host()]++
	}
	ttl := time.Duration(-1)
	for i, n := range names {
		if len(found[i]) > 0 && (ttl < 0 || ttls[i] < ttl) {
			ttl = ttls[i]
		}
		for j := range ins {
			if addr, ok := endpointOf(ins[j], found[i], hosts); ok {
				ins[j].Endpoints = append(ins[j].Endpoints, driver.Endpoint{Name: n, Address: addr})
			}
		}
	}
	return ttl, nil
}

// endpointOf picks in's address among an endpoint's records.
func endpointOf(in driver.Instance, recs []driver.Instance, hosts map[string]int) (string, bool) {
	addr, n := "", 0
	for _, r := range recs {
		if r.Address == in.Address {
			return r.Address, true
		}
		if r.Host() == in.Host() {
			addr, n = r.Address, n+1
		}
	}
	return addr, n == 1 && hosts[in.Host()] == 1
}

// addByPriority adds srv to its priority's group; groups stay sorted by
// priority, lowest first.
func addByPriority(groups [][]*dns.SRV, srv *dns.SRV) [][]*dns.SRV {
	i, found := slices.BinarySearchFunc(groups, srv.Priority, func(g []*dns.SRV, p uint16) int { return cmp.Compare(g[0].Priority, p) })
	if found {
		groups[i] = append(groups[i], srv)
		return groups
	}
	return slices.Insert(groups, i, []*dns.SRV{srv})
}

// instances returns the instances of one priority's records, the
// smallest TTL of their addresses, and the errors of the targets that did
// not resolve.
func instances(service string, g []*dns.SRV, res map[string]resolved) ([]driver.Instance, uint32, []error) {
	var (
		ins  []driver.Instance
		ttl  uint32
		errs []error
		seen = map[string]bool{}
	)
	for _, srv := range g {
		r := res[srv.Target]
		if r.err != nil && !seen[srv.Target] {
			errs = append(errs, r.err)
		}
		seen[srv.Target] = true
		if len(r.ips) > 0 && (len(ins) == 0 || r.ttl < ttl) {
			ttl = r.ttl
		}
		for _, ip := range r.ips {
			addr := net.JoinHostPort(ip, strconv.Itoa(int(srv.Port)))
			if seen[addr] {
				continue
			}
			seen[addr] = true
			ins = append(ins, driver.Instance{ID: InstanceID(addr), Service: service, Address: addr,
				Weight: uint32(srv.Weight), Metadata: map[string]string{
					"srv_target": strings.TrimSuffix(srv.Target, "."), "srv_priority": strconv.Itoa(int(srv.Priority))}})
		}
	}
	return ins, ttl, errs
}

// InstanceID is the ID under which an SRV answer's address host:port is
// listed: backend.AddressID, "10.0.0.7:8080" is "10.0.0.7-8080". DNS has no
// instance IDs; this one is stable for as long as the address is.
func InstanceID(addr string) string { return backend.AddressID(addr) }

func minTTL(cur time.Duration, ttl uint32) time.Duration {
	t := time.Duration(ttl) * time.Second
	if cur < 0 || t < cur {
		return t
	}
	return cur
}

// warnEvery bounds the warnings about targets left out: one line per
// interval, with the count of those not reported since.
const warnEvery = 10 * time.Second

// leftOut reports the targets of the served priority that did not
// resolve (errs), with a rate-limited warning on slog.Default: they are
// left out of the snapshot, which holds the targets that did.
func (d *srvDriver) leftOut(service string, priority uint16, errs []error) {
	if len(errs) == 0 {
		return
	}
	d.warn.Lock()
	now := time.Now()
	if !d.warn.at.IsZero() && now.Sub(d.warn.at) < warnEvery {
		d.warn.skipped++
		d.warn.Unlock()
		return
	}
	skipped := d.warn.skipped
	d.warn.at, d.warn.skipped = now, 0
	d.warn.Unlock()
	slog.Default().Warn("roster: dns+srv: targets that did not resolve are left out", "service", service,
		"priority", priority, "targets", len(errs), "first", errs[0].Error(), "unreported", skipped)
}

// maxQuestions bounds the address questions one lookup has in flight:
// enough for 64 targets at once (A and AAAA each), so that a service's
// slow targets cost one question's time, not one each, without opening
// a connection per target of a large service at once.
const maxQuestions = 128

// resolved is what a target's addresses came to.
type resolved struct {
	ips []string
	ttl uint32
	err error // the target did not resolve: its questions failed
}

// resolve finds the addresses of the records' targets, together, at most
// maxQuestions questions at a time, under ctx.
func (d *srvDriver) resolve(ctx context.Context, resp *dns.Msg, g []*dns.SRV) map[string]resolved {
	res := map[string]resolved{}
	var ask []string
	for _, srv := range g {
		if _, dup := res[srv.Target]; dup {
			continue
		}
		ips, ttl, ok := known(resp, srv.Target)
		res[srv.Target] = resolved{ips: ips, ttl: ttl}
		if !ok {
			ask = append(ask, srv.Target)
		}
	}
	got := make([]resolved, len(ask))
	sem := make(chan struct{}, maxQuestions)
	var wg sync.WaitGroup
	for i, target := range ask {
		wg.Go(func() { got[i] = d.ask(ctx, sem, target) })
	}
	wg.Wait()
	for i, target := range ask {
		res[target] = got[i]
	}
	return res
}

// known returns the target's addresses when no question is needed: from
// the answer's additional section, or the target itself when it is an IP.
func known(resp *dns.Msg, target string) ([]string, uint32, bool) {
	if ips, ttl := addressesIn(resp.Extra, target); len(ips) > 0 {
		return ips, ttl, true
	}
	if ip := net.ParseIP(strings.TrimSuffix(target, ".")); ip != nil {
		return []string{ip.String()}, 0, true
	}
	return nil, 0, false
}

// ask puts the target's A and AAAA questions together. A target with an
// address of either family resolves; one without is an error only if a
// question failed (a name without addresses is no instance, no error).
func (d *srvDriver) ask(ctx context.Context, sem chan struct{}, target string) resolved {
	var (
		wg  sync.WaitGroup
		got [2]resolved
	)
	for i, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
				defer func() { <-sem }()
			case <-ctx.Done():
				got[i].err = fmt.Errorf("dnssrv: %s %s: %w", dns.TypeToString[qt], target, ctx.Err())
				return
			}
			r, err := d.exchange(ctx, target, qt)
			if err != nil {
				got[i].err = err
				return
			}
			got[i].ips, got[i].ttl = addressesIn(r.Answer, target)
		})
	}
	wg.Wait()
	var out resolved
	for _, g := range got {
		if len(g.ips) > 0 && (len(out.ips) == 0 || g.ttl < out.ttl) {
			out.ttl = g.ttl
		}
		out.ips = append(out.ips, g.ips...)
		out.err = cmp.Or(out.err, g.err)
	}
	if len(out.ips) > 0 {
		out.err = nil
	}
	return out
}

// addressesIn returns the A and AAAA records of name in rrs (following
// one CNAME), with their smallest TTL.
func addressesIn(rrs []dns.RR, name string) ([]string, uint32) {
	var ips []string
	var ttl uint32
	for _, rr := range rrs {
		if c, ok := rr.(*dns.CNAME); ok && strings.EqualFold(c.Hdr.Name, name) {
			name = c.Target
		}
	}
	for _, rr := range rrs {
		if !strings.EqualFold(rr.Header().Name, name) {
			continue
		}
		var ip net.IP
		switch a := rr.(type) {
		case *dns.A:
			ip = a.A
		case *dns.AAAA:
			ip = a.AAAA
		default:
			continue
		}
		if len(ips) == 0 || rr.Header().Ttl < ttl {
			ttl = rr.Header().Ttl
		}
		ips = append(ips, ip.String())
	}
	return ips, ttl
}

// exchange asks one question, over TCP when asked to or when the UDP
// answer was truncated. A name that does not exist is an empty answer.
func (d *srvDriver) exchange(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.SetEdns0(dns.DefaultMsgSize, false)
	c := d.tcp
	if d.opts.UDP {
		c = d.udp
	}
	r, _, err := c.ExchangeContext(ctx, m, d.opts.Resolver)
	if err == nil && r.Truncated && c == d.udp {
		r, _, err = d.tcp.ExchangeContext(ctx, m, d.opts.Resolver)
	}
	q := dns.TypeToString[qtype] + " " + name
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("dnssrv: %s: %w", q, ctx.Err())
	case err != nil:
		return nil, fmt.Errorf("dnssrv: %s: %w", q, err)
	case r.Rcode == dns.RcodeNameError:
		return &dns.Msg{}, nil
	case r.Rcode != dns.RcodeSuccess:
		return nil, fmt.Errorf("dnssrv: %s: %w", q, &rcodeError{r.Rcode, d.opts.Resolver})
	}
	return r, nil
}

// Watch implements driver.Driver: a stream that polls.
func (d *srvDriver) Watch(_ context.Context, service string) (driver.Stream, error) {
	return &stream{d: d, service: service, closed: make(chan struct{})}, nil
}

type stream struct {
	d       *srvDriver
	service string
	closed  chan struct{}
	once    sync.Once
	polled  bool          // a query was made: the next waits first
	wait    time.Duration // until the next query
}

// Next implements driver.Stream: the first call queries at once, later
// ones after the records' TTL (bounded). Each returns what the query
// found, changed or not: the registry drops repeats.
func (s *stream) Next(ctx context.Context) (driver.Snapshot, error) {
	if s.polled {
		t := time.NewTimer(s.wait)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return driver.Snapshot{}, ctx.Err()
		case <-s.closed:
			return driver.Snapshot{}, fmt.Errorf("dnssrv: watch %s: %w", s.service, driver.ErrClosed)
		case <-t.C:
		}
	}
	c, cancel := context.WithTimeout(ctx, 2*s.d.opts.Timeout)
	snap, ttl, err := s.d.lookup(c, s.service)
	cancel()
	if err != nil {
		return driver.Snapshot{}, err
	}
	s.polled, s.wait = true, min(max(ttl, s.d.opts.MinPoll), s.d.opts.MaxPoll)
	return snap, nil
}

// Close implements driver.Stream.
func (s *stream) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

// rcodeError is a DNS server's answer other than success or NXDOMAIN.
type rcodeError struct {
	rcode    int
	resolver string
}

func (e *rcodeError) Error() string {
	return dns.RcodeToString[e.rcode] + " from " + e.resolver
}

// ErrorKind implements driver.Driver. A server that cannot parse or does
// not implement the question (FORMERR, NOTIMP) will never answer it:
// ErrInvalid. Every other failure (a refused or timed-out connection,
// SERVFAIL, REFUSED) may pass: ErrUnavailable.
func (d *srvDriver) ErrorKind(err error) error {
	var re *rcodeError
	if errors.As(err, &re) && (re.rcode == dns.RcodeFormatError || re.rcode == dns.RcodeNotImplemented) {
		return driver.ErrInvalid
	}
	return driver.ErrUnavailable
}
