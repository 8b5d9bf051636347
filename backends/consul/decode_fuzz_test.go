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
	f.Add(encodeFields(driver.Instance{Weight: 100, Version: "1.2", Zone: "hz-1", Region: "eu-west"}))
	f.Add("1,0:9,short")
	f.Add("4294967296,0,")
	f.Add("1,-1,x")
	f.Add("1,99,short")
	f.Fuzz(func(t *testing.T, s string) {
		fs, ok := decodeFields(s)
		if !ok {
			return
		}
		in := driver.Instance{Weight: fs.weight, Version: fs.version, Zone: fs.zone, Region: fs.region}
		if again := encodeFields(in); again != s {
			if fs2, _ := decodeFields(again); fs2 != fs {
				t.Fatalf("decodeFields(%q) = %+v, which does not encode back (%q)", s, fs, again)
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

// TestFieldsRoundTrip: every field comes back, and an instance without
// a region keeps the form older releases read.
func TestFieldsRoundTrip(t *testing.T) {
	for _, in := range []driver.Instance{
		{Weight: 100, Version: "1.2", Zone: "hz-1"},
		{Weight: 7, Version: "", Zone: "a", Region: "eu-west"},
		{Weight: 0, Version: "v,1:2", Zone: "", Region: "r"},
	} {
		s := encodeFields(in)
		fs, ok := decodeFields(s)
		if !ok || fs != (fields{in.Weight, in.Version, in.Zone, in.Region}) {
			t.Errorf("decodeFields(encodeFields(%+v)) = %+v, %v", in, fs, ok)
		}
	}
	if got := encodeFields(driver.Instance{Weight: 100, Version: "1.2", Zone: "hz-1"}); got != "100,3,1.2hz-1" {
		t.Errorf("no region: %q, want the old form 100,3,1.2hz-1", got)
	}
}
