package redis_test

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

	goredis "github.com/redis/go-redis/v9"

	rredis "github.com/roster-go/roster/backends/redis"
	"github.com/roster-go/roster/registry"
)

func TestParseURL(t *testing.T) {
	cases := []struct {
		url     string
		addrs   string
		db      int
		cluster bool
		master  string
		tls     bool
		layout  rredis.Layout
		prefix  string
	}{
		{url: "redis://127.0.0.1:6379", addrs: "127.0.0.1:6379", layout: "hash", prefix: "roster"},
		{url: "redis://[::1]", addrs: "[::1]:6379", layout: "hash", prefix: "roster"},
		{url: "redis://[::1]:7000/1", addrs: "[::1]:7000", db: 1, layout: "hash", prefix: "roster"},
		{url: "redis://:pw@h/3?layout=keys", addrs: "h:6379", db: 3, layout: "keys", prefix: "service"},
		{url: "redis://u:pw@h:1/0?layout=keys&prefix=svc&poll=250ms&notify=off", addrs: "h:1", layout: "keys", prefix: "svc"},
		{url: "rediss://h:6380?skip_verify=true", addrs: "h:6380", tls: true, layout: "hash", prefix: "roster"},
		{url: "redis://a:7000,b:7001,c:7002", addrs: "a:7000,b:7001,c:7002", cluster: true, layout: "hash", prefix: "roster"},
		{url: "redis+cluster://a:7000?addr=b:7001", addrs: "a:7000,b:7001", cluster: true, layout: "hash", prefix: "roster"},
		// addr takes a list: a repeated option is an error (it used to add a seed each).
		{url: "redis+cluster://a:7000?addr=b:7001,c", addrs: "a:7000,b:7001,c:6379", cluster: true, layout: "hash", prefix: "roster"},
		{url: "redis://h?tls=true&server_name=redis.internal", addrs: "h:6379", tls: true, layout: "hash", prefix: "roster"},
		{url: "redis+sentinel://:pw@s1,s2:26380/2?master=mymaster&sentinel_password=x", addrs: "s1:26379,s2:26380", db: 2, master: "mymaster", layout: "hash", prefix: "roster"},
		{url: "redis://h?sweep=100ms&quiet=5s&maxlen=50&linger=2m&pool_size=4&dial_timeout=1s&read_timeout=2s&write_timeout=2s&client_name=x", addrs: "h:6379", layout: "hash", prefix: "roster"},
	}
	for _, c := range cases {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		co, o, err := rredis.ParseURL(u)
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		if got := strings.Join(co.Addrs, ","); got != c.addrs || co.DB != c.db || co.IsClusterMode != c.cluster ||
			co.MasterName != c.master || (co.TLSConfig != nil) != c.tls || o.Layout != c.layout || o.Prefix != c.prefix {
			t.Errorf("%s: got addrs %s db %d cluster %v master %q tls %v layout %s prefix %s", c.url, got, co.DB,
				co.IsClusterMode, co.MasterName, co.TLSConfig != nil, o.Layout, o.Prefix)
		}
	}
}

func TestParseURLInvalid(t *testing.T) {
	for _, raw := range []string{
		"redis://:s3cret@h?layout=zset",
		"redis://:s3cret@h?bogus=1",
		"redis://:s3cret@h/x",
		"redis://:s3cret@h:99999",
		"redis+sentinel://:s3cret@h",
		"redis://:s3cret@h?master=m",
		"redis://:s3cret@a:1,b:2/1",
		"redis://:s3cret@h?poll=-1s",
		"redis://:s3cret@h?sweep=soon",
		"redis://:s3cret@h?linger=0s",
		"redis://:s3cret@h?linger=500us",
		"redis://:s3cret@h?linger=169h",
		"redis://:s3cret@h?skip_verify=true",
		"redis://:s3cret@h?prefix=a{b}",
		"redis://:s3cret@h?notify=maybe&layout=keys",
		"redis+raft://:s3cret@h",
		"redis+cluster://:s3cret@a:7000?addr=b:7001&addr=c:7002", // repeated options are refused (they used to add up)
		"redis://:s3cret@h?prefix=a&prefix=b",
		"redis://h?password=s3cret",                   // the URL's password goes in the userinfo
		"redis://h:s3cret",                            // a password that lost its "@"
		"redis://:s3cret@h?ca_file=/ca.pem",           // a TLS option without TLS
		"rediss://:s3cret@h?cert_file=/c.pem",         // a certificate without its key
		"rediss://:s3cret@h?ca_file=/nonexistent.pem", // a CA that does not load
		"redis://:s3cret@h?sentinel_password=s3cret",  // sentinel credentials without Sentinel
		"redis://:s3cret@h?tls=maybe",
		"redis://:s3cret@h?sweep=",
	} {
		_, err := registry.Open(context.Background(), raw)
		if !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("Open(%s) = %v, want ErrInvalid", raw, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%s): error shows the password: %v", raw, err)
		}
	}
}

// An unreachable server is an ErrUnavailable, and its error does not show
// the password either.
func TestUnreachableIsUnavailable(t *testing.T) {
	r, err := registry.Open(context.Background(), "redis://:s3cret@127.0.0.1:1/0?dial_timeout=200ms")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = r.Register(ctx, registry.Instance{Service: "svc", Address: "127.0.0.1:80"})
	if !errors.Is(err, registry.ErrUnavailable) || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("Register on a closed port = %v, want ErrUnavailable without the password", err)
	}
	_, err = r.Lookup(ctx, "svc")
	if !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("Lookup on a closed port = %v, want ErrUnavailable", err)
	}
}

// linger defaults to 5m and is taken from the URL.
func TestParseURLLinger(t *testing.T) {
	for raw, want := range map[string]time.Duration{"redis://h": 5 * time.Minute, "redis://h?linger=2m": 2 * time.Minute} {
		u, _ := url.Parse(raw)
		if _, o, err := rredis.ParseURL(u); err != nil || o.Linger != want {
			t.Errorf("%s: linger %v, %v; want %v", raw, o.Linger, err, want)
		}
	}
}

func parseURL(t *testing.T, raw string) (*goredis.UniversalOptions, rredis.Options, error) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return rredis.ParseURL(u)
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Passwords come from the userinfo, else password_file, else
// $ROSTER_REDIS_PASSWORD; the Sentinels' from sentinel_password,
// sentinel_password_file, else $ROSTER_REDIS_SENTINEL_PASSWORD (read on
// redis+sentinel only: elsewhere it would be an error).
func TestParseURLPasswords(t *testing.T) {
	file := writeFile(t, "from-file\n")
	t.Setenv(rredis.EnvPassword, "from-env")
	t.Setenv(rredis.EnvSentinelPassword, "sentinel-from-env")
	for raw, want := range map[string][2]string{
		"redis://u:from-url@h":                     {"u", "from-url"},
		"redis://u@h?password_file=" + file:        {"u", "from-file"},
		"redis://h":                                {"", "from-env"},
		"redis://u:@h":                             {"u", ""}, // an empty password given is still given
		"redis+sentinel://s?master=m":              {"", "from-env"},
		"redis+sentinel://:from-url@s?master=m":    {"", "from-url"},
		"rediss://h?password_file=" + file:         {"", "from-file"},
		"redis+cluster://u:from-url@a:7000,b:7001": {"u", "from-url"},
	} {
		co, _, err := parseURL(t, raw)
		if err != nil || co.Username != want[0] || co.Password != want[1] {
			t.Errorf("%s: user %q password %q, %v; want %q %q", raw, co.Username, co.Password, err, want[0], want[1])
		}
	}
	for raw, want := range map[string]string{
		"redis+sentinel://s?master=m&sentinel_password=sp":           "sp",
		"redis+sentinel://s?master=m&sentinel_password_file=" + file: "from-file",
		"redis+sentinel://s?master=m":                                "sentinel-from-env",
		"redis://h":                                                  "",
		"redis+cluster://a:7000,b:7001":                              "",
	} {
		co, _, err := parseURL(t, raw)
		if err != nil || co.SentinelPassword != want {
			t.Errorf("%s: sentinel password %q, %v; want %q", raw, co.SentinelPassword, err, want)
		}
	}
}

// A secret given twice, in the wrong place or in a file that cannot be
// read is an error naming the option, never showing the secret.
func TestParseURLPasswordErrors(t *testing.T) {
	file := writeFile(t, "s3cret-in-file")
	for raw, want := range map[string]string{
		"redis://:s3cret@h?password_file=" + file:                                             "password given twice",
		"redis://h?password=s3cret":                                                           "option password",
		"redis://h?password_file=/nonexistent/pw":                                             "password_file",
		"redis+sentinel://s?master=m&sentinel_password=s3cret&sentinel_password_file=" + file: "sentinel_password",
	} {
		_, _, err := parseURL(t, raw)
		if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", raw, err, want)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the error shows the secret: %v", raw, err)
		}
	}
}

// TLS speaks the shared vocabulary: rediss:// or tls=true turns it on,
// ca_file trusts a private CA, cert_file and key_file present a client
// certificate, server_name and skip_verify tune verification.
func TestParseURLTLS(t *testing.T) {
	files := writeCerts(t, t.TempDir())
	co, _, err := parseURL(t, "rediss://h?ca_file="+files.CAFile+"&cert_file="+files.CertFile+"&key_file="+files.KeyFile+"&server_name=redis.internal")
	if err != nil {
		t.Fatal(err)
	}
	c := co.TLSConfig
	if c == nil || c.RootCAs == nil || len(c.Certificates) != 1 || c.ServerName != "redis.internal" || c.InsecureSkipVerify {
		t.Fatalf("TLS config %+v", c)
	}
	for raw, on := range map[string]bool{
		"redis://h": false, "redis://h?tls=false": false, "rediss://h?tls=false": false,
		"redis://h?tls=true": true, "rediss://h?skip_verify=true": true, "redis+cluster://a,b?tls=1": true,
	} {
		co, _, err := parseURL(t, raw)
		if err != nil || (co.TLSConfig != nil) != on {
			t.Errorf("%s: TLS %v, %v; want %v", raw, co.TLSConfig != nil, err, on)
		}
	}
}

// The options Redact may show are exactly the options ParseURL reads,
// less the secrets (and key_file, a name Redact always masks).
func TestPublicOptionsAreTheNonSecretOnes(t *testing.T) {
	_, _, err := parseURL(t, "redis://h?zz=1")
	_, known, ok := strings.Cut(fmt.Sprint(err), "(known: ")
	if !ok {
		t.Fatalf("unknown option error %v does not list the known ones", err)
	}
	secret := []string{"key_file", "password", "password_file", "sentinel_password", "sentinel_password_file"}
	want := slices.Concat(rredis.PublicOptions, secret)
	slices.Sort(want)
	if got := strings.Split(strings.TrimSuffix(known, ")"), ", "); !slices.Equal(got, want) {
		t.Errorf("options read: %v\npublic + secret: %v", got, want)
	}
	u := "redis://h?layout=keys&poll=1s&skip_verify=true&key_file=/k&password_file=/p"
	got := registry.Redact(u)
	for _, want := range []string{"layout=keys", "poll=1s", "skip_verify=true", "key_file=xxxxx", "password_file=xxxxx"} {
		if !strings.Contains(got, want) {
			t.Errorf("Redact(%s) = %s, want %s in it", u, got, want)
		}
	}
}
