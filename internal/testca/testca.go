// Package testca makes throwaway certificate authorities for tests that
// run real servers over TLS. It makes a CA and certificates it signs, as
// PEM files. They are good for a server and a client on 127.0.0.1 and any
// names given. It also makes the bad cases a TLS test needs, an expired
// certificate and a second, unrelated CA.
package testca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// Files are the paths of the PEM files of one certificate and its CA.
type Files struct {
	CA   string // the CA certificate
	Cert string // the certificate it signed
	Key  string // that certificate's private key
}

// Write makes a CA and a certificate it signs for 127.0.0.1 and names,
// usable by a server and by a client (mutual TLS), valid for an hour, and
// writes them to dir as ca.pem, cert.pem and key.pem.
func Write(t testing.TB, dir string, names ...string) Files {
	t.Helper()
	ca := NewCA(t, dir, "ca")
	cert, key := ca.Issue(t, dir, "", time.Now().Add(time.Hour), names...)
	return Files{CA: ca.File, Cert: cert, Key: key}
}

// CA is a certificate authority that signs certificates on demand.
type CA struct {
	File string // its certificate, PEM
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var serial atomic.Int64

// NewCA makes a CA valid for an hour and writes its certificate to
// dir/name.pem. Two CAs never trust each other's certificates.
func NewCA(t testing.TB, dir, name string) *CA {
	t.Helper()
	now := time.Now()
	key := newKey(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: "roster test " + name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{File: write(t, dir, name+".pem", "CERTIFICATE", der), cert: cert, key: key}
}

// Issue signs a certificate for 127.0.0.1 and names, for servers and
// clients, valid from two hours ago until notAfter (a time in the past
// makes an expired certificate), and writes it to dir as
// <prefix>cert.pem and <prefix>key.pem.
func (ca *CA) Issue(t testing.TB, dir, prefix string, notAfter time.Time, names ...string) (cert, key string) {
	t.Helper()
	k := newKey(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: notAfter,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: names,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &k.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return write(t, dir, prefix+"cert.pem", "CERTIFICATE", der), write(t, dir, prefix+"key.pem", "EC PRIVATE KEY", keyDER)
}

// Bad are the certificates of the failure cases, each of which a client
// must report as a configuration error.
type Bad struct {
	OtherCA     string // a second CA, which signed nothing of the good CA's
	ExpiredCert string // signed by the good CA, expired an hour ago
	ExpiredKey  string
	ForeignCert string // valid, but signed by OtherCA
	ForeignKey  string
}

// WriteWithBad is Write plus the Bad certificates, for the same names.
func WriteWithBad(t testing.TB, dir string, names ...string) (Files, Bad) {
	t.Helper()
	ca := NewCA(t, dir, "ca")
	cert, key := ca.Issue(t, dir, "", time.Now().Add(time.Hour), names...)
	other := NewCA(t, dir, "other-ca")
	b := Bad{OtherCA: other.File}
	b.ExpiredCert, b.ExpiredKey = ca.Issue(t, dir, "expired-", time.Now().Add(-time.Hour), names...)
	b.ForeignCert, b.ForeignKey = other.Issue(t, dir, "foreign-", time.Now().Add(time.Hour), names...)
	return Files{CA: ca.File, Cert: cert, Key: key}, b
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func write(t testing.TB, dir, name, typ string, der []byte) string {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Misconfig is a client-side TLS mistake against a server holding the
// good certificate and requiring client certificates: the URL options
// that make it, and words the client's error must hold.
type Misconfig struct {
	Name    string
	Options string // URL query options, each starting with "&"
	Cause   string
}

// Misconfigs returns the mistakes every backend must report as a
// configuration error naming the cause: a CA that did not sign the
// server's certificate, another server name, and a client certificate
// that is missing, of another CA, or expired.
func Misconfigs(good Files, bad Bad) []Misconfig {
	client := "&cert_file=" + good.Cert + "&key_file=" + good.Key
	withCA := "&ca_file=" + good.CA
	return []Misconfig{
		{"server certificate of another CA", "&ca_file=" + bad.OtherCA + client, "not signed by a CA in ca_file"},
		{"wrong server name", "&server_name=other.test" + withCA + client, "another name"},
		{"no client certificate", withCA, "client certificate"},
		{"client certificate of another CA", withCA + "&cert_file=" + bad.ForeignCert + "&key_file=" + bad.ForeignKey, "client certificate"},
		{"expired client certificate", withCA + "&cert_file=" + bad.ExpiredCert + "&key_file=" + bad.ExpiredKey, "client certificate"},
	}
}
