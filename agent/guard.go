package agent

import (
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// foreign returns why r must be refused, or "" to serve it. The API has
// no authentication: loopback keeps other hosts out, and this keeps out
// the one remote party that can still reach loopback — a web page in a
// browser on the host.
//
//   - Cross-site request forgery: a page may POST to 127.0.0.1 without
//     asking (a form, or fetch with a text/plain body) and register an
//     instance of any service, or report failures until instances are
//     quarantined. Browsers send Origin with such requests; a request
//     whose Origin is not the agent's own is refused. Programs (curl,
//     PHP, Python) send no Origin.
//   - DNS rebinding: a page whose name resolves to 127.0.0.1 reads the
//     answers as same-origin. Its requests carry its own name in Host, so
//     over TCP only a loopback address or "localhost" is accepted as Host.
//     A Unix socket cannot be reached from a browser.
func foreign(r *http.Request) string {
	overTCP := isIPPort(r.RemoteAddr)
	if overTCP && !loopbackHost(r.Host) {
		return "host " + quote(r.Host) + " refused: call the agent as 127.0.0.1, [::1] or localhost " +
			"(another name resolving to loopback is how a web page reaches it: DNS rebinding)"
	}
	if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r.Host) {
		return "cross-origin request from " + quote(o) + " refused: the agent's API has no authentication, " +
			"so web pages of other origins may not call it"
	}
	return ""
}

func isIPPort(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	_, err = netip.ParseAddr(host)
	return err == nil
}

// loopbackHost reports whether a Host header names this host: a loopback
// address or localhost, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// sameOrigin reports whether origin is the agent's own: the dashboard,
// served by the agent at http://<host>.
func sameOrigin(origin, host string) bool {
	rest, ok := strings.CutPrefix(origin, "http://")
	return ok && host != "" && strings.EqualFold(rest, host)
}

// quote bounds and quotes an untrusted header for an error message.
func quote(s string) string {
	const max = 100
	if len(s) > max {
		s = s[:max]
	}
	return strconv.Quote(s)
}
