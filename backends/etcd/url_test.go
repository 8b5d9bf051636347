package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

func parse(t *testing.T, raw string) (Options, error) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("url.Parse(%q): %v", raw, err)
	}
	return ParseURL(u)
}

func TestParseURL(t *testing.T) {
	o, err := parse(t, "etcd://alice:s3cret@h1:2379,h2:2380,h3:2379?prefix=/svc/&dial_timeout=2s&request_timeout=3s&progress_interval=750ms")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"http://h1:2379", "http://h2:2380", "http://h3:2379"}; !slices.Equal(o.Client.Endpoints, want) {
		t.Errorf("endpoints %v, want %v", o.Client.Endpoints, want)
	}
	if o.Client.Username != "alice" || o.Client.Password != "s3cret" {
		t.Errorf("credentials %q/%q", o.Client.Username, o.Client.Password)
	}
	if o.Prefix != "/svc/" || o.Client.DialTimeout != 2*time.Second || o.RequestTimeout != 3*time.Second || o.ProgressInterval != 750*time.Millisecond {
		t.Errorf("options %+v", o)
	}
	if o.Client.TLS != nil {
		t.Errorf("etcd:// set TLS")
	}
	if o, err = parse(t, "etcd://h1,h2"); err != nil || !slices.Equal(o.Client.Endpoints, []string{"http://h1:2379", "http://h2:2379"}) {
		t.Errorf("hosts without ports: %v %v, want port 2379", o.Client.Endpoints, err)
	}

	o, err = parse(t, "etcds://h1:2379?server_name=etcd.local&insecure_skip_verify=true&username=bob&password=pw")
	if err != nil {
		t.Fatal(err)
	}
	if o.Client.Endpoints[0] != "https://h1:2379" || o.Client.TLS == nil || o.Client.TLS.ServerName != "etcd.local" || !o.Client.TLS.InsecureSkipVerify {
		t.Errorf("etcds options %+v", o)
	}
	if o.Client.Username != "bob" || o.Client.Password != "pw" {
		t.Errorf("query credentials %q/%q", o.Client.Username, o.Client.Password)
	}
}

func TestParseURLRejects(t *testing.T) {
	for _, raw := range []string{
		"etcd://",
		"etcd://h1:2379/roster",
		"etcd://h1:2379,,h2:2379",
		"etcd://h1:2379?prefix=/",
		"etcd://h1:2379?dial_timeout=soon",
		"etcd://h1:2379?request_timeout=-1s",
		"etcd://h1:2379?progress_interval=0s",
		"etcd://h1:2379?colour=blue",
		"etcd://h1:2379?ca_file=/ca.pem",
		"etcd://:topsecret@h1:2379",
		"etcds://h1:2379?ca_file=/nonexistent/ca.pem",
		"etcds://h1:2379?cert_file=/c.pem",
		"etcds://h1:2379?insecure_skip_verify=maybe",
		// Intentional change with backend.Query: a repeated option was
		// "last wins" and is an error now.
		"etcd://h1:2379?prefix=/a&prefix=/b",
		"etcd://h1:2379?insecure_skip_verify=true",                   // TLS is off
		"etcds://h1:2379?insecure_skip_verify=true&skip_verify=true", // old and new name
		"etcd://h1:2379?skip_verify=true",
		"etcd://h1:2379?tls=yes",
		"etcd://alice@h1:2379?username=bob",
		"etcd://alice:pw@h1:2379?password=pw2",
		"etcd://h1:2379?username=alice&password=pw&password_file=/pw",
		"etcd://h1:2379?username=alice&password_file=/nonexistent/pw",
		"etcd:h1:2379", // the "//" forgotten
		"etcd://h1:2379#prefix=/roster",
		"consul://h1:8500",
	} {
		_, err := parse(t, raw)
		if !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", raw, err)
		}
	}
}

func TestParseURLTLS(t *testing.T) {
	for raw, skip := range map[string]bool{
		"etcd://h1:2379?tls=true":                     false,
		"etcds://h1:2379?skip_verify=true":            true,
		"etcds://h1:2379?insecure_skip_verify=true":   true, // deprecated alias
		"etcds://h1:2379?insecure_skip_verify=false":  false,
		"etcd://h1:2379?tls=1&server_name=etcd.local": false,
	} {
		o, err := parse(t, raw)
		if err != nil {
			t.Errorf("%s: %v", raw, err)
			continue
		}
		if o.Client.TLS == nil || o.Client.TLS.InsecureSkipVerify != skip || o.Client.Endpoints[0] != "https://h1:2379" {
			t.Errorf("%s: TLS %+v, endpoints %v; want TLS on, skip_verify %v, https", raw, o.Client.TLS, o.Client.Endpoints, skip)
		}
	}
	if o, err := parse(t, "etcds://h1:2379?tls=false"); err != nil || o.Client.TLS != nil || o.Client.Endpoints[0] != "http://h1:2379" {
		t.Errorf("etcds:// with tls=false: %+v %v, want plain TCP", o.Client, err)
	}
}

func TestParseURLPasswordFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(file, []byte("s3cret-0451\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, raw := range []string{
		"etcd://h1:2379?username=alice&password_file=" + url.QueryEscape(file),
		"etcd://alice@h1:2379?password_file=" + url.QueryEscape(file),
	} {
		o, err := parse(t, raw)
		if err != nil || o.Client.Username != "alice" || o.Client.Password != "s3cret-0451" {
			t.Errorf("%s: credentials %q/%q, %v; want alice and the file's password without its newline", raw, o.Client.Username, o.Client.Password, err)
		}
	}
	// The environment of etcdctl is not read (see credentials).
	t.Setenv("ETCDCTL_PASSWORD", "s3cret-0451")
	if o, err := parse(t, "etcd://h1:2379"); err != nil || o.Client.Password != "" {
		t.Errorf("ETCDCTL_PASSWORD set: password %q, %v; want none", o.Client.Password, err)
	}
}

// $ROSTER_ETCD_PASSWORD is the password of a URL that names a user and
// gives no password; it is never read for a URL without a user, nor
// where the URL gives the password.
func TestParseURLPasswordFromEnvironment(t *testing.T) {
	t.Setenv(EnvPassword, "env-s3cret")
	for raw, want := range map[string]string{
		"etcd://alice@h1:2379":                     "env-s3cret",
		"etcd://h1:2379?username=alice":            "env-s3cret",
		"etcd://alice:url-pw@h1:2379":              "url-pw",
		"etcd://h1:2379?username=alice&password=q": "q",
		"etcd://h1:2379":                           "",
	} {
		if o, err := parse(t, raw); err != nil || o.Client.Password != want {
			t.Errorf("%s: password %q, %v; want %q", raw, o.Client.Password, err, want)
		}
	}
}

// TestParseURLErrorsNameTheOption checks what the errors say: the option
// at fault, and never the password.
func TestParseURLErrorsNameTheOption(t *testing.T) {
	for raw, want := range map[string]string{
		"etcd://alice:topsecret@h1:2379?dial_timeout=soon":         `option dial_timeout="soon" is not a positive duration`,
		"etcd://h1:2379?prefix=/a&prefix=/b":                       `option "prefix" given 2 times`,
		"etcd://h1:2379?username=a&password=topsecret&password=x":  `option "password" given 2 times`,
		"etcd://h1:2379?insecure_skip_verify=true":                 `option insecure_skip_verify given but TLS is off`,
		"etcd://alice:topsecret@h1:2379?password_file=/x":          `password given twice`,
		"etcd://h1:2379?colour=blue":                               `unknown option "colour"`,
		"etcds://h1:2379?ca_file=/nonexistent/ca.pem":              `ca_file "/nonexistent/ca.pem"`,
		"etcd://h1:2379?username=alice&password_file=/nonexistent": `option password_file: cannot read "/nonexistent"`,
	} {
		_, err := parse(t, raw)
		if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrInvalid saying %s", raw, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "topsecret") {
			t.Errorf("%s: error reveals the password: %v", raw, err)
		}
	}
}

// TestPublicOptions checks that publicOptions, which urls.Redact may
// show, lists every option ParseURL reads except the password.
func TestPublicOptions(t *testing.T) {
	_, err := parse(t, "etcd://h1:2379?zz_unknown=1")
	_, known, ok := strings.Cut(fmt.Sprint(err), "(known: ")
	if !ok {
		t.Fatalf("error %v lists no known options", err)
	}
	got := strings.Split(strings.TrimSuffix(known, ")"), ", ")
	want := append(slices.Clone(publicOptions), "password")
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("options read by ParseURL %v,\nwant publicOptions and password %v", got, want)
	}
}

func TestOpenErrorsHidePassword(t *testing.T) {
	for _, raw := range []string{
		"etcd://alice:topsecret@h1:2379?colour=blue",
		"etcd://h1:2379?username=alice&password=topsecret&dial_timeout=x",
		"etcds://alice:topsecret@h1:2379?ca_file=/nonexistent",
	} {
		_, err := registry.Open(context.Background(), raw)
		if err == nil {
			t.Fatalf("%s opened", raw)
		}
		if strings.Contains(err.Error(), "topsecret") {
			t.Errorf("error reveals the password: %v", err)
		}
	}
}

func TestOpenByURL(t *testing.T) {
	c := startServer(t)
	r, err := registry.Open(t.Context(), c.URL("/by-url"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var d driver.Driver
	if !r.As(&d) {
		t.Fatal("registry.As failed")
	}
	if ed, ok := d.(*Driver); !ok || ed.prefix != "/by-url" || ed.key("svc", "i1") != "/by-url/svc/i1" {
		t.Fatalf("driver %T %+v", d, d)
	}
	if lim := r.Limits(); lim.MinTTL != 2*time.Second || lim.TTLGranularity != time.Second {
		t.Fatalf("limits %+v", lim)
	}
	l, err := r.Register(t.Context(), registry.Instance{Service: "svc", Address: "127.0.0.1:80"}, registry.WithTTL(2500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if l.TTL() != 3*time.Second {
		t.Errorf("TTL 2.5s became %v, want 3s (whole seconds, rounded up)", l.TTL())
	}
	if _, err := r.Register(t.Context(), registry.Instance{Service: "svc", Address: "127.0.0.1:80"}, registry.WithTTL(time.Second)); !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "2s") {
		t.Errorf("TTL 1s: %v, want ErrInvalid naming the 2s minimum", err)
	}
}

func TestAuthentication(t *testing.T) {
	// etcdtest enables auth with a root user (and cheap password hashing:
	// bcrypt's default cost under -race on a loaded machine outlasts the
	// dial timeout).
	ctx := t.Context()
	c, err := etcdtest.Start(ctx, etcdtest.Config{Dir: t.TempDir(), Auth: &etcdtest.Auth{RootPassword: "rootpw-0451"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	hosts := strings.TrimPrefix(c.URL("/auth"), "etcd://")

	_, err = registry.Open(ctx, "etcd://root:wrong-0451@"+hosts)
	if !errors.Is(err, registry.ErrInvalid) || strings.Contains(err.Error(), "wrong-0451") {
		t.Fatalf("wrong password: %v, want ErrInvalid without the password", err)
	}

	r, err := registry.Open(ctx, "etcd://root:rootpw-0451@"+hosts)
	if err != nil {
		t.Fatalf("right password: %v", err)
	}
	defer r.Close()
	if _, err := r.Register(ctx, registry.Instance{Service: "svc", Address: "127.0.0.1:80"}, registry.WithTTL(3*time.Second)); err != nil {
		t.Fatalf("Register with authentication: %v", err)
	}
	sn, err := r.Lookup(ctx, "svc")
	if err != nil || len(sn.Instances) != 1 {
		t.Fatalf("Lookup with authentication: %v %v", sn.Instances, err)
	}

	// Without credentials the server refuses: an error, not an empty list.
	anon, err := registry.Open(ctx, "etcd://"+hosts)
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if sn, err := anon.Lookup(ctx, "svc"); err == nil {
		t.Fatalf("Lookup without credentials on an auth-enabled server = %v, want an error", sn.Instances)
	}
}

// TestOptionsFormatMasksPassword: logging the options never prints the
// password.
func TestOptionsFormatMasksPassword(t *testing.T) {
	o := Options{Prefix: "/roster"}
	o.Client.Endpoints, o.Client.Username, o.Client.Password = []string{"127.0.0.1:2379"}, "roster", "s3cret-pw"
	for _, s := range []string{fmt.Sprint(o), fmt.Sprintf("%+v", o), fmt.Sprintf("%v", &o)} {
		if strings.Contains(s, "s3cret") || !strings.Contains(s, "/roster") {
			t.Errorf("formatted options %q: password printed or prefix missing", s)
		}
	}
}
