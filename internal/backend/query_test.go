package backend_test

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/roster-go/roster/registry/driver"
)

func parse(t *testing.T, raw string) (*backend.Query, error) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return backend.ParseQuery("test", u)
}

func TestQueryRejectsWhatNoBackendAccepts(t *testing.T) {
	for _, raw := range []string{
		"consul:10.99.99.99:8500?token=s3cret", // the "//" forgotten
		"mem:foo",
		"redis://h:1?prefix=a&prefix=b", // repeated
		"redis://h:1?dc=a;token=s3cret", // ";" is not a separator
		"redis://h:1#frag",
	} {
		_, err := parse(t, raw)
		if !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", raw, err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: error shows the secret: %v", raw, err)
		}
	}
}

func TestQueryReadsAndValidates(t *testing.T) {
	q, err := parse(t, "redis://h:1?prefix=svc&wait=5s&n=3&stale=true&layout=keys")
	if err != nil {
		t.Fatal(err)
	}
	var (
		prefix, layout string
		wait           time.Duration
		n              int
		stale          bool
	)
	q.String("prefix", &prefix)
	q.Duration("wait", &wait)
	q.Int("n", &n)
	q.Bool("stale", &stale)
	q.Enum("layout", &layout, "hash", "keys")
	if err := q.Err(); err != nil {
		t.Fatal(err)
	}
	if prefix != "svc" || wait != 5*time.Second || n != 3 || !stale || layout != "keys" {
		t.Errorf("read %q %v %d %v %q", prefix, wait, n, stale, layout)
	}
	for raw, want := range map[string]string{
		"redis://h:1?wait=soon":           `option wait="soon" is not a positive duration`,
		"redis://h:1?wait=-1s":            `option wait="-1s" is not a positive duration`,
		"redis://h:1?n=0":                 `option n="0" is not a positive integer`,
		"redis://h:1?stale=maybe":         `option stale="maybe": want true or false`,
		"redis://h:1?layout=tree":         `option layout="tree": want one of hash, keys`,
		"redis://h:1?wiat=5s":             `unknown option "wiat" (known: layout, n, stale, wait)`,
		"redis://h:1?wait=5stoken=s3cret": `option wait=<value hidden> is not a positive duration`,
		"redis://h:1?tokens3cret&wait=5s": `unknown option <option>`,
	} {
		q, err := parse(t, raw)
		if err != nil {
			t.Fatal(err)
		}
		q.Duration("wait", &wait)
		q.Int("n", &n)
		q.Bool("stale", &stale)
		q.Enum("layout", &layout, "hash", "keys")
		err = q.Err()
		if !errors.Is(err, driver.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want ErrInvalid saying %s", raw, err, want)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: error shows the secret: %v", raw, err)
		}
	}
}

func TestQuerySecretFromURLFileOrEnv(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEST_TOKEN", "from-env")
	for raw, want := range map[string]string{
		"x://h?token=in-url":       "in-url",
		"x://h?token_file=" + file: "from-file",
		"x://h":                    "from-env",
	} {
		q, err := parse(t, raw)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		q.Secret("token", "TEST_TOKEN", &got)
		if err := q.Err(); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", raw, got, err, want)
		}
	}
	q, _ := parse(t, "x://h?token=s3cret&token_file="+file)
	var got string
	q.Secret("token", "", &got)
	if err := q.Err(); !errors.Is(err, driver.ErrInvalid) || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("both token and token_file: %v", err)
	}
	q, _ = parse(t, "x://h?token_file="+filepath.Join(dir, "missing"))
	q.Secret("token", "", &got)
	if err := q.Err(); !errors.Is(err, driver.ErrInvalid) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("unreadable token_file: %v", err)
	}
	// The secret itself given to token_file: no "/", not quoted.
	q, _ = parse(t, "x://h?token_file=s3cret")
	q.Secret("token", "", &got)
	if err := q.Err(); !errors.Is(err, driver.ErrInvalid) || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("token_file holding the token: %v", err)
	}
}

func TestQueryTLS(t *testing.T) {
	q, _ := parse(t, "x://h?ca_file=/ca.pem")
	if cfg := q.TLS(false); cfg != nil || !errors.Is(q.Err(), driver.ErrInvalid) {
		t.Errorf("ca_file without TLS: %v, %v; want an error", cfg, q.Err())
	}
	q, _ = parse(t, "x://h?server_name=reg.internal&skip_verify=true")
	cfg := q.TLS(true)
	if err := q.Err(); err != nil || cfg == nil || cfg.ServerName != "reg.internal" || !cfg.InsecureSkipVerify {
		t.Errorf("TLS on: %+v, %v", cfg, err)
	}
	q, _ = parse(t, "x://h?tls=true&cert_file=/c.pem")
	if q.TLS(false); !errors.Is(q.Err(), driver.ErrInvalid) || !strings.Contains(q.Err().Error(), "go together") {
		t.Errorf("cert without key: %v", q.Err())
	}
	q, _ = parse(t, "x://h?tls=true&ca_file=/nonexistent/ca.pem")
	if q.TLS(false); !errors.Is(q.Err(), driver.ErrInvalid) || !strings.Contains(q.Err().Error(), "/nonexistent/ca.pem") {
		t.Errorf("missing CA file: %v", q.Err())
	}
}

// TestQueryFilesAreBounded: a file option naming an endless or huge file
// (/dev/zero, a log) is an error naming the option and the bound, never
// a read that fills the memory; a pipe holding a secret works.
func TestQueryFilesAreBounded(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, make([]byte, 5<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, raw := range []string{
		"x://h?password_file=/dev/zero",
		"x://h?password_file=" + big,
		"x://h?tls=true&ca_file=/dev/zero",
		"x://h?tls=true&ca_file=" + big,
		"x://h?tls=true&cert_file=/dev/zero&key_file=/dev/zero",
	} {
		q, err := parse(t, raw)
		if err != nil {
			t.Fatal(err)
		}
		var pw string
		q.Secret("password", "", &pw)
		q.TLS(false)
		if err := q.Err(); !errors.Is(err, driver.ErrInvalid) || !strings.Contains(err.Error(), "larger than") {
			t.Errorf("%s: %v, want ErrInvalid saying the file is larger than the bound", raw, err)
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() { w.WriteString("piped-secret\n"); w.Close() }()
	defer r.Close()
	q, _ := parse(t, fmt.Sprintf("x://h?password_file=/dev/fd/%d", r.Fd()))
	var pw string
	q.Secret("password", "", &pw)
	if err := q.Err(); err != nil || pw != "piped-secret" {
		t.Errorf("password_file on a pipe: %q, %v", pw, err)
	}
}
