package backend

import (
	"net"
	"net/netip"
	"slices"
	"strings"
)

// MaxHostLen is the longest host name an address may carry (DNS's limit).
const MaxHostLen = 253

// CanonicalAddress returns the one spelling of a host:port address that
// every backend stores, so that one endpoint is never two records
// ("[::1]:80" and "[0:0::1]:80", "API.local:80" and "api.local:80"). The
// rule:
//
//   - the port is decimal, 1 to 65535, without sign or leading zeros
//     ("h:+80" and "h:080" are rejected, not guessed at);
//   - an IPv6 host is in brackets and is rewritten to its shortest form
//     ("[0:0::1]:80" → "[::1]:80"); zones ("%eth0") are rejected;
//   - an IPv4 host is four decimal octets without leading zeros (a host
//     of only digits and dots that is not one, such as "010.0.0.1", is
//     rejected: resolvers read it as octal or not at all);
//   - an IPv4-mapped IPv6 host is its IPv4 address
//     ("[::ffff:10.0.0.1]:80" → "10.0.0.1:80");
//   - an IP host no client should dial is rejected (see [Dialable]):
//     the unspecified address, link-local and multicast addresses, the
//     broadcast address and the cloud metadata addresses;
//   - brackets hold only an IPv6 address ("[h]:80" is rejected);
//   - any other host is a DNS-style name of letters, digits, '-', '_' and
//     '.' (labels of 1 to 63 bytes that neither start nor end with '-',
//     at most MaxHostLen bytes), lower-cased, whose last label is not a
//     number: resolvers read "0x7f.0.0.1" and "0x7f000001" as 127.0.0.1.
//
// Errors are *FieldError on "address" (they wrap ErrInvalid).
func CanonicalAddress(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", invalid("address", "%q is not host:port", addr)
	}
	if err := checkPort(port); err != nil {
		return "", err
	}
	bracketed := strings.HasPrefix(addr, "[")
	host, err = canonicalHost(host, bracketed)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(host, port), nil
}

func checkPort(port string) error {
	if port == "" || len(port) > 5 || port[0] == '0' {
		return invalid("address", "port %q: want a decimal number from 1 to 65535 without sign or leading zeros", port)
	}
	n := 0
	for i := 0; i < len(port); i++ {
		c := port[i]
		if c < '0' || c > '9' {
			return invalid("address", "port %q: want a decimal number from 1 to 65535 without sign or leading zeros", port)
		}
		n = n*10 + int(c-'0')
	}
	if n > 65535 {
		return invalid("address", "port %q out of range 1-65535", port)
	}
	return nil
}

func canonicalHost(host string, bracketed bool) (string, error) {
	if host == "" {
		return "", invalid("address", "no host")
	}
	if strings.Contains(host, ":") || bracketed {
		ip, err := netip.ParseAddr(host)
		switch {
		case !bracketed:
			return "", invalid("address", "IPv6 host %q must be in brackets", host)
		case err != nil || !ip.Is6():
			return "", invalid("address", "brackets hold an IPv6 address only, not %q", host)
		case ip.Zone() != "":
			return "", invalid("address", "IPv6 zone %q not allowed", ip.Zone())
		}
		return dialable(ip.Unmap())
	}
	if strings.Trim(host, "0123456789.") == "" || numericLabel(host[strings.LastIndexByte(host, '.')+1:]) {
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.Is4() {
			return "", invalid("address", "host %q is neither an IPv4 address nor a name", host)
		}
		return dialable(ip)
	}
	return hostName(host)
}

// dialable returns ip's text unless Dialable refuses it.
func dialable(ip netip.Addr) (string, error) {
	if err := Dialable(ip); err != nil {
		return "", err
	}
	return ip.String(), nil
}

// Metadata addresses that are not link-local: AWS's IPv6 instance
// metadata service and Alibaba Cloud's.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("100.100.100.200"),
}

// Dialable reports why no registry should hand ip to a client: an error
// on "address", or nil. It refuses, on every backend, at Register and at
// read:
//
//   - the unspecified address ("0.0.0.0", "::"), where a server listens;
//   - link-local addresses (169.254.0.0/16, fe80::/10): they mean a
//     different host on every link, and 169.254.169.254 is the cloud
//     metadata service, which hands out credentials;
//   - the other metadata addresses (fd00:ec2::254, 100.100.100.200);
//   - multicast (224.0.0.0/4, ff00::/8) and the broadcast address
//     255.255.255.255, which reach many hosts at once.
//
// Loopback is not refused here: whether it is allowed depends on where
// the registry is (see [Loopback]).
func Dialable(ip netip.Addr) error {
	ip = ip.Unmap()
	var why string
	switch {
	case ip.IsUnspecified():
		why = "the unspecified address, where a server listens: register an address clients can reach"
	case ip == netip.AddrFrom4([4]byte{169, 254, 169, 254}):
		why = "the cloud metadata address"
	case slices.Contains(metadataAddrs, ip):
		why = "a cloud metadata address"
	case ip.IsLinkLocalUnicast():
		why = "link-local: it names another host on every link"
	case ip.IsMulticast():
		why = "multicast"
	case ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		why = "the broadcast address"
	default:
		return nil
	}
	return invalid("address", "%s is %s", ip, why)
}

// Loopback reports whether the canonical address addr is on the local
// host: a loopback IP (127.0.0.0/8, ::1), or the name "localhost" or a
// name under it (RFC 6761). Other names are not resolved: a reader
// cannot know what they resolve to where the client runs.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().IsLoopback()
	}
	host = strings.ToLower(host)
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}

// CheckLoopback refuses a loopback addr unless allowed, as an error on
// field. Registry allows loopback when its backend's server is on this
// host (see [Local]) or when asked to.
func CheckLoopback(field, addr string, allowed bool) error {
	if allowed || !Loopback(addr) {
		return nil
	}
	return invalid(field, "%s is a loopback address and the registry is not on this host: "+
		"clients elsewhere would dial themselves (allow it with registry.AllowLoopback or ?loopback=allow)", addr)
}

// Local is implemented by drivers that know whether their server runs
// on this host. Registry then allows loopback addresses, as local
// development registers them. A driver that does not implement it counts
// as remote.
type Local interface {
	Local() bool
}

// LocalHosts reports whether every server of servers is on this host:
// each is a host, a host:port or a URL, whose host is a loopback IP or
// "localhost", or a Unix socket. An empty host is the local default of
// the backends that have one. No server at all is false.
func LocalHosts(servers ...string) bool {
	for _, h := range servers {
		if scheme, rest, ok := strings.Cut(h, "://"); ok {
			if strings.HasPrefix(scheme, "unix") {
				continue
			}
			h, _, _ = strings.Cut(rest, "/")
		}
		if strings.HasPrefix(h, "/") {
			continue // a Unix socket's path
		}
		if hh, _, err := net.SplitHostPort(h); err == nil {
			h = hh
		}
		h = strings.Trim(h, "[]")
		if h == "" {
			continue
		}
		if !Loopback(net.JoinHostPort(h, "1")) {
			return false
		}
	}
	return len(servers) > 0
}

// numericLabel reports whether a host's last label reads as a number to
// a resolver: decimal digits, or 0x and hexadecimal digits.
func numericLabel(l string) bool {
	if h, ok := strings.CutPrefix(strings.ToLower(l), "0x"); ok {
		return strings.Trim(h, "0123456789abcdef") == ""
	}
	return l != "" && strings.Trim(l, "0123456789") == ""
}

func hostName(host string) (string, error) {
	if len(host) > MaxHostLen {
		return "", invalid("address", "host of %d bytes, at most %d allowed", len(host), MaxHostLen)
	}
	for i, r := range host { // runes: a non-ASCII host is reported by its character
		if r >= 0x80 || !idChar(byte(r)) {
			return "", invalid("address", "host %q: character %q not allowed (want letters, digits, '-', '_', '.')", host, r)
		}
		if r == '.' && (i == 0 || i == len(host)-1 || host[i-1] == '.') {
			return "", invalid("address", "host %q has an empty label", host)
		}
	}
	for _, l := range strings.Split(host, ".") {
		if len(l) > 63 {
			return "", invalid("address", "host %q: a label of %d bytes, at most 63 allowed", host, len(l))
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return "", invalid("address", "host %q: label %q starts or ends with '-'", host, l)
		}
	}
	return strings.ToLower(host), nil
}
