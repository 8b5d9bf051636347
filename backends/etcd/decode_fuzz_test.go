package etcd

import (
	"net/url"
	"testing"

	"github.com/roster-go/roster/internal/urlfuzz"
)

// FuzzParseURL: any etcd URL either gives options or is ErrInvalid;
// none panics.
func FuzzParseURL(f *testing.F) {
	urlfuzz.Fuzz(f, []string{"etcd://u:pw@h1:2379,h2/?prefix=/roster&request_timeout=2s",
		"etcds://h?ca_file=/nonexistent", "etcd://[::1]", "etcd:h:2379", "etcd://u:secrethost:2379"},
		func(u *url.URL) error { _, err := ParseURL(u); return err })
}
