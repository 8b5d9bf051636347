package backend

import (
	"errors"
	"strings"
	"testing"

	"github.com/roster-go/roster/registry/driver"
)

// TestCanonicalAddressOneEndpointOneSpelling: the forms a resolver or a
// socket reads as another address are that address or an error, and the
// addresses where servers listen but no client can dial are errors.
func TestCanonicalAddressOneEndpointOneSpelling(t *testing.T) {
	for in, want := range map[string]string{
		"[::ffff:10.0.0.1]:80": "10.0.0.1:80", // IPv4-mapped: the same socket as 10.0.0.1
		"[::FFFF:a00:1]:80":    "10.0.0.1:80",
		"a-b.c_d:80":           "a-b.c_d:80",
		"1e3:80":               "1e3:80", // a name: "1e3" is no number to a resolver
		"0xg.example:80":       "0xg.example:80",
	} {
		if got, err := CanonicalAddress(in); err != nil || got != want {
			t.Errorf("CanonicalAddress(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"0.0.0.0:80":                            "unspecified",
		"[::]:80":                               "unspecified",
		"[::ffff:0.0.0.0]:80":                   "unspecified",
		"0x7f.0.0.1:80":                         "neither an IPv4", // 127.0.0.1 to inet_aton
		"0x7f000001:80":                         "neither an IPv4",
		"a.0X1F:80":                             "neither an IPv4",
		"api.internal.1:80":                     "neither an IPv4",
		"-api:80":                               "starts or ends with '-'",
		"api-.example:80":                       "starts or ends with '-'",
		strings.Repeat("a", 64) + ".example:80": "at most 63",
	} {
		_, err := CanonicalAddress(in)
		var fe *driver.FieldError
		if !errors.As(err, &fe) || fe.Field != "address" || !strings.Contains(err.Error(), want) {
			t.Errorf("CanonicalAddress(%q) = %v, want an error on address saying %q", in, err, want)
		}
	}
}
