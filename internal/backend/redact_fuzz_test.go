package backend_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/backend"
	"github.com/roster-go/roster/internal/urls"

	"github.com/roster-go/roster/registry/driver"
)

// secret is what the fuzzed URLs carry as their password and token.
const secret = "Hunter2Sekr3t"

// leaks reports whether s shows the secret or any 5 bytes of it in a row
// (the tail of a password cut by a typo is a leak too).
func leaks(s string) bool {
	for i := 0; i+5 <= len(secret); i++ {
		if strings.Contains(s, secret[i:i+5]) {
			return true
		}
	}
	return false
}

// allSchemes are the schemes of the backends in this repository.
var allSchemes = []string{"redis", "rediss", "redis+sentinel", "redis+cluster", "consul", "consuls",
	"etcd", "etcds", "zk", "k8s", "dns+srv", "dual", "mem"}

func init() {
	// The schemes, so that Redact follows dual's nested URLs as it does
	// with the backends imported; the openers are never called here.
	for _, s := range allSchemes {
		driver.Register(s, func(context.Context, *url.URL) (driver.Driver, error) { return nil, driver.ErrInvalid })
	}
	urls.Nested("old", "new")
}

// mutate applies one typo to s at pos: op 0 deletes the byte there, 1
// replaces it with c, 2 inserts c before it.
func mutate(s string, pos int, op, c byte) string {
	if s == "" {
		return s
	}
	pos = ((pos % len(s)) + len(s)) % len(s)
	switch op % 3 {
	case 0:
		return s[:pos] + s[pos+1:]
	case 1:
		return s[:pos] + string(c) + s[pos+1:]
	}
	return s[:pos] + string(c) + s[pos:]
}

// urlForm builds a URL of the given form that holds the secret: in the
// user part and a token, in a query option (password, sentinel_password,
// token), or in a URL nested in a dual URL, encoded or not, or in a dual
// URL nested in another.
func urlForm(form byte, scheme, user, host, path, query string) string {
	plain := scheme + "://" + user + ":" + secret + "@" + host + path + "?" + query + "&token=" + secret
	nested := "zk://" + host
	switch form % 7 {
	case 1:
		return scheme + "://" + host + path + "?" + query + "&password=" + secret
	case 2:
		return scheme + "://" + user + "@" + host + path + "?sentinel_password=" + secret + "&" + query
	case 3:
		return "dual://?old=" + url.QueryEscape(plain) + "&new=" + nested + "&" + query
	case 4:
		return "dual://?" + query + "&old=" + plain + "&new=" + nested
	case 5:
		inner := "dual://?old=" + url.QueryEscape(plain) + "&new=" + nested
		return "dual://?old=" + nested + "&new=" + url.QueryEscape(inner)
	case 6:
		return "dual://?new=" + nested + "&old=" + scheme + ":/" + user + ":" + secret + "@" + host + path + "?" + query
	}
	return plain
}

// typoURL is the fuzzed URL: the form's URL holding the secret, with one
// typo. ok is false when the secret is already part of a non-secret
// field: there is nothing to hide then.
func typoURL(t *testing.T, scheme, user, host, path, query string, pos int, op, c, form byte) (typo string, ok bool) {
	for _, part := range []string{scheme, user, host, path, query} {
		if leaks(part) {
			return "", false
		}
	}
	raw := urlForm(form, scheme, user, host, path, query)
	if !strings.Contains(raw, secret) {
		t.Fatalf("form %d: %q holds no secret", form, raw)
	}
	return mutate(raw, pos, op, c), true
}

// FuzzRedact: a URL holding a secret — in its user part, a query option
// or a URL nested in a dual URL (see urlForm) — mistyped in one place,
// never shows the secret once redacted. The corpus in testdata/ holds
// the typos seen in the field ("redis:/:pw@host", a forgotten "//", a
// "&" typed as ";") on every scheme.
func FuzzRedact(f *testing.F) {
	for i, s := range allSchemes {
		f.Add(s, "app", "127.0.0.1:2", "/0", "prefix=svc", 5+i*3, byte(i), byte('/'), byte(i))
	}
	f.Fuzz(func(t *testing.T, scheme, user, host, path, query string, pos int, op, c, form byte) {
		typo, ok := typoURL(t, scheme, user, host, path, query, pos, op, c, form)
		if !ok {
			return
		}
		if got := urls.Redact(typo); leaks(got) {
			t.Fatalf("Redact(%q) = %q shows the secret", typo, got)
		}
	})
}

// FuzzQueryErrors: the same mistyped URLs, read with the shared option
// parser as a backend would, never show the secret in the error (an
// unknown option that is the tail of a password cut by an unencoded "&",
// a value that swallowed the next option…). The seeds are FuzzRedact's
// forms on every scheme.
func FuzzQueryErrors(f *testing.F) {
	for i, s := range allSchemes {
		f.Add(s, "app", "127.0.0.1:2", "", "wait=5s", 5+i*3, byte(i), byte('&'), byte(i))
	}
	f.Fuzz(func(t *testing.T, scheme, user, host, path, query string, pos int, op, c, form byte) {
		typo, ok := typoURL(t, scheme, user, host, path, query, pos, op, c, form)
		if !ok {
			return
		}
		u, err := url.Parse(typo)
		if err != nil {
			return // registry.Open says "malformed", with the URL redacted
		}
		if err := readOptions(u); err != nil && leaks(err.Error()) {
			t.Fatalf("options of %q: %v shows the secret", typo, err)
		}
	})
}

// readOptions reads u's options as the backends do, with one option of
// each kind.
func readOptions(u *url.URL) error {
	q, err := backend.ParseQuery("x", u)
	if err != nil {
		return err
	}
	var s string
	var d time.Duration
	var n int
	var b bool
	for _, name := range []string{"dc", "prefix", "master", "old", "new"} {
		q.String(name, &s)
	}
	for _, name := range []string{"password", "token", "sentinel_password"} {
		q.Secret(name, "", &s)
	}
	q.Duration("wait", &d)
	q.Int("pool_size", &n)
	q.Bool("tls", &b)
	q.Enum("layout", &s, "hash", "keys")
	return q.Err()
}
