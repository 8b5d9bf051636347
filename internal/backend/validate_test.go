package backend

import (
	"errors"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/registry/driver"
)

func TestValidateService(t *testing.T) {
	good := []string{"a", "user-svc", "user.svc", "user_svc", "0", "0a", "a-0", "a--b", strings.Repeat("a", MaxServiceLen),
		"a" + strings.Repeat("-", MaxServiceLen-2) + "z"}
	bad := []string{"", "A", "-a", ".a", "_a", "a-", "a.", "a_", "-", "a b", "a*", "a?", "a[", "a:", "a/b", "a{", "a}", "ä",
		strings.Repeat("a", MaxServiceLen+1), strings.Repeat("a", 128)}
	for _, n := range good {
		if err := ValidateService(n); err != nil {
			t.Errorf("ValidateService(%q) = %v", n, err)
		}
	}
	for _, n := range bad {
		err := ValidateService(n)
		var fe *driver.FieldError
		if !errors.Is(err, driver.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "service" {
			t.Errorf("ValidateService(%q) = %v, want a FieldError on service", n, err)
		}
	}
}

func TestValidateAddress(t *testing.T) {
	for _, a := range []string{"10.0.0.1:8080", "[::1]:80", "host.example:65535", "h:1"} {
		if err := ValidateAddress(a); err != nil {
			t.Errorf("ValidateAddress(%q) = %v", a, err)
		}
	}
	for _, a := range []string{"", "h", ":80", "h:0", "h:65536", "h:x", "a b:80", "h/x:80", "u@h:80",
		"H:80", "[0:0::1]:80"} { // valid, but not canonical: Register rewrites them
		if err := ValidateAddress(a); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("ValidateAddress(%q) = %v, want ErrInvalid", a, err)
		}
	}
}

// One endpoint has one spelling: the forms people type are rewritten to
// it, and the ones that could mean two things are rejected.
func TestCanonicalAddress(t *testing.T) {
	same := map[string]string{
		"10.0.0.1:8080":         "10.0.0.1:8080",
		"API.Example.COM:443":   "api.example.com:443",
		"[0:0:0:0:0:0:0:1]:80":  "[::1]:80",
		"[2001:DB8::0001]:9000": "[2001:db8::1]:9000",
		"my_host-1:65535":       "my_host-1:65535",
		"[::ffff:1.2.3.4]:1":    "1.2.3.4:1",
	}
	for in, want := range same {
		if got, err := CanonicalAddress(in); err != nil || got != want {
			t.Errorf("CanonicalAddress(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := map[string]string{
		"h:+80":               "port",
		"x:00080":             "leading zeros",
		"h:-1":                "port",
		"h:0":                 "port",
		"h:65536":             "out of range",
		"h: 80":               "port",
		"[h]:80":              "IPv6 address only",
		"[10.0.0.1]:80":       "IPv6 address only",
		"[fe80::1%25eth0]:80": "zone",
		"010.0.0.1:80":        "neither an IPv4",
		"1.2.3:80":            "neither an IPv4",
		"h..x:80":             "empty label",
		".h:80":               "empty label",
		"h.:80":               "empty label",
		"hä:80":               "'ä'",
		"h\x00:80":            "not allowed",
		":80":                 "no host",
		"h":                   "not host:port",
	}
	for in, want := range bad {
		_, err := CanonicalAddress(in)
		var fe *driver.FieldError
		if !errors.As(err, &fe) || fe.Field != "address" || !strings.Contains(err.Error(), want) {
			t.Errorf("CanonicalAddress(%q) = %v, want an error on address saying %q", in, err, want)
		}
	}
	long := strings.Repeat("a", MaxHostLen+1) + ":80"
	if _, err := CanonicalAddress(long); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("a host of %d bytes: %v, want ErrInvalid", MaxHostLen+1, err)
	}
}

func TestNewID(t *testing.T) {
	re := regexp.MustCompile(`^user-svc-10\.0\.0\.1-8080-[0-9a-f]{16}$`)
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id := NewID("user-svc", "10.0.0.1:8080")
		if !re.MatchString(id) {
			t.Fatalf("NewID = %q, want <service>-<host>-<port>-<random>", id)
		}
		if seen[id] {
			t.Fatalf("NewID repeated %q", id)
		}
		seen[id] = true
	}
	v6 := NewID("s", "[fe80::1]:80")
	if err := validateID(v6); err != nil {
		t.Errorf("IPv6 ID %q invalid: %v", v6, err)
	}
	long := NewID(strings.Repeat("s", MaxServiceLen), strings.Repeat("h", 200)+":80")
	if err := validateID(long); err != nil {
		t.Errorf("long ID %q invalid: %v", long, err)
	}
}

func TestValidateTTL(t *testing.T) {
	etcd := driver.Limits{MinTTL: 2 * time.Second, TTLGranularity: time.Second, MaxTTL: 9e9 * time.Second}
	for _, c := range []struct {
		in, want time.Duration
		lim      driver.Limits
		ok       bool
	}{
		{10 * time.Second, 10 * time.Second, etcd, true},
		{2500 * time.Millisecond, 3 * time.Second, etcd, true},
		{1999 * time.Millisecond, 0, etcd, false},
		{0, 0, etcd, false},
		{-time.Second, 0, driver.Limits{}, false},
		{1500 * time.Microsecond, 2 * time.Millisecond, driver.Limits{TTLGranularity: time.Millisecond}, true},
		{9e9 * time.Second, 9e9 * time.Second, etcd, true},
		{9e9*time.Second + 1, 0, etcd, false}, // rounds up past the maximum
	} {
		got, err := ValidateTTL(c.in, c.lim)
		if c.ok && (err != nil || got != c.want) {
			t.Errorf("ValidateTTL(%v, %+v) = %v, %v; want %v", c.in, c.lim, got, err, c.want)
		}
		if !c.ok && !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("ValidateTTL(%v, %+v) = %v, %v; want ErrInvalid", c.in, c.lim, got, err)
		}
	}
	_, err := ValidateTTL(time.Second, etcd)
	if err == nil || !strings.Contains(err.Error(), "minimum of 2s") {
		t.Errorf("below-minimum error %v does not name the minimum", err)
	}
}

func TestInstanceValidateNamesField(t *testing.T) {
	base := driver.Instance{ID: "x-1", Service: "svc", Address: "127.0.0.1:1"}
	for field, mut := range map[string]func(*driver.Instance){
		"metadata[bad]": func(i *driver.Instance) { i.Metadata = map[string]string{"bad": string([]byte{0xff})} },
		"tags[1]":       func(i *driver.Instance) { i.Tags = []string{"a", ""} },
		"zone":          func(i *driver.Instance) { i.Zone = strings.Repeat("z", MaxZoneLen+1) },
		"id":            func(i *driver.Instance) { i.ID = "-x" },
		"endpoints":     func(i *driver.Instance) { i.Endpoints = make([]driver.Endpoint, MaxEndpoints+1) },
		"endpoints[0].name": func(i *driver.Instance) {
			i.Endpoints = []driver.Endpoint{{Name: "Http", Address: "127.0.0.1:2"}}
		},
		"endpoints[1].name": func(i *driver.Instance) {
			i.Endpoints = []driver.Endpoint{{Name: "a", Address: "127.0.0.1:2"}, {Name: "a", Address: "127.0.0.1:3"}}
		},
		"endpoints[0].address": func(i *driver.Instance) {
			i.Endpoints = []driver.Endpoint{{Name: "grpc", Address: "127.0.0.1"}}
		},
		"endpoints[0].protocol": func(i *driver.Instance) {
			i.Endpoints = []driver.Endpoint{{Name: "grpc", Address: "127.0.0.1:2", Protocol: "h2;x"}}
		},
	} {
		in := base.Clone()
		mut(&in)
		var fe *driver.FieldError
		if err := ValidateInstance(in); !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: Validate() = %v, want a FieldError on %s", field, err, field)
		}
	}
	if err := ValidateInstance(base); err != nil {
		t.Errorf("valid instance rejected: %v", err)
	}
	base.Endpoints = []driver.Endpoint{{Name: "http", Address: "127.0.0.1:1", Protocol: "http"}, {Name: strings.Repeat("g", MaxEndpointNameLen), Address: "[::1]:2", Protocol: "grpc+tls"}}
	if err := ValidateInstance(base); err != nil {
		t.Errorf("valid endpoints rejected: %v", err)
	}
}

// TestMetadataValuesHaveNoControlCharacters: a registrant cannot forge
// lines of "roster ls" or send terminal escapes through its metadata,
// as it already could not through version, zone or tags.
func TestMetadataValuesHaveNoControlCharacters(t *testing.T) {
	base := driver.Instance{ID: "x-1", Service: "svc", Address: "127.0.0.1:1"}
	for _, v := range []string{"a\nfake-row", "\x1b[2J", "nul\x00", "del\x7f", "csi\u009b31m"} {
		in := base.Clone()
		in.Metadata = map[string]string{"note": v}
		var fe *driver.FieldError
		if err := ValidateInstance(in); !errors.As(err, &fe) || fe.Field != "metadata[note]" || !strings.Contains(err.Error(), "control character") {
			t.Errorf("metadata value %q: Validate() = %v, want a control-character error on metadata[note]", v, err)
		}
	}
	in := base.Clone()
	in.Metadata = map[string]string{"note": "数据中心 — ünïcødé ✓"}
	if err := ValidateInstance(in); err != nil {
		t.Errorf("printable unicode rejected: %v", err)
	}
}

// TestServiceNameErrorNamesTheCharacter: a non-ASCII name is reported by
// its character, not by the first byte of its encoding ('Ã').
func TestServiceNameErrorNamesTheCharacter(t *testing.T) {
	err := ValidateService("apiä")
	if err == nil || !strings.Contains(err.Error(), "'ä'") || strings.Contains(err.Error(), "Ã") {
		t.Errorf("ValidateService(\"apiä\") = %v, want the character 'ä' named", err)
	}
}

func TestTTLUnits(t *testing.T) {
	for _, c := range []struct {
		ttl, unit time.Duration
		want      int64
	}{
		{time.Second, time.Second, 1},
		{time.Second + 1, time.Second, 2},
		{1, time.Second, 1},
		{0, time.Second, 0},
		{1500 * time.Microsecond, time.Millisecond, 2},
		{math.MaxInt64 / time.Second * time.Second, time.Second, 9_223_372_036},
		{math.MaxInt64, time.Second, 9_223_372_037},
		{math.MaxInt64, time.Millisecond, 9_223_372_036_855},
	} {
		if got := TTLUnits(c.ttl, c.unit); got != c.want {
			t.Errorf("TTLUnits(%d, %v) = %d, want %d", c.ttl, c.unit, got, c.want)
		}
	}
}
