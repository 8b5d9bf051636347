package testserver

import (
	"sync"

	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/loopback"
	"github.com/roster-go/roster/registry/driver"
)

// Proxies implements a conformance harness's MakeLinkedDriver for a server
// with one address: each driver gets a TCP proxy of its own in front of the
// server, which is its Link. The zero Proxies is ready; Close closes every
// proxy it made (register it with tb.Cleanup).
type Proxies struct {
	mu      sync.Mutex
	proxies []*loopback.Proxy
}

// MakeLinkedDriver starts a proxy to addr and makes a driver on the
// proxy's address with open.
func (ps *Proxies) MakeLinkedDriver(addr string, open func(addr string) (driver.Driver, error)) (driver.Driver, conformance.Link, error) {
	p, err := loopback.NewProxy(addr)
	if err != nil {
		return nil, nil, err
	}
	ps.mu.Lock()
	ps.proxies = append(ps.proxies, p)
	ps.mu.Unlock()
	d, err := open(p.Addr())
	if err != nil {
		return nil, nil, err
	}
	return d, p, nil
}

// Close closes the proxies made so far.
func (ps *Proxies) Close() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.proxies {
		p.Close()
	}
	ps.proxies = nil
}
