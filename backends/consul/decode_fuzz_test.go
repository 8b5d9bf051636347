package consul

import (
	"net/url"
	"testing"

	"github.com/roster-go/roster/internal/urlfuzz"
	"github.com/roster-go/roster/registry/driver"
)

// FuzzDecodeFields: the roster_fields Meta value of a catalog entry, which
// anyone with service:write can set, never panics the reader; a value it
// accepts is one encodeFields writes, field for field.
func FuzzDecodeFields(f *testing.F) {
	f.Add(encodeFields(driver.Instance{Weight: 100, Version: "1.2", Zone: "hz-1"}))
	f.Add("4294967296,0,")
	f.Add("1,-1,x")
	f.Add("1,99,short")
	f.Fuzz(func(t *testing.T, s string) {
		w, version, zone, ok := decodeFields(s)
		if !ok {
			return
		}
		if again := encodeFields(driver.Instance{Weight: w, Version: version, Zone: zone}); again != s {
			if w2, v2, z2, _ := decodeFields(again); w2 != w || v2 != version || z2 != zone {
				t.Fatalf("decodeFields(%q) = %d %q %q, which does not encode back (%q)", s, w, version, zone, again)
			}
		}
	})
}

// FuzzParseURL: any consul URL either gives options or is ErrInvalid;
// none panics.
func FuzzParseURL(f *testing.F) {
	urlfuzz.Fuzz(f, []string{"consul://127.0.0.1:8500?token=t&dc=dc1&check=http&deregister_after=1m",
		"consuls://h?ca_file=/nonexistent", "consul://:8500", "consul:h:8500", "consul://h?wait=-1s&max_conns=0"},
		func(u *url.URL) error { _, err := ParseURL(u); return err })
}
