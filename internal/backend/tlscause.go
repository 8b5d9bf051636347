package backend

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/roster-go/roster/registry/driver"
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
	{"tls: certificate required", "the server requires a client certificate it trusts: none given (cert_file, key_file), or one of a CA it does not name"},
	{"tls: expired certificate", "the server refused the client certificate: it has expired (cert_file)"},
	{"tls: unknown certificate authority", "the server refused the client certificate: its CA is not trusted by the server (cert_file)"},
	{"tls: bad certificate", "the server refused the client certificate (cert_file)"},
	// Java servers (ZooKeeper) send certificate_unknown for a client
	// certificate they cannot validate, an expired one included.
	{"tls: unknown certificate", "the server refused the client certificate: expired, of a CA it does not trust, or otherwise not valid (cert_file)"},
	{"first record does not look like a TLS handshake", "the server does not speak TLS on this port (use the scheme without TLS, or the TLS port)"},
	{"server gave HTTP response to HTTPS client", "the server does not speak TLS on this port (use the scheme without TLS, or the TLS port)"},
	{"sent an HTTP request to an HTTPS server", "the server speaks TLS only on this port (use the backend's TLS scheme, with ca_file)"},
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

// CheckTLS dials addr (host:port) and runs a TLS handshake with cfg, to
// find at once a misconfiguration that a client library would otherwise
// hide behind retries and a timeout (gRPC does). It returns an error
// wrapping ErrInvalid with the TLSCause when the handshake — or the
// server's verdict on the client's certificate, which TLS 1.3 sends just
// after it, so CheckTLS waits up to wait for it — fails for a reason
// retrying cannot cure. Anything else is nil: that is for the client's
// own retries to report. reached is false when addr could not be dialled
// (nothing was checked).
func CheckTLS(ctx context.Context, addr string, cfg *tls.Config, wait time.Duration) (reached bool, err error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false, nil
	}
	defer raw.Close()
	c := cfg.Clone()
	if c.ServerName == "" {
		host, _, _ := net.SplitHostPort(addr)
		c.ServerName = host
	}
	conn := tls.Client(raw, c)
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	err = conn.HandshakeContext(ctx)
	if err == nil {
		_ = conn.SetReadDeadline(time.Now().Add(wait))
		_, err = conn.Read(make([]byte, 1))
	}
	if cause, ok := TLSCause(err); ok {
		return true, fmt.Errorf("%w: TLS to %s: %s", driver.ErrInvalid, addr, cause)
	}
	if err != nil && silentOrClosed(err) && answersPlain(ctx, addr, wait) {
		return true, fmt.Errorf("%w: TLS to %s: %s (%v)", driver.ErrInvalid, addr, notTLS, err)
	}
	return true, nil
}

const notTLS = "the server does not speak TLS on this port (use the scheme without TLS, or the TLS port)"

// CheckPlain is CheckTLS for a client configured without TLS: it finds
// at once a server that speaks only TLS on addr, which a plain client
// sees only as connections closed on it — retried until the timeout.
// It returns an error wrapping ErrInvalid when a TLS handshake with addr
// succeeds, or fails only on the client's lack of a certificate; nil for
// anything else (a plain server, no answer within wait). reached is
// false when addr could not be dialled (nothing was checked).
func CheckPlain(ctx context.Context, addr string, wait time.Duration) (reached bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false, nil
	}
	defer raw.Close()
	// Only the protocol is in question here, not whom to trust.
	conn := tls.Client(raw, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec
	err = conn.HandshakeContext(ctx)
	if err == nil || strings.Contains(err.Error(), "certificate required") || strings.Contains(err.Error(), "bad certificate") {
		return true, fmt.Errorf("%w: %s speaks TLS only: use the backend's TLS scheme (rediss://, etcds://, consuls://) or tls=true, with ca_file", driver.ErrInvalid, addr)
	}
	return true, nil
}

// silentOrClosed reports whether a handshake failed because the server
// said nothing or hung up on the ClientHello — what a plain server does.
func silentOrClosed(err error) bool {
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &ne) && ne.Timeout()
}

// plainProbes make a plain server answer, tried in turn: Redis replies to
// the first with an error (GET has too many arguments, or NOAUTH), an
// HTTP server with a status line (gRPC servers behind etcd's multiplexer
// serve it as HTTP/1); ZooKeeper reads it as a packet length and hangs
// up, but answers the four-letter word srvr (whitelisted by default).
var plainProbes = [][]byte{[]byte("GET / HTTP/1.0\r\n\r\n"), []byte("srvr")}

// answersPlain reports whether the server at addr answers one of
// plainProbes in clear text, within wait each. A TLS record (alert or
// handshake) is not an answer, nor is an HTTPS server's note that a
// plain request reached it.
func answersPlain(ctx context.Context, addr string, wait time.Duration) bool {
	for _, probe := range plainProbes {
		if answers(ctx, addr, probe, wait) {
			return true
		}
	}
	return false
}

func answers(ctx context.Context, addr string, probe []byte, wait time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	dl, _ := ctx.Deadline()
	_ = c.SetDeadline(dl)
	if _, err := c.Write(probe); err != nil {
		return false
	}
	buf := make([]byte, 128)
	n, _ := io.ReadAtLeast(c, buf, 1)
	reply := string(buf[:n])
	return n > 0 && buf[0] != 0x15 && buf[0] != 0x16 && !strings.Contains(reply, "HTTPS")
}
