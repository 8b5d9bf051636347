package nats_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	rnats "github.com/roster-go/roster/backends/nats"
	"github.com/roster-go/roster/registry"
)

func parse(t *testing.T, raw string) (rnats.Options, error) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return rnats.ParseURL(u)
}

func TestParseURL(t *testing.T) {
	t.Setenv(rnats.EnvToken, "")
	o, err := parse(t, "nats://alice:s3cret@10.0.0.1,10.0.0.2:4223?bucket=orders&replicas=3&request_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.1:4222", "10.0.0.2:4223"}
	if strings.Join(o.Servers, " ") != strings.Join(want, " ") || o.Bucket != "orders" || o.Replicas != 3 ||
		o.RequestTimeout != 2*time.Second ||
		o.User != "alice" || o.Password != "s3cret" || o.Token != "" || o.TLS != nil {
		t.Errorf("ParseURL = %+v", o)
	}
	o, err = parse(t, "nats+tls://h?token=tok&server_name=nats.internal")
	if err != nil || o.TLS == nil || o.TLS.ServerName != "nats.internal" || o.Token != "tok" {
		t.Errorf("nats+tls URL: %+v, %v; want TLS with server_name and the token", o, err)
	}
}

func TestParseURLTokenFromEnv(t *testing.T) {
	t.Setenv(rnats.EnvToken, "from-env")
	if o, err := parse(t, "nats://h"); err != nil || o.Token != "from-env" {
		t.Errorf("token = %q, %v; want $%s", o.Token, err, rnats.EnvToken)
	}
	if o, err := parse(t, "nats://u:p@h"); err != nil || o.Token != "" {
		t.Errorf("with a user, token = %q, %v; want none", o.Token, err)
	}
}

func TestParseURLRejects(t *testing.T) {
	for _, raw := range []string{
		"nats://h/roster",               // a path
		"nats://u:p@h?token=Hunter2",    // user and token
		"nats://h?tls=false&ca_file=x",  // TLS option, TLS off
		"nats://h?bukket=a",             // unknown option
		"nats://h?replicas=0",           // not positive
		"nats://",                       // no host
		"nats://user:Hunter2host:99999", // "@" forgotten
		"nats:10.0.0.1:4222",            // "//" forgotten
		"redis://h",                     // another scheme
	} {
		_, err := parse(t, raw)
		if !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", raw, err)
		}
		if err != nil && strings.Contains(err.Error(), "Hunter2") {
			t.Errorf("%s: %q shows the secret", raw, err)
		}
	}
}

func TestRedact(t *testing.T) {
	got := registry.Redact("nats://alice:Hunter2@h:4222?bucket=orders&token=Hunter2")
	if strings.Contains(got, "Hunter2") || !strings.Contains(got, "bucket=orders") {
		t.Errorf("Redact = %q, want the secrets masked and the bucket shown", got)
	}
}

// A bucket name NATS cannot hold is refused before any dial.
func TestOpenRejectsBucket(t *testing.T) {
	_, err := registry.Open(t.Context(), "nats://127.0.0.1:1?bucket=a.b")
	if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "bucket") {
		t.Errorf("Open = %v, want ErrInvalid naming the bucket", err)
	}
}
