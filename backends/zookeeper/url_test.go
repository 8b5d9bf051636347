package zookeeper_test

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/urls"

	"github.com/roster-go/roster/backends/zookeeper"
	"github.com/roster-go/roster/registry/driver"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want zookeeper.Options
	}{
		{"zk://h1:2181", zookeeper.Options{Servers: []string{"h1:2181"}, Root: "/roster"}},
		{"zk://h1,h2:2182/apps/_roster/", zookeeper.Options{Servers: []string{"h1:2181", "h2:2182"}, Root: "/apps/_roster"}},
		{"zk://[::1]/r?session_timeout=4s&request_timeout=2s",
			zookeeper.Options{Servers: []string{"[::1]:2181"}, Root: "/r", SessionTimeout: 4 * time.Second, RequestTimeout: 2 * time.Second}},
		{"ZK://u:p%40ss@h:1/x", zookeeper.Options{Servers: []string{"h:1"}, Root: "/x", User: "u", Password: "p@ss"}},
	} {
		u, _ := url.Parse(tc.in)
		got, err := zookeeper.ParseURL(u)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if !slices.Equal(got.Servers, tc.want.Servers) || got.Root != tc.want.Root || got.User != tc.want.User ||
			got.Password != tc.want.Password || got.SessionTimeout != tc.want.SessionTimeout || got.RequestTimeout != tc.want.RequestTimeout {
			t.Errorf("%s:\n got  %+v\n want %+v", tc.in, got, tc.want)
		}
	}
}

func TestParseURLRejects(t *testing.T) {
	for in, field := range map[string]string{
		"zk://":                       "no host",
		"zk://h1,,h2":                 "empty host",
		"zk://h/a//b":                 "clean",
		"zk://h/a/../b":               "clean",
		"zk://h/zookeeper/x":          "reserves",
		"zk://h?session_timeout=soon": "session_timeout",
		"zk://h?session_timeout=1s&session_timeout=2s": "given 2 times",
		"zk://h?prefix=/x":  "prefix",
		"zk://s3cretuser@h": "both a user and a password",
		"zk://user:@h":      "both a user and a password",
		"zk:h:2181":         "//",
		"etcd://h":          "scheme",
	} {
		u, err := url.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		_, err = zookeeper.ParseURL(u)
		if !errors.Is(err, driver.ErrInvalid) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: got %v, want ErrInvalid naming %q", in, err, field)
		}
	}
}

// TestParseURLNeverPrintsThePassword: whatever else is wrong with a URL,
// its error does not contain the password.
func TestParseURLNeverPrintsThePassword(t *testing.T) {
	for _, in := range []string{"zk://u:hunter2@/x", "zk://u:hunter2@h?bogus=1", "zk://u:hunter2@h/a//b", "zk://u:hunter2@h?session_timeout=x"} {
		u, _ := url.Parse(in)
		_, err := zookeeper.ParseURL(u)
		if err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: %v", in, err)
		}
	}
	// The options are public, so a redacted URL keeps them.
	if got := urls.Redact("zk://u:hunter2@h1:2181,h2:2181/roster?session_timeout=3s"); got != "zk://u:xxxxx@h1:2181,h2:2181/roster?session_timeout=3s" {
		t.Errorf("Redact = %s", got)
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"zk://h:2181/r", "zk://u:pw@h1,h2/r?session_timeout=3s", "zk://h/a//b", "zk:h",
		"zk://u@h/r?password_file=pw", "zk://h/r?tls=true&server_name=zk&skip_verify=true"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		o, err := zookeeper.ParseURL(u)
		if err != nil {
			if !errors.Is(err, driver.ErrInvalid) {
				t.Fatalf("%q: error %v does not wrap ErrInvalid", s, err)
			}
			// A password that also appears elsewhere in the URL or in the
			// error's fixed words may be shown for those.
			pw, ok := u.User.Password()
			rest := s[strings.LastIndexByte(s, '@')+1:]
			if ok && len(pw) >= 6 && !strings.Contains(rest, pw) && strings.Contains(err.Error(), pw) {
				t.Fatalf("%q: error %v shows the password", s, err)
			}
			return
		}
		if len(o.Servers) == 0 || !strings.HasPrefix(o.Root, "/") {
			t.Fatalf("%q parsed to %+v", s, o)
		}
	})
}
