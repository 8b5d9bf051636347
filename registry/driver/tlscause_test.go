package driver

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestTLSCause(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string // "" for not a TLS misconfiguration
	}{
		{fmt.Errorf("dial: %w", x509.UnknownAuthorityError{}), "not signed by a CA in ca_file"},
		{x509.CertificateInvalidError{Reason: x509.Expired}, "has expired"},
		{x509.CertificateInvalidError{Reason: x509.TooManyIntermediates}, ""},
		{x509.HostnameError{Certificate: &x509.Certificate{}, Host: "other.test"}, "another name"},
		{errors.New(`rpc error: code = Unavailable desc = connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`), "not signed"},
		{errors.New("remote error: tls: certificate required"), "requires a client certificate"},
		{errors.New("remote error: tls: bad certificate"), "refused the client certificate"},
		{errors.New("remote error: tls: unknown certificate"), "refused the client certificate"},
		{errors.New("http: server gave HTTP response to HTTPS client"), "does not speak TLS"},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), ""},
		{nil, ""},
	} {
		cause, ok := TLSCause(c.err)
		if ok != (c.want != "") || !strings.Contains(cause, c.want) {
			t.Errorf("TLSCause(%v) = %q, %v; want %q", c.err, cause, ok, c.want)
		}
		if ok && !strings.HasSuffix(cause, c.err.Error()) {
			t.Errorf("TLSCause(%v) = %q: the error's own text is missing", c.err, cause)
		}
	}
}
