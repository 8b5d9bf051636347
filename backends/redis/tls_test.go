package redis_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/internal/testca"
	"github.com/roster-go/roster/registry"
)

// Mutual TLS with a private CA: the server is trusted through ca_file and
// the client is let in by its cert_file and key_file.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	f := writeCerts(t, t.TempDir())
	srv := redistest.StartTLS(t, f)
	ctx := t.Context()
	base := "rediss://" + srv.TLSAddr() + "/0?dial_timeout=1s"
	r := open(t, base+"&ca_file="+f.CAFile+"&cert_file="+f.CertFile+"&key_file="+f.KeyFile)
	if _, err := r.Register(ctx, registry.Instance{Service: "tls", Address: "127.0.0.1:80"}); err != nil {
		t.Fatalf("Register over mutual TLS: %v", err)
	}
	if s, err := r.Lookup(ctx, "tls"); err != nil || len(s.Instances) != 1 {
		t.Fatalf("Lookup over mutual TLS: %v, %v", s.Instances, err)
	}
}

// Every TLS misconfiguration fails the first call with ErrInvalid naming
// its cause: retrying would never cure it.
func TestTLSMisconfigured(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good, bad := testca.WriteWithBad(t, dir, "redis.test")
	srv := redistest.StartTLS(t, redistest.TLSFiles{CertFile: good.Cert, KeyFile: good.Key, CAFile: good.CA})
	expired := redistest.StartTLS(t, redistest.TLSFiles{CertFile: bad.ExpiredCert, KeyFile: bad.ExpiredKey, CAFile: good.CA})
	client := "&cert_file=" + good.Cert + "&key_file=" + good.Key
	at := func(s *redistest.Server, opts string) string {
		return "rediss://" + s.TLSAddr() + "/0?dial_timeout=1s" + opts
	}
	type tc struct{ name, url, cause string }
	cases := []tc{
		{"no ca_file", at(srv, client), "not signed by a CA in ca_file"},
		{"expired server certificate", at(expired, "&ca_file="+good.CA+client), "has expired"},
	}
	for _, m := range testca.Misconfigs(good, bad) {
		cases = append(cases, tc{m.Name, at(srv, m.Options), m.Cause})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { refusedAsInvalid(t, c.url, c.cause, "") })
	}
}

// writeCerts makes a CA and a certificate for 127.0.0.1 signed by it
// (good for a server and a client), as PEM files in dir.
func writeCerts(t *testing.T, dir string) redistest.TLSFiles {
	f := testca.Write(t, dir)
	return redistest.TLSFiles{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA}
}

// TestPortMixups: rediss:// on the plain port (the handshake waits for an
// answer Redis never sends) and redis:// on the TLS port (the server
// closes each connection) are ErrInvalid naming the mix-up, not an outage
// retried forever.
func TestPortMixups(t *testing.T) {
	t.Parallel()
	f := writeCerts(t, t.TempDir())
	srv := redistest.StartTLS(t, f)
	for _, c := range []struct{ name, url, cause string }{
		{"TLS to the plain port", "rediss://" + srv.Addr() + "/0?ca_file=" + f.CAFile, "does not speak TLS"},
		{"plain to the TLS port", "redis://" + srv.TLSAddr() + "/0", "speaks TLS only"},
	} {
		t.Run(c.name, func(t *testing.T) { refusedAsInvalid(t, c.url, c.cause, c.cause) })
	}
}

// refusedAsInvalid opens url and checks that Lookup fails with ErrInvalid
// saying cause, and Register with ErrInvalid saying registerCause.
func refusedAsInvalid(t *testing.T, url, cause, registerCause string) {
	t.Helper()
	r := open(t, url)
	_, err := r.Lookup(t.Context(), "tls")
	if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), cause) {
		t.Fatalf("Lookup = %v, want ErrInvalid saying %q", err, cause)
	}
	_, err = r.Register(t.Context(), registry.Instance{Service: "tls", Address: "127.0.0.1:80"})
	if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), registerCause) {
		t.Fatalf("Register = %v, want ErrInvalid saying %q", err, registerCause)
	}
}
