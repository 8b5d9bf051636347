package redistest

import (
	"net"
	"strconv"
	"testing"
)

// TLSFiles are the PEM files of a TLS server: its certificate and key, and
// the CA that signs the clients' certificates (and, in tests, usually the
// server's too).
type TLSFiles struct {
	CertFile, KeyFile, CAFile string
}

// StartTLS starts a redis-server that also listens for TLS on TLSAddr,
// with the certificate in f: mutual TLS, clients must present a
// certificate signed by f.CAFile. The plain port stays open for the
// Server's own clients.
func StartTLS(t testing.TB, f TLSFiles, args ...string) *Server {
	t.Helper()
	bin, err := findServer()
	if err != nil {
		t.Fatal(err)
	}
	s, err := newServer(&Server{bin: bin, dir: t.TempDir(), args: args, tls: &f})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// TLSAddr is the host:port of the server's TLS listener, "" without one.
func (s *Server) TLSAddr() string {
	if s.tls == nil {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.tlsPort))
}
