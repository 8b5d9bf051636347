package redis_test

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
	"testing"
	"time"

	"github.com/roster-go/roster/backends/redis/redistest"
	"github.com/roster-go/roster/registry"
)

// writeCerts makes a CA and a certificate for 127.0.0.1 signed by it
// (good for a server and a client), as PEM files in dir.
func writeCerts(t *testing.T, dir string) redistest.TLSFiles {
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
	return redistest.TLSFiles{
		CertFile: write("cert.pem", "CERTIFICATE", der),
		KeyFile:  write("key.pem", "EC PRIVATE KEY", keyDER),
		CAFile:   write("ca.pem", "CERTIFICATE", caDER),
	}
}

// Mutual TLS with a private CA: the server is trusted through ca_file and
// the client is let in by its cert_file and key_file; without either,
// the connection fails.
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
	for name, u := range map[string]string{
		"without a client certificate": base + "&ca_file=" + f.CAFile,
		"without the CA":               base + "&cert_file=" + f.CertFile + "&key_file=" + f.KeyFile,
	} {
		if _, err := open(t, u).Lookup(ctx, "tls"); !errors.Is(err, registry.ErrUnavailable) {
			t.Errorf("Lookup %s = %v, want ErrUnavailable", name, err)
		}
	}
}
