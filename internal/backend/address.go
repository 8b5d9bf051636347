package backend

import (
	"net"
	"net/netip"
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
//   - the unspecified address ("0.0.0.0", "[::]") is rejected: it is
//     where a server listens, not an address a client can dial;
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

// dialable returns ip's text unless it is the unspecified address.
func dialable(ip netip.Addr) (string, error) {
	if ip.IsUnspecified() {
		return "", invalid("address", "%s is the unspecified address, where a server listens: register an address clients can reach", ip)
	}
	return ip.String(), nil
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
