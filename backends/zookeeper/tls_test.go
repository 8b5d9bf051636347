package zookeeper_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/backends/zookeeper"
	"github.com/roster-go/roster/internal/servers/zktest"
	"github.com/roster-go/roster/internal/testca"
	"github.com/roster-go/roster/registry"
)

// TestTLS: a server on its secure client port (Netty, TLS) serves a
// registry that trusts its CA, by the name in its certificate; without
// the CA, Open fails at once with ErrInvalid naming the cause.
func TestTLS(t *testing.T) {
	f := testca.Write(t, t.TempDir(), "zk.test")
	s := zktest.StartTLS(t, zktest.TLSFiles{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA})
	u := "zk://" + s.SecureAddr() + "/tls?tls=true&ca_file=" + url.QueryEscape(f.CA)
	r := open(t, u)
	if _, err := r.Register(t.Context(), registry.Instance{Service: "svc", Address: "10.0.0.1:80"}, registry.WithTTL(3*time.Second)); err != nil {
		t.Fatalf("Register over TLS: %v", err)
	}
	if sn, err := r.Lookup(t.Context(), "svc"); err != nil || len(sn.Instances) != 1 {
		t.Fatalf("Lookup over TLS: %v %v", sn.Instances, err)
	}
	// A name of the certificate other than the address, verified by the
	// sessions' dialer as by the check at Open.
	if sn, err := open(t, u+"&server_name=zk.test").Lookup(t.Context(), "svc"); err != nil || len(sn.Instances) != 1 {
		t.Fatalf("Lookup with server_name: %v %v", sn.Instances, err)
	}
	_, err := registry.Open(t.Context(), "zk://"+s.SecureAddr()+"/tls?tls=true")
	if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "not signed by a CA") {
		t.Fatalf("Open without the CA = %v, want ErrInvalid naming the CA", err)
	}
}

// TestTLSMisconfigured: on a server that requires client certificates,
// every client-side TLS mistake fails Open with ErrInvalid naming the
// cause; a server whose certificate expired, too.
func TestTLSMisconfigured(t *testing.T) {
	dir := t.TempDir()
	good, bad := testca.WriteWithBad(t, dir, "zk.test")
	s := zktest.StartTLS(t, zktest.TLSFiles{CertFile: good.Cert, KeyFile: good.Key, CAFile: good.CA, ClientAuth: true})
	at := func(addr, opts string) string { return "zk://" + addr + "/tls?tls=true&request_timeout=2s" + opts }
	r := open(t, at(s.SecureAddr(), "&ca_file="+good.CA+"&cert_file="+good.Cert+"&key_file="+good.Key))
	if _, err := r.Register(t.Context(), registry.Instance{Service: "svc", Address: "10.0.0.1:80"}, registry.WithTTL(3*time.Second)); err != nil {
		t.Fatalf("Register over mutual TLS: %v", err)
	}
	for _, c := range testca.Misconfigs(good, bad) {
		t.Run(c.Name, func(t *testing.T) {
			r, err := registry.Open(t.Context(), at(s.SecureAddr(), c.Options))
			if err == nil {
				defer r.Close()
				_, err = r.Lookup(t.Context(), "svc")
			}
			if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), c.Cause) {
				t.Fatalf("Open+Lookup = %v, want ErrInvalid saying %q", err, c.Cause)
			}
		})
	}
	expired := zktest.StartTLS(t, zktest.TLSFiles{CertFile: bad.ExpiredCert, KeyFile: bad.ExpiredKey, CAFile: good.CA})
	if _, err := registry.Open(t.Context(), at(expired.SecureAddr(), "&ca_file="+good.CA)); !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "has expired") {
		t.Fatalf("Open on a server with an expired certificate = %v, want ErrInvalid saying it has expired", err)
	}
}

// TestTLSToThePlainPort: tls=true on the plain client port is ErrInvalid
// at Open saying the server does not speak TLS there — ZooKeeper hangs up
// on a ClientHello as on any bad packet, and answers the clear-text
// four-letter word srvr — not a client retrying forever.
func TestTLSToThePlainPort(t *testing.T) {
	f := testca.Write(t, t.TempDir(), "zk.test")
	s := zktest.StartTLS(t, zktest.TLSFiles{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA})
	_, err := registry.Open(t.Context(), "zk://"+s.Addr()+"/tls?tls=true&request_timeout=2s&ca_file="+url.QueryEscape(f.CA))
	if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "does not speak TLS") {
		t.Fatalf("Open with TLS on the plain port = %v, want ErrInvalid saying it does not speak TLS", err)
	}
}

// TestPlainToTheTLSPort: a plain URL on the secure client port, which
// closes every clear-text connection (the client library retries that
// forever), fails its first call with ErrInvalid saying the port speaks
// TLS only, and the calls after it at once with the same error; on a
// server that requires client certificates too.
func TestPlainToTheTLSPort(t *testing.T) {
	f := testca.Write(t, t.TempDir(), "zk.test")
	for _, clientAuth := range []bool{false, true} {
		s := zktest.StartTLS(t, zktest.TLSFiles{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA, ClientAuth: clientAuth})
		r := open(t, "zk://"+s.SecureAddr()+"/tls?request_timeout=2s")
		_, err := r.Lookup(t.Context(), "svc")
		if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "speaks TLS only") {
			t.Fatalf("client certificates required %v: Lookup = %v, want ErrInvalid saying the port speaks TLS only", clientAuth, err)
		}
		_, err = r.Register(t.Context(), registry.Instance{Service: "svc", Address: "10.0.0.1:80"}, registry.WithTTL(3*time.Second))
		if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "speaks TLS only") {
			t.Fatalf("client certificates required %v: Register = %v, want ErrInvalid saying the port speaks TLS only", clientAuth, err)
		}
	}
}

// TestTLSOptionsParse: the shared TLS options (backend.Query.TLS), refused
// while TLS is off.
func TestTLSOptionsParse(t *testing.T) {
	u, _ := url.Parse("zk://h/r?tls=true&server_name=zk.test&skip_verify=true")
	o, err := zookeeper.ParseURL(u)
	if err != nil || o.TLS == nil || o.TLS.ServerName != "zk.test" || !o.TLS.InsecureSkipVerify {
		t.Fatalf("TLS options: %+v, %v", o.TLS, err)
	}
	for _, opt := range []string{"ca_file=/ca.pem", "server_name=zk", "skip_verify=true", "tls=true&cert_file=/c.pem", "tls=true&ca_file=/nonexistent"} {
		u, _ := url.Parse("zk://h/r?" + opt)
		if _, err := zookeeper.ParseURL(u); !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", opt, err)
		}
	}
}
