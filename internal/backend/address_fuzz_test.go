package backend_test

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"testing"

	"github.com/roster-go/roster/internal/backend"

	"github.com/roster-go/roster/registry/driver"
)

// FuzzCanonicalAddress: any input either fails with a FieldError on
// "address" (never a panic), or yields an address that is its own
// canonical form, that ValidateAddress accepts, and whose port is a
// number from 1 to 65535. The corpus in testdata/fuzz/FuzzCanonicalAddress
// holds the forms people type: signs, leading zeros, brackets, zones,
// upper case, IPv4-in-IPv6.
func FuzzCanonicalAddress(f *testing.F) {
	for _, s := range []string{"10.0.0.1:8080", "[::1]:80", "h:+80", "x:00080", "[h]:80", "H:80",
		"[::ffff:10.0.0.1]:80", "0.0.0.0:80", "[::]:80", "0x7f.0.0.1:80", "-h:80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		c, err := backend.CanonicalAddress(addr)
		if err != nil {
			var fe *driver.FieldError
			if !errors.As(err, &fe) || fe.Field != "address" || !errors.Is(err, driver.ErrInvalid) {
				t.Fatalf("CanonicalAddress(%q) = %v, want a FieldError on address", addr, err)
			}
			return
		}
		if again, err := backend.CanonicalAddress(c); err != nil || again != c {
			t.Fatalf("CanonicalAddress(%q) = %q, which canonicalises to %q, %v", addr, c, again, err)
		}
		if err := backend.ValidateAddress(c); err != nil {
			t.Fatalf("ValidateAddress(%q) (canonical form of %q) = %v", c, addr, err)
		}
		host, port, err := net.SplitHostPort(c)
		n, perr := strconv.Atoi(port)
		if err != nil || host == "" || perr != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			t.Fatalf("canonical form %q of %q: host %q port %q", c, addr, host, port)
		}
		// One endpoint, one spelling: no IPv4-mapped form, no address no
		// client can dial.
		if ip, err := netip.ParseAddr(host); err == nil && (ip.Is4In6() || ip.IsUnspecified()) {
			t.Fatalf("canonical form %q of %q: host %v", c, addr, ip)
		}
	})
}

// FuzzDecodeStored: a value stored under an etcd key or a ZooKeeper
// znode, which anyone with write access to the prefix can set, never
// panics the reader, and what it decodes belongs to the key it was read
// under (service and ID from the key, not from the value).
func FuzzDecodeStored(f *testing.F) {
	f.Add("api", "a1", []byte(`{"id":"other","service":"billing","address":"10.0.0.1:80","weight":100}`))
	f.Add("api", "a1", []byte(`{"address":"","weight":-1}`))
	f.Add("api", "a1", []byte(`{"address":"h:1","metadata":{"k":null},"tags":[null]}`))
	f.Fuzz(func(t *testing.T, service, id string, val []byte) {
		in, ok := backend.DecodeStored(service, id, val)
		if ok && (in.Service != service || in.ID != id || in.Address == "") {
			t.Fatalf("DecodeStored(%q, %q, %q) = %+v", service, id, val, in)
		}
	})
}
