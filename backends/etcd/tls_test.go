package etcd_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/backends/etcd/etcdtest"
	"github.com/roster-go/roster/registry"
)

// writeCerts makes a CA and a server certificate for 127.0.0.1 signed by
// it, as PEM files in dir.
func writeCerts(t *testing.T, dir string) *etcdtest.TLSFiles {
	t.Helper()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "roster test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &etcdtest.TLSFiles{
		CertFile: write("server.pem", "CERTIFICATE", der),
		KeyFile:  write("server-key.pem", "EC PRIVATE KEY", keyDER),
		CAFile:   write("ca.pem", "CERTIFICATE", caDER),
	}
}

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

	// Without the CA the server's certificate is not trusted.
	hosts := u[len("etcds://"):strings.Index(u, "?")]
	untrusted, err := registry.Open(ctx, "etcds://"+hosts+"?prefix=/tls&request_timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	defer untrusted.Close()
	if _, err := untrusted.Lookup(ctx, "svc"); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("Lookup with an untrusted server certificate = %v, want ErrUnavailable", err)
	}
}
