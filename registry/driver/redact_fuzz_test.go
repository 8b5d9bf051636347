package driver_test

import (
	"strings"
	"testing"

	"github.com/roster-go/roster/registry/driver"
)

// secret is what the fuzzed URLs carry as their password and token.
const secret = "Hunter2Sekr3t"

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

// FuzzRedact: a URL whose password and token are a secret, mistyped in
// one place, never shows the secret once redacted. The corpus in
// testdata/ holds the typos seen in the field ("redis:/:pw@host",
// a forgotten "//", a "&" typed as ";").
func FuzzRedact(f *testing.F) {
	for _, seed := range []struct {
		scheme, user, host, path, query string
		pos                             int
		op, c                           byte
	}{
		{"redis", "", "127.0.0.1:6379", "/0", "layout=keys", 6, 0, '/'},
		{"redis", "", "127.0.0.1:6379", "", "", 7, 0, '/'},
		{"consul", "", "10.99.99.99:8500", "", "dc=eu", 6, 0, '/'},
		{"etcd", "root", "h1:2379,h2:2379", "/roster", "", 12, 1, ':'},
		{"rediss", "app", "h:6380", "/1", "prefix=svc", 30, 1, ';'},
		{"redis+sentinel", "", "h:26379", "", "master=m", 40, 1, '&'},
		{"consul", "", "h:8500", "", "wait=5s", 25, 0, '='},
		{"mem", "", "x", "", "", 3, 0, '/'},
	} {
		f.Add(seed.scheme, seed.user, seed.host, seed.path, seed.query, seed.pos, seed.op, seed.c)
	}
	f.Fuzz(func(t *testing.T, scheme, user, host, path, query string, pos int, op, c byte) {
		for _, part := range []string{scheme, user, host, path, query} {
			if strings.Contains(part, secret[:5]) {
				return // the secret is already part of a non-secret field: nothing to hide
			}
		}
		raw := scheme + "://" + user + ":" + secret + "@" + host + path + "?" + query + "&token=" + secret
		typo := mutate(raw, pos, op, c)
		if got := driver.Redact(typo); strings.Contains(got, secret[:5]) {
			t.Fatalf("Redact(%q) = %q shows the secret", typo, got)
		}
	})
}
