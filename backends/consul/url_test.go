package consul_test

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/roster-go/roster/backends/consul"
	"github.com/roster-go/roster/internal/testca"
	"github.com/roster-go/roster/registry"
)

func parseURL(t *testing.T, raw string) (consul.Options, error) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return consul.ParseURL(u)
}

// TLS is spelled as on every backend; consuls:// or tls=true turns it on,
// and the files are loaded when the URL is parsed.
func TestParseURLTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tlsFiles(t, dir)
	files := "ca_file=" + filepath.Join(dir, "ca.pem") + "&cert_file=" + filepath.Join(dir, "cert.pem") +
		"&key_file=" + filepath.Join(dir, "key.pem")
	o, err := parseURL(t, "consuls://consul.test?"+files+"&server_name=agent")
	if err != nil {
		t.Fatal(err)
	}
	if c := o.TLSConfig; !o.TLS || o.Address != "consul.test:8501" || c.RootCAs == nil || len(c.Certificates) != 1 ||
		c.ServerName != "agent" || c.InsecureSkipVerify {
		t.Errorf("consuls:// with files: %+v, TLS config %+v", o, c)
	}
	o, err = parseURL(t, "consul://consul.test?tls=true&skip_verify=true")
	if err != nil || !o.TLS || o.Address != "consul.test:8501" || !o.TLSConfig.InsecureSkipVerify {
		t.Errorf("consul://…?tls=true&skip_verify=true = %+v, %v; want TLS on port 8501, not verifying", o, err)
	}
	// The spellings of URLs written before the shared vocabulary.
	o, err = parseURL(t, "consuls://h:1?tls_server_name=agent&tls_skip_verify=true")
	if err != nil || o.TLSConfig.ServerName != "agent" || !o.TLSConfig.InsecureSkipVerify {
		t.Errorf("deprecated tls_server_name, tls_skip_verify: %+v, %v", o, err)
	}
	o, err = parseURL(t, "consul://h:1?stale=true")
	if err != nil || o.TLS || o.TLSConfig != nil {
		t.Errorf("plain consul:// = %+v, %v; want no TLS", o, err)
	}
	_, err = parseURL(t, "consuls://h:1?cert_file="+filepath.Join(dir, "cert.pem"))
	if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "key_file") {
		t.Errorf("cert_file without key_file = %v, want ErrInvalid naming key_file", err)
	}
}

// The token comes from the URL, from token_file, or from CONSUL_HTTP_TOKEN
// (CONSUL_HTTP_TOKEN_FILE is left to the Consul client, as before).
func TestParseURLToken(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CONSUL_HTTP_TOKEN", "from-env")
	for raw, want := range map[string]string{
		"consul://h:1?token=from-url":     "from-url",
		"consul://h:1?token_file=" + file: "from-file",
		"consul://h:1":                    "from-env",
	} {
		if o, err := parseURL(t, raw); err != nil || o.Token != want {
			t.Errorf("ParseURL(%s).Token = %q, %v; want %q", raw, o.Token, err, want)
		}
	}
	_, err := parseURL(t, "consul://h:1?token_file="+file+".missing")
	if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "token_file") {
		t.Errorf("a missing token_file = %v, want ErrInvalid naming token_file", err)
	}
}

// publicOptions lists exactly the options that are not secret: every
// option ParseURL knows but the token and the two whose names look secret,
// and Redact shows each of their values.
func TestPublicOptions(t *testing.T) {
	t.Parallel()
	_, err := parseURL(t, "consul://h:1?bogus=1")
	_, known, ok := strings.Cut(err.Error(), "(known: ")
	if !ok {
		t.Fatalf("the unknown-option error lists no known options: %v", err)
	}
	var want []string
	for _, k := range strings.Split(strings.TrimSuffix(known, ")"), ", ") {
		if k != "token" && k != "token_file" && k != "key_file" {
			want = append(want, k)
		}
	}
	got := slices.Sorted(slices.Values(consul.PublicOptions))
	if !slices.Equal(got, want) {
		t.Errorf("publicOptions = %v\nwant the known non-secret options %v", got, want)
	}
	for _, k := range got {
		raw := "consul://h:1?" + k + "=v4lue&token=s3cret"
		if r := registry.Redact(raw); !strings.Contains(r, k+"=v4lue") || strings.Contains(r, "s3cret") {
			t.Errorf("Redact(%s) = %s, want %s shown and the token masked", raw, r, k)
		}
	}
}

// tlsFiles writes a CA and a certificate it signs for 127.0.0.1 and
// "consul.test" into dir: ca.pem, cert.pem, key.pem.
func tlsFiles(t *testing.T, dir string) { testca.Write(t, dir, "consul.test") }

// TestOptionsFormatMasksToken: logging the options never prints the token.
func TestOptionsFormatMasksToken(t *testing.T) {
	o := consul.Options{Address: "127.0.0.1:8500", Token: "s3cret-token"}
	for _, s := range []string{fmt.Sprint(o), fmt.Sprintf("%+v", o), fmt.Sprintf("%v", &o), fmt.Sprintf("%s", o)} {
		if strings.Contains(s, "s3cret") || !strings.Contains(s, "127.0.0.1:8500") {
			t.Errorf("formatted options %q: token printed or address missing", s)
		}
	}
}
