package backend

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/roster-go/roster/registry/driver"
)

// Limits every backend enforces identically, so that a registration valid
// on one backend is valid on all: Consul's, the tightest, applied
// everywhere. The conformance suite registers at each limit and one past
// it on every backend (conformance/limits.go).
const (
	// MaxServiceLen is a DNS label's length, and a Kubernetes label
	// value's (the kubernetes.io/service-name label of EndpointSlices).
	MaxServiceLen = 63
	MaxIDLen      = 256
	// MaxWeight is the largest weight: Consul's agent rejects a larger
	// Weights.Passing, and DNS SRV weights are 16 bits too.
	MaxWeight = 65535
	// MaxMetadataPairs is Consul's 64 Meta pairs less the one where the
	// Consul driver keeps Roster's own fields (weight, version, zone).
	MaxMetadataPairs  = 63
	MaxMetadataKeyLen = 128
	MaxMetadataValLen = 512
	MaxTags           = 64
	MaxTagLen         = 256
	MaxVersionLen     = 128
	MaxZoneLen        = 128
	MaxRegionLen      = 128
	MaxEncodedSize    = 16 << 10 // bytes of the JSON-encoded instance
	// MaxEndpoints bounds an instance's named ports. Consul keeps each
	// as a tagged address, and a Kubernetes Service rarely has more.
	MaxEndpoints = 8
	// MaxEndpointNameLen is an IANA service name's length, which a
	// Kubernetes port name and a DNS SRV "_name" label share.
	MaxEndpointNameLen = 15
	MaxProtocolLen     = 32
)

// ValidateService checks a service name: [a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?,
// a Kubernetes label value in lower case and at most a DNS label long.
// The alphabet keeps names safe inside every backend's key scheme and free
// of glob characters, so "svc" can never match "svc-a" by accident; the
// last character is a letter or digit because Kubernetes label values
// (and DNS labels) require it.
func ValidateService(name string) error {
	if name == "" {
		return invalid("service", "empty name")
	}
	if len(name) > MaxServiceLen {
		return invalid("service", "%d bytes, at most %d allowed", len(name), MaxServiceLen)
	}
	for i, c := range name { // runes: a non-ASCII name is reported by its character, not a byte of it
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0 && i < len(name)-1:
		case c == '.' || c == '_' || c == '-':
			return invalid("service", "%q: character %q at byte %d not allowed: a name starts and ends with [a-z0-9]", name, c, i)
		default:
			return invalid("service", "%q: character %q at byte %d not allowed (want [a-z0-9][a-z0-9._-]*[a-z0-9])", name, c, i)
		}
	}
	return nil
}

// validateID checks an instance ID: [A-Za-z0-9][A-Za-z0-9._-]{0,255}.
func validateID(id string) error {
	if id == "" {
		return invalid("id", "empty")
	}
	if len(id) > MaxIDLen {
		return invalid("id", "%d bytes, at most %d allowed", len(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		if !idChar(id[i]) || (i == 0 && !alnum(id[i])) {
			return invalid("id", "%q: character %q at %d not allowed (want [A-Za-z0-9][A-Za-z0-9._-]*)", id, id[i], i)
		}
	}
	return nil
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func idChar(c byte) bool { return alnum(c) || c == '.' || c == '_' || c == '-' }

// ValidateAddress checks that addr is a host:port address in its
// canonical form (see CanonicalAddress). Registry.Register canonicalises
// before validating; an address read back from a backend must already be
// canonical.
func ValidateAddress(addr string) error {
	c, err := CanonicalAddress(addr)
	if err != nil {
		return err
	}
	if c != addr {
		return invalid("address", "%q is not in canonical form %q", addr, c)
	}
	return nil
}

// ValidateInstance checks every field of an instance against the limits
// above. The error is a *FieldError naming the first offending field.
func ValidateInstance(i driver.Instance) error {
	if err := ValidateFields(i); err != nil {
		return err
	}
	b, err := json.Marshal(i)
	if err != nil {
		return invalid("instance", "cannot encode: %v", err)
	}
	if len(b) > MaxEncodedSize {
		return invalid("instance", "encodes to %d bytes, at most %d allowed", len(b), MaxEncodedSize)
	}
	return nil
}

// ValidateFields is ValidateInstance without the encoded-size check,
// which costs an encoding. It is what a reader checks on every record it
// reads back (the field limits bound the size already).
func ValidateFields(i driver.Instance) error {
	if err := ValidateService(i.Service); err != nil {
		return err
	}
	if err := validateID(i.ID); err != nil {
		return err
	}
	if err := ValidateAddress(i.Address); err != nil {
		return err
	}
	if i.Weight > MaxWeight {
		return invalid("weight", "%d exceeds %d", i.Weight, MaxWeight)
	}
	if err := printable("version", i.Version, MaxVersionLen); err != nil {
		return err
	}
	if err := printable("zone", i.Zone, MaxZoneLen); err != nil {
		return err
	}
	if err := printable("region", i.Region, MaxRegionLen); err != nil {
		return err
	}
	if len(i.Tags) > MaxTags {
		return invalid("tags", "%d tags, at most %d allowed", len(i.Tags), MaxTags)
	}
	for n, t := range i.Tags {
		if t == "" {
			return invalid("tags["+strconv.Itoa(n)+"]", "empty tag")
		}
		if err := printable("tags["+strconv.Itoa(n)+"]", t, MaxTagLen); err != nil {
			return err
		}
	}
	if err := validateEndpoints(i.Endpoints); err != nil {
		return err
	}
	if len(i.Metadata) > MaxMetadataPairs {
		return invalid("metadata", "%d pairs, at most %d allowed", len(i.Metadata), MaxMetadataPairs)
	}
	for k, v := range i.Metadata {
		if err := validateMetaKey(k); err != nil {
			return err
		}
		if len(v) > MaxMetadataValLen {
			return invalid("metadata["+k+"]", "value of %d bytes, at most %d allowed", len(v), MaxMetadataValLen)
		}
		// Values reach terminals ("roster ls") and logs: a newline or an
		// escape sequence in one could forge lines or drive the terminal.
		if err := printable("metadata["+k+"]", v, MaxMetadataValLen); err != nil {
			return err
		}
	}
	return nil
}

// validateEndpoints checks each named endpoint. Names are unique, so that
// a caller asking for "grpc" reaches one port, not one of two.
func validateEndpoints(eps []driver.Endpoint) error {
	if len(eps) > MaxEndpoints {
		return invalid("endpoints", "%d endpoints, at most %d allowed", len(eps), MaxEndpoints)
	}
	for n, e := range eps {
		field := "endpoints[" + strconv.Itoa(n) + "]"
		if err := validateEndpointName(field+".name", e.Name); err != nil {
			return err
		}
		for _, prev := range eps[:n] {
			if prev.Name == e.Name {
				return invalid(field+".name", "%q appears twice", e.Name)
			}
		}
		if err := ValidateAddress(e.Address); err != nil {
			return renamed(err, field+".address")
		}
		if err := validateProtocol(field+".protocol", e.Protocol); err != nil {
			return err
		}
	}
	return nil
}

// validateEndpointName checks an IANA service name as Kubernetes does
// for port names: [a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?.
func validateEndpointName(field, name string) error {
	if name == "" {
		return invalid(field, "empty")
	}
	if len(name) > MaxEndpointNameLen {
		return invalid(field, "%d bytes, at most %d allowed", len(name), MaxEndpointNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		inner := c == '-' && i > 0 && i < len(name)-1
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || inner) {
			return invalid(field, "%q: character %q at %d not allowed (want [a-z0-9][a-z0-9-]*[a-z0-9])", name, c, i)
		}
	}
	return nil
}

// validateProtocol allows what URL schemes allow, in lower case.
func validateProtocol(field, p string) error {
	if len(p) > MaxProtocolLen {
		return invalid(field, "%d bytes, at most %d allowed", len(p), MaxProtocolLen)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '+' || c == '-') {
			return invalid(field, "%q: character %q at %d not allowed (want [a-z0-9.+-])", p, c, i)
		}
	}
	return nil
}

// renamed gives a field error the name of the field it was found in.
func renamed(err error, field string) error {
	var fe *driver.FieldError
	if errors.As(err, &fe) {
		return &driver.FieldError{Field: field, Reason: fe.Reason}
	}
	return err
}

func validateMetaKey(k string) error {
	if k == "" {
		return invalid("metadata", "empty key")
	}
	if len(k) > MaxMetadataKeyLen {
		// The key is not checked yet: quoted, so that no byte of it reaches a terminal raw.
		return invalid("metadata", "key %q… of %d bytes, at most %d allowed", k[:32], len(k), MaxMetadataKeyLen)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !alnum(c) && c != '_' && c != '-' {
			return invalid("metadata", "key %q: character %q not allowed (want [A-Za-z0-9_-])", k, c)
		}
	}
	// Consul rejects "consul-" keys; "roster_" keys are where backends keep
	// their own fields. Reject both everywhere so behaviour is identical.
	if strings.HasPrefix(strings.ToLower(k), "consul-") || strings.HasPrefix(strings.ToLower(k), "roster_") {
		return invalid("metadata["+k+"]", "keys starting with consul- or roster_ are reserved")
	}
	return nil
}

func printable(field, s string, max int) error {
	if len(s) > max {
		return invalid(field, "%d bytes, at most %d allowed", len(s), max)
	}
	if !utf8.ValidString(s) {
		return invalid(field, "not valid UTF-8")
	}
	for _, r := range s {
		if r < ' ' || (r >= 0x7f && r <= 0x9f) { // C0, DEL and C1 (0x9b is a CSI to many terminals)
			return invalid(field, "control character %U", r)
		}
	}
	return nil
}

// ValidateTTL checks a requested TTL against a backend's limits and returns
// the effective TTL: rounded up to the backend's granularity. A TTL below
// the backend's minimum, or above its maximum, is rejected, naming the
// bound.
func ValidateTTL(ttl time.Duration, lim driver.Limits) (time.Duration, error) {
	if ttl <= 0 {
		return 0, invalid("ttl", "%v must be positive", ttl)
	}
	if lim.MinTTL > 0 && ttl < lim.MinTTL {
		return 0, invalid("ttl", "%v is below this backend's minimum of %v", ttl, lim.MinTTL)
	}
	if g := lim.TTLGranularity; g > 0 && ttl%g != 0 {
		if ttl > math.MaxInt64-g {
			return 0, invalid("ttl", "%v is too large to round up to this backend's granularity of %v", ttl, g)
		}
		ttl = (ttl/g + 1) * g
	}
	if lim.MaxTTL > 0 && ttl > lim.MaxTTL {
		return 0, invalid("ttl", "%v exceeds this backend's maximum of %v", ttl, lim.MaxTTL)
	}
	return ttl, nil
}

// TTLUnits is ttl in whole units (seconds, milliseconds), rounded up:
// what a backend storing a TTL as a count writes. Unlike
// (ttl+unit-1)/unit it cannot overflow near math.MaxInt64 into a
// negative count — a lease that ends at once.
func TTLUnits(ttl, unit time.Duration) int64 {
	n := int64(ttl / unit)
	if ttl%unit > 0 {
		n++
	}
	return n
}
