// Package errtext_test checks the error texts of every backend together.
package errtext_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/roster-go/roster/backends/all"
	"github.com/roster-go/roster/internal/liblog"
	"github.com/roster-go/roster/internal/logbuf"
	"github.com/roster-go/roster/registry"
)

// secret is the password, token or key every URL below carries: it must
// appear in no error, no String() and no log line.
const secret = "Hunter2Sekr3t"

// logs receives every slog record of the test binary, debug included
// (the libraries' own log lines go there at debug level).
var logs logbuf.Buffer

func TestMain(m *testing.M) {
	slog.SetDefault(logs.Logger())
	liblog.CaptureProcessLoggers() // as the roster command does: grpc's and client-go's lines too
	code := m.Run()
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, secret) {
			fmt.Fprintf(os.Stderr, "FAIL: the secret is in a log line: %s\n", line)
			code = 1
		}
	}
	os.Exit(code)
}

// sayOnce fails when an error's text repeats itself: "registry:" more
// than once, the URL twice, or one segment ("register s/ID") twice; or
// when it prints the secret.
func sayOnce(t *testing.T, what string, err error, url string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	msg := err.Error()
	t.Logf("%s: %s", what, msg)
	if strings.Contains(msg, secret) {
		t.Errorf("%s: %q prints the secret", what, msg)
	}
	if n := strings.Count(msg, "registry:"); n > 1 {
		t.Errorf("%s: %q says \"registry:\" %d times", what, msg, n)
	}
	if url != "" && strings.Count(msg, url) > 1 {
		t.Errorf("%s: %q names the URL twice", what, msg)
	}
	seen := map[string]bool{}
	for _, seg := range strings.Split(msg, ": ") {
		if seen[seg] && len(seg) > 3 {
			t.Errorf("%s: %q repeats %q", what, msg, seg)
		}
		seen[seg] = true
	}
}

// sayOnceEach is sayOnce for the dual backend, whose errors carry both
// sides' ("old side: …; new side: …"): each side says each layer once.
func sayOnceEach(t *testing.T, what string, err error, url string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	head, sides, ok := strings.Cut(err.Error(), "old side: ")
	if !ok {
		sayOnce(t, what, err, url)
		return
	}
	oldSide, newSide, _ := strings.Cut(sides, "; new side: ")
	for _, part := range []string{head + oldSide, head + newSide} {
		sayOnce(t, what, errors.New(part), url)
	}
}

// deadKubeconfig writes a kubeconfig naming an apiserver that does not
// answer (127.0.0.1:1), with the secret as its bearer token.
func deadKubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	conf := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: dead
  cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: %q}
contexts:
- name: dead
  context: {cluster: dead, user: u, namespace: shop}
current-context: dead
`, secret)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// unreachable is a URL of each scheme naming a server that does not
// answer (127.0.0.1:1), with the secret wherever the scheme takes one and
// short timeouts; readOnly marks dns+srv, whose Register and Services are
// ErrInvalid whatever the server.
type unreachable struct {
	scheme, url string
	readOnly    bool
}

func unreachableURLs(t *testing.T) []unreachable {
	pw := ":" + secret + "@"
	kube := url.QueryEscape(deadKubeconfig(t))
	redis := "redis://" + pw + "127.0.0.1:1?dial_timeout=300ms"
	zk := "zk://u" + pw + "127.0.0.1:1?request_timeout=300ms"
	return []unreachable{
		{scheme: "redis", url: redis},
		{scheme: "rediss", url: "rediss://" + pw + "127.0.0.1:1?dial_timeout=300ms"},
		{scheme: "redis+sentinel", url: "redis+sentinel://" + pw + "127.0.0.1:1?master=m&sentinel_password=" + secret + "&dial_timeout=300ms"},
		{scheme: "redis+cluster", url: "redis+cluster://" + pw + "127.0.0.1:1?dial_timeout=300ms"},
		{scheme: "consul", url: "consul://127.0.0.1:1?token=" + secret + "&timeout=300ms"},
		{scheme: "consuls", url: "consuls://127.0.0.1:1?token=" + secret + "&timeout=300ms"},
		{scheme: "etcd", url: "etcd://127.0.0.1:1?dial_timeout=300ms&request_timeout=300ms"},
		{scheme: "etcds", url: "etcds://127.0.0.1:1?dial_timeout=300ms&request_timeout=300ms"},
		{scheme: "zk", url: zk},
		{scheme: "k8s", url: "k8s://?kubeconfig=" + kube + "&request_timeout=300ms"},
		{scheme: "dns+srv", url: "dns+srv://127.0.0.1:1/{service}.example?timeout=300ms", readOnly: true},
		{scheme: "nats", url: "nats://u" + pw + "127.0.0.1:1?request_timeout=300ms"},
		{scheme: "nats+tls", url: "nats+tls://127.0.0.1:1?token=" + secret + "&request_timeout=300ms"},
		{scheme: "dual", url: "dual://?old=" + url.QueryEscape(redis) + "&new=" + url.QueryEscape(zk)},
	}
}

// Every backend's errors carry one prefix per layer and match the right
// sentinel, for a bad URL and for each operation on an unreachable
// server; none prints the secret, nor does the Registry's String().
func TestErrorTextSaysItOnce(t *testing.T) {
	for _, c := range unreachableURLs(t) {
		t.Run(c.scheme, func(t *testing.T) {
			t.Parallel()
			check := sayOnce
			if c.scheme == "dual" {
				check = sayOnceEach
			}
			shown := registry.Redact(c.url)
			bad := c.url + "&no_such_option=1"
			_, err := registry.Open(t.Context(), bad)
			if !errors.Is(err, registry.ErrInvalid) {
				t.Fatalf("Open(%s) = %v, want ErrInvalid", registry.Redact(bad), err)
			}
			check(t, "Open with an unknown option", err, registry.Redact(bad))
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			r, err := registry.Open(ctx, c.url)
			if err != nil {
				t.Fatalf("Open(%s) = %v: the client connects lazily", shown, err)
			}
			defer r.Close()
			if strings.Contains(r.String(), secret) {
				t.Errorf("String() = %q", r.String())
			}
			operate(ctx, t, r, c, shown, check)
		})
	}
}

// operate runs each operation against the unreachable server of c and
// checks its error.
func operate(ctx context.Context, t *testing.T, r *registry.Registry, c unreachable, shown string,
	check func(*testing.T, string, error, string)) {
	t.Helper()
	want := func(what string, err, sentinel error) {
		t.Helper()
		if !errors.Is(err, sentinel) {
			t.Errorf("%s = %v, want %v", what, err, sentinel)
		}
		check(t, what, err, shown)
	}
	writeErr := registry.ErrUnavailable
	if c.readOnly {
		writeErr = registry.ErrInvalid
	}
	_, err := r.Register(ctx, registry.Instance{ID: "i-1", Service: "s", Address: "127.0.0.1:2"})
	want("Register", err, writeErr)
	_, err = r.Lookup(ctx, "s")
	want("Lookup", err, registry.ErrUnavailable)
	_, err = r.Services(ctx)
	want("Services", err, writeErr)
	w, err := r.Watch(ctx, "s")
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer w.Close()
	snap, err := w.Next(ctx)
	if !snap.Stale {
		t.Errorf("Watch: first state %+v is not stale", snap)
	}
	want("Watch", err, registry.ErrUnavailable)
}

// schemes are every registered scheme the tests cover.
var schemes = []string{"redis", "rediss", "redis+sentinel", "redis+cluster", "consul", "consuls",
	"etcd", "etcds", "zk", "k8s", "dns+srv", "nats", "nats+tls", "dual", "mem"}

// countingListener counts the connections made to it.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func listen(t *testing.T) *countingListener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: l}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			cl.n.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close() })
	return cl
}

// An opaque URL (the "//" forgotten) is ErrInvalid on every scheme, and
// nothing is dialled: "consul:10.0.0.1:8500" once sent its token to
// 127.0.0.1:8500.
func TestOpaqueURLRejected(t *testing.T) {
	l := listen(t)
	for _, s := range schemes {
		for _, u := range []string{
			s + ":" + l.Addr().String(),
			s + ":u:" + secret + "@" + l.Addr().String(),
			s + ":" + l.Addr().String() + "?token=" + secret + "&password=" + secret,
			// Nested in a dual URL, beside a side that would dial at once
			// (etcd checks credentials when opened).
			"dual://?old=" + url.QueryEscape("etcd://u:"+secret+"@"+l.Addr().String()) +
				"&new=" + url.QueryEscape(s+":"+l.Addr().String()),
		} {
			r, err := registry.Open(t.Context(), u)
			if r != nil {
				r.Close()
			}
			if !errors.Is(err, registry.ErrInvalid) {
				t.Errorf("Open(%s) = %v, want ErrInvalid", registry.Redact(u), err)
				continue
			}
			sayOnce(t, s, err, "")
			if !strings.Contains(err.Error(), `"//" is missing`) {
				t.Errorf("Open(%s) = %v: does not say the \"//\" is missing", registry.Redact(u), err)
			}
		}
	}
	if n := l.n.Load(); n != 0 {
		t.Errorf("%d connections to the server named by an opaque URL", n)
	}
}

// typos are the mistakes of a careless user, each with the secret in it.
func typos(scheme, host string) []string {
	s := scheme
	return []string{
		s + ":/user:" + secret + "@" + host,           // one "/" forgotten
		s + ":/:" + secret + "@" + host,               //
		s + ":///",                                    // no host at all
		s + "://user:" + secret + "@",                 // no host after the credentials
		s + "://user:" + secret + "@/",                //
		s + "://:" + secret + "@" + host,              // a password without a user
		s + "://" + secret + "@" + host,               // the ":" forgotten
		s + "://user:" + secret + host,                // the "@" forgotten
		s + "://user:" + secret + "%@" + host,         // a broken %-escape
		s + "://user:" + secret + "@" + host + "/%zz", //
		s + "://user:%zz" + secret + "@" + host,       //
		s + "://" + host + "?token=" + secret + ";dc=x",
		s + "://" + host + "?password=" + secret + "&" + secret, // an unencoded "&" in the password
		s + "://" + host + "?sentinel_password=" + secret + "&master=m",
		s + "://" + host + "?tokn=" + secret,
		s + "://" + host + "?password_file=" + secret, // the secret given to its _file option
		s + "://" + host + "?token_file=" + secret,
		s + "://" + host + "?dc=eutoken=" + secret,
		s + "://" + host + "#" + secret,
	}
}

// dualTypos nest typos (and dual URLs) in a dual URL, encoded or not.
func dualTypos(host string) []string {
	good := "zk://" + host
	var out []string
	for _, typo := range append(typos("redis", host),
		"redis://:"+secret+"@"+host+"?password_file=/x&sentinel_password="+secret,
		"dual://?old=redis://:"+secret+"@"+host+"&new=zk://"+host) {
		out = append(out,
			"dual://?old="+url.QueryEscape(typo)+"&new="+good,
			"dual://?old="+typo+"&new="+good,
			"dual://?new="+good+"&old="+typo,
			"dual://?old="+good+"&new=dual://?old="+url.QueryEscape(typo)+"%26new="+good)
	}
	return out
}

// No typo prints the secret: not in Open's error, not in Redact, not in
// the Registry's String() when it opens, not in a log line (TestMain).
// Nothing is written: a URL that opens registers nothing here.
func TestTyposNeverPrintTheSecret(t *testing.T) {
	l := listen(t)
	host := l.Addr().String()
	var urls []string
	for _, s := range schemes {
		urls = append(urls, typos(s, host)...)
	}
	urls = append(urls, dualTypos(host)...)
	for _, u := range urls {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		r, err := registry.Open(ctx, u)
		cancel()
		if got := registry.Redact(u); strings.Contains(got, secret) {
			t.Errorf("Redact(%q) = %q", u, got)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("Open(%q) = %v", u, err)
		}
		if r != nil {
			if strings.Contains(r.String(), secret) {
				t.Errorf("Open(%q).String() = %q", u, r.String())
			}
			r.Close()
		}
	}
}

// The client libraries' own lines about the unreachable servers reach
// slog at debug level (TestMain's logger), named, and none reaches
// stderr (the CLI's tests check that). grpc's and client-go's do once
// liblog.CaptureProcessLoggers routed them, as the roster command does.
func TestLibraryLinesGoToSlogDebug(t *testing.T) {
	urls := map[string]string{}
	for _, c := range unreachableURLs(t) {
		urls[c.scheme] = c.url
	}
	for scheme, lib := range map[string]string{
		"redis": "go-redis: ", "zk": "go-zookeeper: ", "etcd": "etcd-client: ", "etcds": "grpc: ", "k8s": "client-go: ",
	} {
		t.Run(scheme, func(t *testing.T) {
			t.Parallel()
			r, err := registry.Open(t.Context(), urls[scheme])
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			w, err := r.Watch(ctx, "s")
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			for ctx.Err() == nil && !strings.Contains(logs.String(), "level=DEBUG msg=\""+lib) {
				if _, err := r.Lookup(ctx, "s"); err == nil {
					t.Fatal("Lookup of an unreachable server succeeded")
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("no debug line from %s in 20s", lib)
			}
		})
	}
}
