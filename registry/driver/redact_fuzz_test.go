package driver_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/roster-go/roster/registry/driver"
)

// secret is what the fuzzed URLs carry as their password and token.
const secret = "Hunter2Sekr3t"

// allSchemes are the schemes of the backends in this repository.
var allSchemes = []string{"redis", "rediss", "redis+sentinel", "redis+cluster", "consul", "consuls",
	"etcd", "etcds", "zk", "k8s", "dns+srv", "dual", "mem"}

func init() {
	// The schemes, so that Redact follows dual's nested URLs as it does
	// with the backends imported; the openers are never called here.
	for _, s := range allSchemes {
		driver.Register(s, func(context.Context, *url.URL) (driver.Driver, error) { return nil, driver.ErrInvalid })
	}
	driver.NestedURLOptions("old", "new")
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
		for _, part := range []string{scheme, user, host, path, query} {
			if strings.Contains(part, secret[:5]) {
				return // the secret is already part of a non-secret field: nothing to hide
			}
		}
		raw := urlForm(form, scheme, user, host, path, query)
		if !strings.Contains(raw, secret) {
			t.Fatalf("form %d: %q holds no secret", form, raw)
		}
		typo := mutate(raw, pos, op, c)
		if got := driver.Redact(typo); strings.Contains(got, secret[:5]) {
			t.Fatalf("Redact(%q) = %q shows the secret", typo, got)
		}
	})
}
