package testca_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/roster-go/roster/internal/testca"
)

// exampleT stands in for the *testing.T a test passes.
type exampleT struct{ testing.TB }

func (exampleT) Helper()           {}
func (exampleT) Fatal(args ...any) { panic(fmt.Sprint(args...)) }

// A server holding the certificate Write made accepts a client that
// trusts the CA; a client trusting the unrelated CA of WriteWithBad does
// not get through.
func Example() {
	dir, _ := os.MkdirTemp("", "testca-example-")
	defer os.RemoveAll(dir)
	good, bad := testca.WriteWithBad(exampleT{}, dir)

	cert, err := tls.LoadX509KeyPair(good.Cert, good.Key)
	if err != nil {
		fmt.Println(err)
		return
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()

	for _, ca := range []string{good.CA, bad.OtherCA} {
		fmt.Println(dialTrusting(ln.Addr().String(), ca))
	}
	// Output:
	// <nil>
	// tls: failed to verify certificate: x509: certificate signed by unknown authority
}

// dialTrusting completes a TLS handshake with addr, trusting only the CA
// in caFile.
func dialTrusting(addr, caFile string) error {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	c, err := tls.DialWithDialer(&net.Dialer{}, "tcp", addr, &tls.Config{RootCAs: roots})
	if err != nil {
		return err
	}
	return c.Close()
}
