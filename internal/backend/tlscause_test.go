package backend

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/registry/driver"
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
		{errors.New("Unexpected response code: 400 (Client sent an HTTP request to an HTTPS server.)"), "speaks TLS only"},
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

// TestPortMixups: TLS to a plain port and plain to a TLS port are found
// by one probe, whatever the plain server does with a ClientHello: waits
// for a line (Redis), or answers HTTP (etcd's multiplexer, Consul).
func TestPortMixups(t *testing.T) {
	redisLike := listen(t, func(c net.Conn) {
		line, err := bufio.NewReader(c).ReadString('\n') // a ClientHello has no newline: it waits
		if err == nil && strings.HasPrefix(line, "GET ") {
			c.Write([]byte("-ERR wrong number of arguments for 'get' command\r\n"))
		}
	})
	hungUp := listen(t, func(c net.Conn) {}) // closes on anything
	httpsSrv := httptest.NewUnstartedServer(http.NotFoundHandler())
	httpsSrv.Config.ErrorLog = log.New(io.Discard, "", 0) // the probes' failed handshakes are expected
	httpsSrv.StartTLS()
	defer httpsSrv.Close()
	httpSrv := httptest.NewServer(http.NotFoundHandler())
	defer httpSrv.Close()
	tlsAddr, plainAddr := strings.TrimPrefix(httpsSrv.URL, "https://"), strings.TrimPrefix(httpSrv.URL, "http://")
	skip := &tls.Config{InsecureSkipVerify: true}

	for _, c := range []struct {
		name, addr string
		want       string // "" for no error
	}{
		{"TLS to a server waiting for a line", redisLike, "does not speak TLS"},
		{"TLS to an HTTP server", plainAddr, "does not speak TLS"},
		{"TLS to a server that hangs up", hungUp, ""}, // no answer either way: inconclusive
		{"TLS to a TLS server", tlsAddr, ""},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := CheckTLS(ctx, c.addr, skip, 200*time.Millisecond)
		cancel()
		if (c.want == "") != (err == nil) || err != nil && (!errors.Is(err, driver.ErrInvalid) || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("CheckTLS, %s: %v, want %q", c.name, err, c.want)
		}
	}
	for _, c := range []struct {
		name, addr string
		tls        bool
	}{
		{"plain to a TLS server", tlsAddr, true},
		{"plain to an HTTP server", plainAddr, false},
		{"plain to a server waiting for a line", redisLike, false},
		{"plain to nothing", "127.0.0.1:1", false},
	} {
		_, err := CheckPlain(context.Background(), c.addr, 500*time.Millisecond)
		if c.tls != (err != nil) || err != nil && (!errors.Is(err, driver.ErrInvalid) || !strings.Contains(err.Error(), "speaks TLS only")) {
			t.Errorf("CheckPlain, %s: %v, want an error: %v", c.name, err, c.tls)
		}
	}
}

// listen serves each connection with serve on a loopback port, closing it after.
func listen(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); serve(c) }()
		}
	}()
	return l.Addr().String()
}
