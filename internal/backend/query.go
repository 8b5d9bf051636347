package backend

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/roster-go/roster/internal/readfile"
	"github.com/roster-go/roster/internal/urls"
	"github.com/roster-go/roster/registry/driver"
)

// Query reads the options of a registry URL in the vocabulary every
// backend shares, so that an option means the same thing, is spelled the
// same way and fails the same way on every backend:
//
//   - a parameter given twice is an error, never "first wins" or "last
//     wins";
//   - an unknown parameter is an error that lists the known ones;
//   - TLS is spelled tls, ca_file, cert_file, key_file, server_name and
//     skip_verify everywhere (see TLS);
//   - a secret is given in the URL, in a file (name_file) or in an
//     environment variable, and its value never appears in an error
//     (see Secret);
//   - every error wraps ErrInvalid and names the option (see InvalidURL);
//     only public values (strings, numbers, durations) are quoted.
//
// Read each option with one method call, then call Err once: it returns
// the first error met, or the unknown parameters.
type Query struct {
	backend string
	u       *url.URL
	vals    url.Values
	known   []string
	err     error
}

// ParseQuery starts reading u's options for backend (a name such as
// "redis", for errors). It rejects what no backend accepts: an opaque URL
// ("consul:10.0.0.1:8500", the "//" forgotten — it would silently mean
// localhost), a fragment, a query that does not parse, and a parameter
// given twice.
func ParseQuery(backend string, u *url.URL) (*Query, error) {
	q := &Query{backend: backend, u: u}
	switch {
	case u.Opaque != "":
		return nil, q.fail("the \"//\" is missing (want %s://…)", u.Scheme)
	case u.Fragment != "":
		return nil, q.fail("a URL fragment (#…) has no meaning here")
	}
	vals, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, q.fail("query does not parse (options are name=value pairs joined by &)")
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range vals {
			if !yield(k) {
				return
			}
		}
	}) {
		if n := len(vals[k]); n > 1 {
			return nil, q.fail("option %s given %d times", safeName(k), n)
		}
	}
	q.vals = vals
	return q, nil
}

// ParseSchemeQuery is ParseQuery for a URL whose scheme must be one of
// schemes (compared without case), the first check of every backend's
// ParseURL.
func ParseSchemeQuery(backend string, u *url.URL, schemes ...string) (*Query, error) {
	if !slices.ContainsFunc(schemes, func(s string) bool { return strings.EqualFold(s, u.Scheme) }) {
		return nil, InvalidURL(backend, "scheme %q: want %s", u.Scheme, strings.Join(schemes, " or "))
	}
	return ParseQuery(backend, u)
}

// fail builds an ErrInvalid naming the backend's URL.
func (q *Query) fail(format string, args ...any) error {
	return InvalidURL(q.backend, format, args...)
}

// InvalidURL is the error of a backend's URL that cannot work:
// "registry: invalid argument: redis URL: reason". It does not repeat the
// URL: registry.Open names it once, redacted, in front ("open URL: …").
// The reason must quote only public values, never a secret.
func InvalidURL(backend, format string, args ...any) error {
	return fmt.Errorf("%w: %s URL: %s", driver.ErrInvalid, backend, fmt.Sprintf(format, args...))
}

// take returns the raw value of name and marks name known.
func (q *Query) take(name string) (string, bool) {
	q.known = append(q.known, name)
	vs, ok := q.vals[name]
	if !ok {
		return "", false
	}
	return vs[0], true
}

func (q *Query) setErr(err error) {
	if q.err == nil {
		q.err = err
	}
}

// Has reports whether name was given (and marks it known).
func (q *Query) Has(name string) bool {
	_, ok := q.take(name)
	return ok
}

// String reads a public string option into dst (left alone when absent).
func (q *Query) String(name string, dst *string) {
	if v, ok := q.take(name); ok {
		*dst = v
	}
}

// Enum reads a string option that must be one of allowed.
func (q *Query) Enum(name string, dst *string, allowed ...string) {
	v, ok := q.take(name)
	if !ok {
		return
	}
	if !slices.Contains(allowed, v) {
		q.setErr(q.fail("option %s=%s: want one of %s", name, shown(v), strings.Join(allowed, ", ")))
		return
	}
	*dst = v
}

// Duration reads a positive duration ("500ms", "10s").
func (q *Query) Duration(name string, dst *time.Duration) {
	readPositive(q, name, dst, time.ParseDuration, "duration (such as 500ms or 10s)")
}

// Int reads a positive integer.
func (q *Query) Int(name string, dst *int) {
	readPositive(q, name, dst, strconv.Atoi, "integer")
}

// readPositive reads a number option with parse and wants it above zero;
// kind names what is wanted in the error.
func readPositive[T int | time.Duration](q *Query, name string, dst *T, parse func(string) (T, error), kind string) {
	v, ok := q.take(name)
	if !ok {
		return
	}
	n, err := parse(v)
	if err != nil || n <= 0 {
		q.setErr(q.fail("option %s=%s is not a positive %s", name, shown(v), kind))
		return
	}
	*dst = n
}

// Bool reads true/false (also 1/0).
func (q *Query) Bool(name string, dst *bool) {
	v, ok := q.take(name)
	if !ok {
		return
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		q.setErr(q.fail("option %s=%s: want true or false", name, shown(v)))
		return
	}
	*dst = b
}

// Secret reads a secret into dst, from, in order: the URL option name,
// the file named by the option name_file (its content, trailing newline
// removed), or the environment variable env (when env is not empty).
// Giving both name and name_file is an error. The value never appears in
// an error; a file that cannot be read is named, not quoted.
func (q *Query) Secret(name, env string, dst *string) {
	v, inURL := q.take(name)
	file, inFile := q.take(name + "_file")
	switch {
	case inURL && inFile:
		q.setErr(q.fail("options %s and %s_file both given: choose one", name, name))
	case inURL:
		*dst = v
	case inFile:
		b, err := readFile(file, maxSecretFile)
		if err != nil {
			q.setErr(q.fail("option %s_file: cannot read %s: %v", name, shownPath(file), err))
			return
		}
		*dst = strings.TrimRight(string(b), "\r\n")
	case env != "":
		if ev, ok := os.LookupEnv(env); ok {
			*dst = ev
		}
	}
}

// Bounds of the files options name: a secret is a line, a PEM file a
// few certificates (a full CA bundle is ~200 KB). Beyond them the file is
// not what the option wants — /dev/zero would fill the memory.
const (
	maxSecretFile = 64 << 10
	maxPEMFile    = 4 << 20
)

// readFile reads at most max bytes of path; a longer file is an error.
func readFile(path string, max int64) ([]byte, error) {
	b, err := readfile.AtMost(path, max)
	return b, unwrapPath(err)
}

// unwrapPath drops the *PathError wrapping (which repeats the path).
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// TLS reads the TLS options every backend spells the same way:
//
//	tls          true to use TLS on a scheme without its own TLS form
//	ca_file      PEM file of the CAs that sign the server's certificate
//	cert_file    PEM client certificate (mutual TLS), with key_file
//	key_file     PEM private key of cert_file
//	server_name  name to verify in the server's certificate
//	skip_verify  true: do not verify the server's certificate (tests only)
//
// on is whether the scheme already asks for TLS (rediss://, etcds://,
// consuls://). It returns nil when TLS is off; a TLS option given while
// TLS is off is an error, as are a certificate without its key and files
// that do not load.
func (q *Query) TLS(on bool) *tls.Config {
	q.Bool("tls", &on)
	var ca, cert, key, server string
	var skip bool
	q.String("ca_file", &ca)
	q.String("cert_file", &cert)
	q.String("key_file", &key)
	q.String("server_name", &server)
	q.Bool("skip_verify", &skip)
	if !on {
		if ca != "" || cert != "" || key != "" || server != "" || skip {
			q.setErr(q.fail("TLS options given but TLS is off (use the scheme's TLS form or tls=true)"))
		}
		return nil
	}
	cfg, err := loadTLS(ca, cert, key)
	if err != nil {
		q.setErr(q.fail("%v", err))
		return nil
	}
	cfg.ServerName, cfg.InsecureSkipVerify = server, skip
	return cfg
}

func loadTLS(ca, cert, key string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if (cert == "") != (key == "") {
		return nil, errors.New("cert_file and key_file go together")
	}
	if cert != "" {
		certPEM, err := readFile(cert, maxPEMFile)
		if err != nil {
			return nil, fmt.Errorf("cert_file %q: %v", cert, err)
		}
		keyPEM, err := readFile(key, maxPEMFile)
		if err != nil {
			return nil, fmt.Errorf("key_file %q: %v", key, err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("cert_file %q / key_file %q: %v", cert, key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if ca != "" {
		pem, err := readFile(ca, maxPEMFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file %q: %v", ca, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %q holds no PEM certificate", ca)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// Err returns the first error met while reading, or an error naming the
// parameters no method read (an unknown option, or one misspelled), with
// the list of known ones. Secret-looking unknown names are not echoed:
// the name itself may be a secret that lost its "=".
func (q *Query) Err() error {
	if q.err != nil {
		return q.err
	}
	var unknown []string
	for k := range q.vals {
		switch {
		case slices.Contains(q.known, k):
		case q.vals[k][0] == "":
			// A bare word is more likely the end of a secret cut by an
			// unencoded "&" ("password=hunter&2") than an option.
			unknown = append(unknown, "<option>")
		default:
			unknown = append(unknown, safeName(k))
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	known := slices.Clone(q.known)
	slices.Sort(known)
	return q.fail("unknown option %s (known: %s)", strings.Join(unknown, ", "), strings.Join(slices.Compact(known), ", "))
}

// shown quotes a bad value for an error, unless it may hold a secret that
// a typo ran into it ("wait=5stoken=s3cret": the "&" lost).
func shown(v string) string {
	if strings.ContainsAny(v, "=@&") || len(v) > 64 {
		return "<value hidden>"
	}
	return strconv.Quote(v)
}

// shownPath quotes a secret file's path for an error, unless it holds no
// "/": then it may be the secret itself, given to name_file by mistake
// (password_file=hunter2).
func shownPath(p string) string {
	if !strings.Contains(p, "/") {
		return "<the value, which is not a path>"
	}
	return strconv.Quote(p)
}

// safeName quotes an option name when it is plainly a name and not
// secret-looking, else hides it.
func safeName(k string) string {
	if urls.ShowableName(k) {
		return strconv.Quote(k)
	}
	return "<option>"
}
