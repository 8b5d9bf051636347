package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/roster-go/roster/registry/driver"
)

func openURL(_ context.Context, u *url.URL) (driver.Driver, error) {
	opts, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	return New(opts)
}

// ParseURL turns an etcd:// or etcds:// URL into Options (see the package
// documentation for the forms). Errors never quote the password.
func ParseURL(u *url.URL) (Options, error) {
	var o Options
	scheme := strings.ToLower(u.Scheme)
	if scheme != Scheme && scheme != SchemeTLS {
		return o, fmt.Errorf("etcd: %w: scheme %q, want %s or %s", driver.ErrInvalid, u.Scheme, Scheme, SchemeTLS)
	}
	if u.Path != "" && u.Path != "/" {
		return o, fmt.Errorf("etcd: %w: URL path %q: set the key prefix with ?prefix=", driver.ErrInvalid, u.Path)
	}
	if u.Host == "" {
		return o, fmt.Errorf("etcd: %w: URL has no host (etcd://host:2379[,host2:2379])", driver.ErrInvalid)
	}
	tlsOn := scheme == SchemeTLS
	httpScheme := "http://"
	if tlsOn {
		httpScheme = "https://"
	}
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return o, fmt.Errorf("etcd: %w: empty host in the endpoint list", driver.ErrInvalid)
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), "2379")
		}
		o.Client.Endpoints = append(o.Client.Endpoints, httpScheme+h)
	}
	if u.User != nil {
		o.Client.Username = u.User.Username()
		o.Client.Password, _ = u.User.Password()
	}
	q := u.Query()
	var (
		caFile, certFile, keyFile, serverName string
		insecure                              bool
	)
	for k, vs := range q {
		v := vs[len(vs)-1]
		var err error
		switch k {
		case "prefix":
			o.Prefix = v
			if strings.TrimRight(v, "/") == "" {
				err = fmt.Errorf("must name a key prefix such as /roster")
			}
		case "dial_timeout":
			o.Client.DialTimeout, err = positiveDuration(v)
		case "request_timeout":
			o.RequestTimeout, err = positiveDuration(v)
		case "progress_interval":
			o.ProgressInterval, err = positiveDuration(v)
		case "username":
			o.Client.Username = v
		case "password":
			o.Client.Password = v
		case "ca_file":
			caFile = v
		case "cert_file":
			certFile = v
		case "key_file":
			keyFile = v
		case "server_name":
			serverName = v
		case "insecure_skip_verify":
			insecure, err = strconv.ParseBool(v)
		default:
			return o, fmt.Errorf("etcd: %w: unknown URL option %q (known: prefix, dial_timeout, request_timeout, progress_interval, username, password, ca_file, cert_file, key_file, server_name, insecure_skip_verify)", driver.ErrInvalid, k)
		}
		if err != nil {
			if k == "password" {
				return o, fmt.Errorf("etcd: %w: URL option password: %v", driver.ErrInvalid, err)
			}
			return o, fmt.Errorf("etcd: %w: URL option %s=%q: %v", driver.ErrInvalid, k, v, err)
		}
	}
	if o.Client.Password != "" && o.Client.Username == "" {
		return o, fmt.Errorf("etcd: %w: a password needs a user name", driver.ErrInvalid)
	}
	if !tlsOn {
		if caFile != "" || certFile != "" || keyFile != "" || serverName != "" || insecure {
			return o, fmt.Errorf("etcd: %w: TLS options need the %s:// scheme", driver.ErrInvalid, SchemeTLS)
		}
		return o, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, InsecureSkipVerify: insecure} //nolint:gosec // opt-in by the URL
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return o, fmt.Errorf("etcd: %w: ca_file: %v", driver.ErrInvalid, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return o, fmt.Errorf("etcd: %w: ca_file %s holds no PEM certificate", driver.ErrInvalid, caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return o, fmt.Errorf("etcd: %w: cert_file and key_file go together", driver.ErrInvalid)
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return o, fmt.Errorf("etcd: %w: client certificate: %v", driver.ErrInvalid, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	o.Client.TLS = cfg
	return o, nil
}

func positiveDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d <= 0 {
		return 0, fmt.Errorf("must be positive")
	}
	return d, nil
}
