package etcd

import (
	"errors"
	"net/url"
	"testing"

	"github.com/roster-go/roster/registry/driver"
)

// FuzzParseURL: any etcd URL either gives options or is ErrInvalid;
// none panics.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"etcd://u:pw@h1:2379,h2/?prefix=/roster&request_timeout=2s",
		"etcds://h?ca_file=/nonexistent", "etcd://[::1]", "etcd:h:2379", "etcd://u:secrethost:2379"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		if _, err := ParseURL(u); err != nil && !errors.Is(err, driver.ErrInvalid) {
			t.Fatalf("ParseURL(%q) = %v, want ErrInvalid", raw, err)
		}
	})
}
