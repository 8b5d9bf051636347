package urls_test

import (
	"strings"
	"testing"

	"github.com/roster-go/roster/internal/urls"
)

func init() {
	// The options a backend would declare public.
	urls.AddPublicOptions("dc", "prefix", "master")
}

func TestRedact(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"redis://:s3cret@10.0.0.1:6379/0", "redis://:xxxxx@10.0.0.1:6379/0"},
		{"redis://user:s3cret@h:1", "redis://user:xxxxx@h:1"},
		{"consul://h:8500?token=s3cret&dc=eu", "consul://h:8500?dc=eu&token=xxxxx"},
		{"etcd://h:2379?prefix=/r&password=s3cret", "etcd://h:2379?password=xxxxx&prefix=%2Fr"},
		{"x://h?acl_token=s3cret", "x://h?acl_token=xxxxx"},
		{"x://h?layuot=s3cret&dc=eu", "x://h?dc=eu&<option>=xxxxx"}, // unknown: not shown
		{"consul://h:8500?dc=eu&tokens3cret", "consul://h:8500?dc=eu&<option>=xxxxx"},
		{"consul://h:8500?dc=eutoken=s3cret", "consul://h:8500?dc=xxxxx"},
		{"redis:/:s3cret@127.0.0.1:6379", "redis:<opaque>"},
		{"consul:10.99.99.99:8500?token=s3cret", "consul:<opaque>"},
		{"redis://s3cret@h:6379", "redis://xxxxx@h:6379"},
		{"consul://h:8500token=s3cret", "consul://<unparseable>"},
		{"etcd://h1:2379,h2:2379?prefix=/roster", "etcd://h1:2379,h2:2379?prefix=/roster"},
		{"mem://demo", "mem://demo"},
		{"consul://h:8500?tokn=s3cret", "consul://h:8500?tokn=xxxxx"},
		{"redis+sentinel://h:26379?master=m&sentinel_pasword=s3cret", "redis+sentinel://h:26379?master=m&<option>=xxxxx"},
		{"etcds://h:2379?key_file=/k.pem&prefix=/r", "etcds://h:2379?key_file=xxxxx&prefix=%2Fr"},
	} {
		if got := urls.Redact(c.in); got != c.want {
			t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	for _, bad := range []string{"redis://u:s3cret@h:1/%zz", "redis://u:s3cret@[::1", "::s3cret"} {
		if got := urls.Redact(bad); strings.Contains(got, "s3cret") {
			t.Errorf("Redact(%q) = %q leaks the secret", bad, got)
		}
	}
}
