package etcd_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/internal/testca"
	"github.com/roster-go/roster/registry"
)

func TestTLS(t *testing.T) {
	files := writeCerts(t, t.TempDir())
	c := startCluster(t, etcdtest.Config{TLS: files})
	ctx := t.Context()
	u := c.URL("/tls")
	if !strings.HasPrefix(u, "etcds://") {
		t.Fatalf("URL of a TLS cluster = %s", u)
	}
	r, err := registry.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Register(ctx, registry.Instance{Service: "svc", Address: "127.0.0.1:80"}, registry.WithTTL(3*time.Second)); err != nil {
		t.Fatalf("Register over TLS: %v", err)
	}
	if sn, err := r.Lookup(ctx, "svc"); err != nil || len(sn.Instances) != 1 {
		t.Fatalf("Lookup over TLS: %v %v", sn.Instances, err)
	}

	// Without the CA the server's certificate is not trusted: Open says so.
	hosts := u[len("etcds://"):strings.Index(u, "?")]
	_, err = registry.Open(ctx, "etcds://"+hosts+"?prefix=/tls&request_timeout=1s")
	if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("Open with an untrusted server certificate = %v, want ErrInvalid on the unknown authority", err)
	}
}

// writeCerts makes a CA and a server certificate for 127.0.0.1 signed by
// it, as PEM files in dir.
func writeCerts(t *testing.T, dir string) *etcdtest.TLSFiles {
	f := testca.Write(t, dir)
	return &etcdtest.TLSFiles{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA}
}

// With client-certificate auth the servers let in only clients with a
// certificate of their CA; every TLS misconfiguration fails the first
// call with ErrInvalid naming its cause.
func TestTLSMisconfigured(t *testing.T) {
	dir := t.TempDir()
	good, bad := testca.WriteWithBad(t, dir, "etcd.test")
	c := startCluster(t, etcdtest.Config{TLS: &etcdtest.TLSFiles{CertFile: good.Cert, KeyFile: good.Key, CAFile: good.CA, ClientCertAuth: true}})
	u := c.URL("/tls", "request_timeout=2s")
	if !strings.Contains(u, "cert_file=") {
		t.Fatalf("URL of a cluster requiring client certificates = %s", u)
	}
	ctx := t.Context()
	r, err := registry.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Register(ctx, registry.Instance{Service: "svc", Address: "127.0.0.1:80"}, registry.WithTTL(3*time.Second)); err != nil {
		t.Fatalf("Register over mutual TLS: %v", err)
	}
	hosts := u[len("etcds://"):strings.Index(u, "?")]
	at := func(opts string) string { return "etcds://" + hosts + "?prefix=/tls&request_timeout=2s" + opts }
	for _, c := range testca.Misconfigs(good, bad) {
		t.Run(c.Name, func(t *testing.T) {
			r, err := registry.Open(ctx, at(c.Options))
			if err == nil {
				defer r.Close()
				_, err = r.Lookup(ctx, "svc")
			}
			if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), c.Cause) {
				t.Fatalf("Open+Lookup = %v, want ErrInvalid saying %q", err, c.Cause)
			}
		})
	}
	expired := startCluster(t, etcdtest.Config{TLS: &etcdtest.TLSFiles{CertFile: bad.ExpiredCert, KeyFile: bad.ExpiredKey, CAFile: good.CA}})
	if _, err := registry.Open(ctx, expired.URL("/tls")); !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "has expired") {
		t.Fatalf("Open on a server with an expired certificate = %v, want ErrInvalid saying it has expired", err)
	}
}

// TestPortMixups: etcd:// on a TLS-only cluster (gRPC sees connections
// closed and waits for the timeout) and etcds:// on a plain one are
// ErrInvalid naming the mix-up, not an outage retried forever.
func TestPortMixups(t *testing.T) {
	files := writeCerts(t, t.TempDir())
	secure := startCluster(t, etcdtest.Config{TLS: files})
	plain := startCluster(t, etcdtest.Config{})
	hosts := func(u string) string { _, h, _ := strings.Cut(u[:strings.Index(u, "?")], "://"); return h }
	ctx := t.Context()
	for _, c := range []struct{ name, url, cause string }{
		{"plain to a TLS cluster", "etcd://" + hosts(secure.URL("/m")) + "?request_timeout=1s", "speaks TLS only"},
		{"plain with a user to a TLS cluster", "etcd://u:p@" + hosts(secure.URL("/m")) + "?request_timeout=1s&dial_timeout=1s", "speaks TLS only"},
		{"TLS to a plain cluster", "etcds://" + hosts(plain.URL("/m")) + "?dial_timeout=1s&ca_file=" + files.CAFile, "does not speak TLS"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := registry.Open(ctx, c.url)
			if err == nil {
				defer r.Close()
				_, err = r.Lookup(ctx, "svc")
			}
			if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), c.cause) {
				t.Fatalf("Open+Lookup = %v, want ErrInvalid saying %q", err, c.cause)
			}
		})
	}
}
