package driver

import (
	"crypto/x509"
	"errors"
	"strings"
)

// tlsCauses maps the text of TLS handshake failures that retrying cannot
// fix to the option that fixes them. Text, not types: gRPC (etcd) and
// some HTTP clients flatten the error to a string, and the server's
// rejection of a client certificate arrives as an alert with no exported
// type.
var tlsCauses = []struct{ text, fix string }{
	{"certificate signed by unknown authority", "the server's certificate is not signed by a CA in ca_file (or the system's)"},
	{"certificate has expired or is not yet valid", "the server's certificate has expired or is not yet valid"},
	{"certificate is valid for", "the server's certificate is for another name (check the host or server_name)"},
	{"certificate is not valid for any names", "the server's certificate is for another name (check the host or server_name)"},
	{"doesn't contain any IP SANs", "the server's certificate has no IP address: connect by name or set server_name"},
	{"tls: certificate required", "the server requires a client certificate (cert_file and key_file)"},
	{"tls: expired certificate", "the server refused the client certificate: it has expired (cert_file)"},
	{"tls: unknown certificate authority", "the server refused the client certificate: its CA is not trusted by the server (cert_file)"},
	{"tls: bad certificate", "the server refused the client certificate (cert_file)"},
	{"first record does not look like a TLS handshake", "the server does not speak TLS on this port (use the scheme without TLS, or the TLS port)"},
	{"server gave HTTP response to HTTPS client", "the server does not speak TLS on this port (use the scheme without TLS, or the TLS port)"},
}

// TLSCause recognises a TLS handshake failure that retrying cannot fix —
// the server's certificate is not trusted, has expired or is for another
// name, the server refused the client's certificate or wants one, the
// server does not speak TLS — and returns a sentence naming the cause and
// the option to check, followed by the error's own text. ok is false for
// any other error. Backends wrap such errors in ErrInvalid, so that the
// first call fails with the cause instead of retrying forever.
func TLSCause(err error) (cause string, ok bool) {
	if err == nil {
		return "", false
	}
	msg := err.Error()
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var host x509.HostnameError
	switch {
	case errors.As(err, &unknown):
		return tlsCauses[0].fix + ": " + msg, true
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return tlsCauses[1].fix + ": " + msg, true
	case errors.As(err, &host):
		return tlsCauses[2].fix + ": " + msg, true
	}
	for _, c := range tlsCauses {
		if strings.Contains(msg, c.text) {
			return c.fix + ": " + msg, true
		}
	}
	return "", false
}
