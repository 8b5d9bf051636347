package consul_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roster-go/roster/internal/loopback"
	"github.com/roster-go/roster/internal/servers/consultest"
	"github.com/roster-go/roster/internal/testca"
	"github.com/roster-go/roster/registry"
)

// consuls:// reaches an agent serving HTTPS with the URL's CA and server
// name, in the shared spelling and the deprecated one, and refuses an
// agent whose certificate does not match.
func TestTLSAgent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tlsFiles(t, dir)
	port, err := loopback.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	consultest.Start(t, "-hcl", fmt.Sprintf("ports { https = %d }", port), "-hcl", fmt.Sprintf(
		`tls { defaults { ca_file = %q, cert_file = %q, key_file = %q, verify_incoming = false } }`,
		filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")))
	base := fmt.Sprintf("consuls://127.0.0.1:%d?timeout=2s&ca_file=%s", port, filepath.Join(dir, "ca.pem"))
	for _, raw := range []string{base + "&server_name=consul.test", base + "&tls_server_name=consul.test"} {
		r, err := registry.Open(t.Context(), raw)
		if err != nil {
			t.Fatal(err)
		}
		l, err := r.Register(t.Context(), registry.Instance{Service: "tls-svc", Address: "127.0.0.1:80"})
		if err != nil {
			r.Close()
			t.Fatalf("Register over %s: %v", raw, err)
		}
		if sn, err := r.Lookup(t.Context(), "tls-svc"); err != nil || len(sn.Instances) != 1 {
			t.Errorf("Lookup over %s = %v, %v; want the instance", raw, sn.Instances, err)
		}
		if err := l.Deregister(t.Context()); err != nil {
			t.Error(err)
		}
		r.Close()
	}
	r, err := registry.Open(t.Context(), base+"&server_name=other.test")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Lookup(t.Context(), "tls-svc"); !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "another name") {
		t.Errorf("Lookup with the wrong server name = %v, want ErrInvalid on the certificate's name", err)
	}
}

// An agent with verify_incoming lets in only clients with a certificate
// of its CA (mutual TLS); every TLS misconfiguration fails the first call
// with ErrInvalid naming its cause.
func TestMutualTLSAgent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good, bad := testca.WriteWithBad(t, dir, "consul.test")
	port, err := loopback.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	consultest.Start(t, "-hcl", fmt.Sprintf("ports { https = %d }", port), "-hcl", fmt.Sprintf(
		`tls { defaults { ca_file = %q, cert_file = %q, key_file = %q, verify_incoming = true } }`, good.CA, good.Cert, good.Key))
	at := func(opts string) string { return fmt.Sprintf("consuls://127.0.0.1:%d?timeout=2s%s", port, opts) }
	r, err := registry.Open(t.Context(), at("&ca_file="+good.CA+"&cert_file="+good.Cert+"&key_file="+good.Key))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	l, err := r.Register(t.Context(), registry.Instance{Service: "mtls-svc", Address: "127.0.0.1:80"})
	if err != nil {
		t.Fatalf("Register over mutual TLS: %v", err)
	}
	defer l.Deregister(t.Context())
	cases := append(testca.Misconfigs(good, bad), testca.Misconfig{Name: "TLS to the HTTP port", Cause: "does not speak TLS"})
	plain := consultest.Start(t).Addr()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			u := at(c.Options)
			if c.Options == "" {
				u = "consuls://" + plain + "?timeout=2s&ca_file=" + good.CA
			}
			r, err := registry.Open(t.Context(), u)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if _, err := r.Lookup(t.Context(), "mtls-svc"); !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), c.Cause) {
				t.Fatalf("Lookup = %v, want ErrInvalid saying %q", err, c.Cause)
			}
		})
	}
	t.Run("HTTP to the TLS port", func(t *testing.T) {
		r, err := registry.Open(t.Context(), fmt.Sprintf("consul://127.0.0.1:%d?timeout=2s", port))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if _, err := r.Lookup(t.Context(), "mtls-svc"); !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "speaks TLS only") {
			t.Fatalf("Lookup = %v, want ErrInvalid saying the port speaks TLS only", err)
		}
	})
}
