// Package urls holds the URL schemes that backends register, and prints
// registry URLs without their secrets. Package driver fills the table.
// Package registry and the shared backend helpers read it.
package urls

import (
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
)

var (
	mu      sync.RWMutex
	openers = map[string]any{}
	// public holds the query parameters whose values Redact may show;
	// every other value is masked.
	public = map[string]bool{}
	// nested holds the query parameters whose values are registry URLs
	// (see Nested).
	nested = map[string]bool{}
)

// Nested declares query parameters whose values are registry URLs of
// their own, such as the dual backend's old and new. Redact shows their
// names and each value redacted as a URL. A value that is not a URL of a
// registered scheme is masked whole.
func Nested(names ...string) {
	mu.Lock()
	defer mu.Unlock()
	for _, n := range names {
		nested[n] = true
	}
}

// Add records the opener of a scheme (a driver.OpenFunc). publicOptions
// names the scheme's query parameters whose values are never secret.
// It panics if the scheme is added twice, as database/sql.Register does.
func Add(scheme string, open any, publicOptions ...string) {
	mu.Lock()
	defer mu.Unlock()
	scheme = strings.ToLower(scheme)
	if _, dup := openers[scheme]; dup {
		panic("driver: Register called twice for scheme " + scheme)
	}
	openers[scheme] = open
	for _, o := range publicOptions {
		if !isSensitive(o) {
			public[o] = true
		}
	}
}

// Schemes returns the registered URL schemes, sorted.
func Schemes() []string {
	mu.RLock()
	defer mu.RUnlock()
	return slices.Sorted(maps.Keys(openers))
}

// Opener returns what Add recorded for scheme (case-insensitive).
func Opener(scheme string) (any, bool) {
	mu.RLock()
	defer mu.RUnlock()
	open, ok := openers[strings.ToLower(scheme)]
	return open, ok
}

// sensitive holds fragments of parameter names that hold secrets: such a
// name is never accepted as public, whatever a backend declares.
var sensitive = []string{"tok", "pas", "pwd", "secr", "key", "auth", "cred", "sig"}

const masked = "xxxxx"

// Redact returns rawURL in a form safe to print: its password, the values
// of secret-looking query parameters (token, password, secret, key, auth,
// … and misspellings of them) replaced by "xxxxx". It is safe for every
// input, malformed ones included: the output is rebuilt only from parts
// that cannot hold a secret that slipped out of place through a typo (a
// missing "//", ":" or "@", a mistyped "&" or "="). Whatever does not look
// like what it should be — a host with unexpected characters, a path with
// "@" or ":", a query value holding "=", a name without a password — is
// replaced by a placeholder. A URL that does not parse is reduced to its
// scheme.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		if scheme, _, ok := strings.Cut(rawURL, "://"); ok && safeScheme(scheme) {
			return scheme + "://<unparseable>"
		}
		return "<unparseable URL>"
	}
	if !safeScheme(u.Scheme) {
		return "<URL with an unexpected scheme>"
	}
	if u.Opaque != "" || (u.Host == "" && u.User == nil && strings.ContainsAny(u.Path, "@:")) {
		// "redis:user:secret@host" parses with opaque data, "redis:/:secret@host"
		// as a path: the "//" was forgotten.
		return u.Scheme + ":<opaque>"
	}
	var b strings.Builder
	b.WriteString(u.Scheme + "://")
	b.WriteString(redactUser(u.User))
	b.WriteString(redactHost(u.Host))
	b.WriteString(redactPath(u.EscapedPath()))
	if u.RawQuery != "" || u.ForceQuery {
		b.WriteString("?" + redactQuery(u.RawQuery))
	}
	if u.Fragment != "" {
		b.WriteString("#<fragment>")
	}
	return b.String()
}

func safeScheme(s string) bool {
	return s != "" && len(s) <= 32 && strings.Trim(strings.ToLower(s), "abcdefghijklmnopqrstuvwxyz0123456789+.-") == ""
}

// redactUser keeps a user name only beside a password: a name alone may
// be a password that lost its ":" ("redis://secret@host").
func redactUser(u *url.Userinfo) string {
	if u == nil {
		return ""
	}
	if _, has := u.Password(); has && (u.Username() == "" || plain(u.Username())) {
		return url.PathEscape(u.Username()) + ":" + masked + "@"
	}
	return masked + "@"
}

// redactHost keeps host lists made of host names or addresses with
// numeric ports; anything else may be a password that lost its "@".
func redactHost(h string) string {
	if h == "" {
		return ""
	}
	for _, hp := range strings.Split(h, ",") {
		if !hostPort(hp) {
			return "<host>"
		}
	}
	return h
}

func hostPort(hp string) bool {
	host, port := hp, ""
	if i := strings.LastIndexByte(hp, ':'); i >= 0 && !strings.HasSuffix(hp, "]") {
		host, port = hp[:i], hp[i+1:]
		if port == "" || strings.Trim(port, "0123456789") != "" {
			return false
		}
	}
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		return len(host) > 2 && strings.Trim(strings.ToLower(host[1:len(host)-1]), "0123456789abcdef:.%") == ""
	}
	return host != "" && strings.Trim(strings.ToLower(host), "abcdefghijklmnopqrstuvwxyz0123456789.-_") == ""
}

// redactPath keeps paths made of plain segments (an etcd prefix, a Redis
// database number); "@", ":" or "=" in a path mean something slipped.
func redactPath(p string) string {
	if strings.ContainsAny(p, "@:=;&?#") {
		return "/<path>"
	}
	return p
}

// redactQuery shows the values of the parameters backends declared
// public, unless a value holds "=" or "@" (two parameters run together by
// a typo: "dc=a token=s"); it masks every other value, and hides names
// that are neither public nor a known secret option (a misspelled name
// may hold the secret: "tokens3cret"). A query that does not parse is
// masked whole.
func redactQuery(raw string) string {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return "<query>"
	}
	// Not held through the loop: a nested URL's redaction takes it again.
	mu.RLock()
	public, nested := maps.Clone(public), maps.Clone(nested)
	mu.RUnlock()
	var parts []string
	changed := false
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if nested[k] {
			for _, v := range q[k] {
				parts = append(parts, k+"="+redactNested(v))
			}
			changed = true
			continue
		}
		if !public[k] {
			parts = append(parts, redactName(k)+"="+masked)
			changed = true
			continue
		}
		for _, v := range q[k] {
			if strings.ContainsAny(v, "=@") {
				v, changed = masked, true
			} else {
				v = url.QueryEscape(v)
			}
			parts = append(parts, k+"="+v)
		}
	}
	if !changed {
		return raw // every value public: as written
	}
	return strings.Join(parts, "&")
}

// redactNested redacts the value of a nested URL option: a URL of a
// registered scheme, redacted, with the characters that would end a
// query value escaped; anything else masked.
func redactNested(v string) string {
	u, err := url.Parse(v)
	if err != nil {
		return masked
	}
	if _, known := Opener(u.Scheme); !known {
		return masked
	}
	return nestedEscaper.Replace(Redact(v))
}

var nestedEscaper = strings.NewReplacer("%", "%25", "&", "%26", ";", "%3B", "#", "%23", "+", "%2B", " ", "%20")

// secretNames are the secret options' names that may be shown (so that an
// error still says which option); any other secret-looking name is hidden
// too, since it may hold the value ("tokens3cret" from "token=s3cret").
var secretNames = map[string]bool{
	"token": true, "password": true, "secret": true, "auth": true,
	"acl_token": true, "sentinel_password": true, "token_file": true, "password_file": true,
	"key_file": true, "cert_file": true, "ca_file": true, "tokn": true, "pasword": true, "passwd": true,
}

func redactName(k string) string {
	if secretNames[strings.ToLower(k)] {
		return k
	}
	return "<option>"
}

func isSensitive(s string) bool {
	ls := strings.ToLower(s)
	for _, f := range sensitive {
		if strings.Contains(ls, f) {
			return true
		}
	}
	return false
}

// plain reports whether s is made of lower-case letters, digits and "_",
// as every option name is.
func plain(s string) bool {
	return s != "" && strings.Trim(strings.ToLower(s), "abcdefghijklmnopqrstuvwxyz0123456789_-.") == ""
}

// ShowableName reports whether an option name may be printed: plainly a
// name, and public, a known secret option or not secret-looking.
func ShowableName(k string) bool {
	mu.RLock()
	pub := public[k]
	mu.RUnlock()
	return plain(k) && len(k) <= 32 && (pub || secretNames[k] || !isSensitive(k))
}
