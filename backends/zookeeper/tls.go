package zookeeper

import (
	"context"
	"crypto/tls"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/go-zookeeper/zk"
)

// tlsHandshakeWait is how long checkTLS waits after a handshake for the
// server's verdict on the client's certificate (TLS 1.3 sends it then).
// A ZooKeeper server never speaks first, so the wait always runs out on
// a server that accepted us: it is paid once per server at New.
const tlsHandshakeWait = 250 * time.Millisecond

// checkTLS runs one handshake with every server that answers, so that a
// certificate that cannot be verified, or a client certificate the server
// refuses, is ErrInvalid naming the cause from New: the client library
// would retry the handshake forever and the calls would time out as
// ErrUnavailable. Servers that do not answer are for the sessions to
// report.
func checkTLS(opts Options) error {
	ctx, cancel := context.WithTimeout(context.Background(), opts.RequestTimeout)
	defer cancel()
	for _, s := range opts.Servers {
		if _, err := backend.CheckTLS(ctx, s, opts.TLS, tlsHandshakeWait); err != nil {
			return err
		}
	}
	return nil
}

// transport returns how a client reaches the servers: plain TCP to the
// addresses the library resolves (its defaults) or, with cfg, a TLS dialer
// and a host list that keeps the URL's host names (certificates name
// hosts, and the library's default resolves them to addresses).
func transport(cfg *tls.Config) (zk.Dialer, zk.HostProvider) {
	if cfg == nil {
		return net.DialTimeout, zk.NewDNSHostProvider()
	}
	dial := func(network, addr string, timeout time.Duration) (net.Conn, error) {
		c := cfg.Clone()
		if c.ServerName == "" {
			c.ServerName, _, _ = net.SplitHostPort(addr)
		}
		return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, network, addr, c)
	}
	return dial, &hostList{}
}

// hostList is a zk.HostProvider over the servers as given, in a random
// order, as the library's DNSHostProvider does without resolving them.
type hostList struct {
	mu      sync.Mutex
	servers []string
	cur     int // the server Next returned last
	last    int // the server of the last connection, -1 before the first
}

func (h *hostList) Init(servers []string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.servers = append([]string(nil), servers...)
	rand.Shuffle(len(h.servers), func(i, j int) { h.servers[i], h.servers[j] = h.servers[j], h.servers[i] })
	h.cur, h.last = -1, -1
	return nil
}

func (h *hostList) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.servers)
}

// Next returns the next server; retryStart is true once every server has
// been tried since the last connection.
func (h *hostList) Next() (server string, retryStart bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cur = (h.cur + 1) % len(h.servers)
	retryStart = h.cur == h.last
	if h.last == -1 {
		h.last = 0
	}
	return h.servers[h.cur], retryStart
}

func (h *hostList) Connected() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last = h.cur
}
