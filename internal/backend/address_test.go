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

// TestAddressPolicy is the table docs/security.md states: what is never
// served, what is loopback (served only by a registry on this host, or
// one allowed it), and what is served everywhere.
func TestAddressPolicy(t *testing.T) {
	for in, want := range map[string]string{
		"169.254.169.254:80":          "cloud metadata",
		"[::ffff:169.254.169.254]:80": "cloud metadata",
		"169.254.1.1:80":              "link-local",
		"[fe80::1]:80":                "link-local",
		"[febf::1]:80":                "link-local",
		"[fd00:ec2::254]:80":          "metadata",
		"100.100.100.200:80":          "metadata",
		"224.0.0.1:80":                "multicast",
		"239.255.255.250:1900":        "multicast",
		"[ff02::1]:80":                "multicast",
		"[ff05::2]:80":                "multicast",
		"255.255.255.255:80":          "broadcast",
		"0.0.0.0:80":                  "unspecified",
		"[::]:80":                     "unspecified",
	} {
		_, err := CanonicalAddress(in)
		var fe *driver.FieldError
		if !errors.As(err, &fe) || fe.Field != "address" || !strings.Contains(err.Error(), want) {
			t.Errorf("CanonicalAddress(%q) = %v, want an error on address saying %q", in, err, want)
		}
	}
	for in, loop := range map[string]bool{
		"127.0.0.1:80":         true,
		"127.9.9.9:80":         true,
		"[::1]:80":             true,
		"localhost:80":         true,
		"api.localhost:80":     true,
		"10.0.0.1:80":          false,
		"100.100.100.1:80":     false,
		"169.255.0.1:80":       false,
		"[fec0::1]:80":         false,
		"[2001:db8::1]:80":     false,
		"api.internal:80":      false, // names are not resolved
		"localhost.example:80": false,
	} {
		c, err := CanonicalAddress(in)
		if err != nil {
			t.Errorf("CanonicalAddress(%q) = %v, want it served", in, err)
			continue
		}
		if Loopback(c) != loop {
			t.Errorf("Loopback(%q) = %v, want %v", c, !loop, loop)
		}
		err = CheckLoopback("endpoints[2].address", c, false)
		var fe *driver.FieldError
		switch {
		case loop && (!errors.As(err, &fe) || fe.Field != "endpoints[2].address"):
			t.Errorf("CheckLoopback(%q, not allowed) = %v, want an error naming the field", c, err)
		case !loop && err != nil:
			t.Errorf("CheckLoopback(%q, not allowed) = %v, want nil", c, err)
		}
		if err := CheckLoopback("address", c, true); err != nil {
			t.Errorf("CheckLoopback(%q, allowed) = %v", c, err)
		}
	}
}

func TestLocalHosts(t *testing.T) {
	for _, c := range []struct {
		servers []string
		want    bool
	}{
		{[]string{"127.0.0.1:6379"}, true},
		{[]string{"localhost:2181", "[::1]:2182"}, true},
		{[]string{"http://127.0.0.1:2379", "unix://etcd.sock"}, true},
		{[]string{"/run/redis.sock"}, true},
		{[]string{":8500"}, true}, // the backend's local default
		{[]string{"https://127.0.0.1:6443/"}, true},
		{[]string{"127.0.0.1:1", "10.0.0.2:1"}, false},
		{[]string{"https://kube.example:6443"}, false},
		{[]string{"nats://10.0.0.1:4222"}, false},
		{nil, false},
	} {
		if got := LocalHosts(c.servers...); got != c.want {
			t.Errorf("LocalHosts(%q) = %v, want %v", c.servers, got, c.want)
		}
	}
}
