package chaos

import (
	"context"
	"slices"
	"testing"

	"github.com/roster-go/roster/backends/consul/consultest"
	"github.com/roster-go/roster/backends/dnssrv"
	"github.com/roster-go/roster/backends/dnssrv/dnssrvtest"
	"github.com/roster-go/roster/internal/loopback"
)

// reader is a server whose instances are read through another URL than
// the one they register through: a read-only backend.
type reader interface{ readURL() string }

// A reader may name instances otherwise than they registered: it
// implements readID.
type idReader interface{ readID(*instance) string }

// readID is the ID the client reads in by on s.
func readID(s server, in *instance) string {
	if r, ok := s.(idReader); ok {
		return r.readID(in)
	}
	return in.id
}

// readURL is the URL the suite's recovery check and client read s by.
func readURL(s server) string {
	if r, ok := s.(reader); ok {
		return r.readURL()
	}
	return s.url()
}

// dnsServer is a private Consul agent read through its DNS interface
// (dns+srv://, read-only, default options: TCP, polled every second).
// The instances register with the agent, the owner of the records, and
// the client and the recovery check only read DNS. The DNS server's
// faults are the agent's: killed and back empty (its services registered
// again by their owners), restarted at once, restarted on its data, and
// the client cut off from it.
type dnsServer struct{ consulServer }

// dnsFaults are every fault but restart-empty. DNS carries no epoch and
// the driver asks each question on a new connection: a server that comes
// back empty between two polls (1s apart) answers NXDOMAIN, which says
// the service has no instances exactly as if every owner had
// deregistered, and the client applies it until the owners register
// again (600 failed calls in 1s were measured). A server down for longer
// than a poll is crash-empty, which fails the stream and holds.
var dnsFaults = slices.DeleteFunc(slices.Clone(faults), func(f fault) bool { return f.name == "restart-empty" })

func startDNSSRV(t *testing.T) server { return &dnsServer{consulServer{consultest.Start(t)}} }

func (s *dnsServer) readURL() string { return dnssrvtest.URL(s.a, "") }

// readID: DNS knows an instance by its address alone.
func (s *dnsServer) readID(in *instance) string { return dnssrv.InstanceID(in.addr) }

func (s *dnsServer) link() (string, func(bool), func(), error) {
	p, err := loopback.NewProxy(s.a.DNSAddr()) // TCP, the backend's default
	if err != nil {
		return "", nil, nil, err
	}
	cut := func(ok bool) { _ = p.SetConnected(context.Background(), ok) }
	return "dns+srv://" + p.Addr() + "/{service}.service.consul", cut, func() { p.Close() }, nil
}
