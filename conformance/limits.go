package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/roster-go/roster/registry"
)

// limitCase is one documented limit: an instance exactly at it, which
// every backend must store and return unchanged, and one just past it,
// which Register must reject naming field, before anything is written.
type limitCase struct {
	name       string
	field      string // prefix of the FieldError's field for the past case
	at, past   func(in *registry.Instance)
	ownService bool // the case changes the service name itself
}

func pairs(n, valLen int) map[string]string {
	m := make(map[string]string, n)
	for i := 0; i < n; i++ {
		m[fmt.Sprintf("k%03d", i)] = strings.Repeat("v", valLen)
	}
	return m
}

func tags(n, l int) []string {
	t := make([]string, n)
	for i := range t {
		t[i] = fmt.Sprintf("%0*d", l, i)
	}
	return t
}

// encodedTo pads in's metadata with 'x' so that its JSON form is exactly
// size bytes, within the per-value limit. It sets the ID and weight that
// Register would otherwise fill in, since they count too.
func encodedTo(in *registry.Instance, size int) {
	in.ID, in.Weight = "encoded-size", registry.DefaultWeight
	in.Metadata = map[string]string{}
	for i := 0; ; i++ {
		k := fmt.Sprintf("f%02d", i)
		in.Metadata[k] = ""
		b, _ := json.Marshal(in)
		missing := size - len(b)
		if missing <= registry.MaxMetadataValLen {
			in.Metadata[k] = strings.Repeat("x", missing)
			return
		}
		// Leave room for the next pair's own bytes, so it never overshoots.
		in.Metadata[k] = strings.Repeat("x", min(registry.MaxMetadataValLen, missing-40))
	}
}

func longName(prefix string, n int) string {
	return prefix + strings.Repeat("a", n-len(prefix))
}

// longHost returns a host name of n bytes in labels of at most 63.
func longHost(n int) string {
	var b strings.Builder
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(strings.Repeat("h", min(63, n-b.Len())))
	}
	return b.String()
}

// allAtOnce puts every field that fits together at its limit: a backend
// storing its own fields beside the user's (Consul's Meta) must still
// accept the user's whole budget.
func allAtOnce(in *registry.Instance) {
	in.Weight = registry.MaxWeight
	in.Version = strings.Repeat("1", registry.MaxVersionLen)
	in.Zone = strings.Repeat("z", registry.MaxZoneLen)
	in.Metadata = pairs(registry.MaxMetadataPairs, 8)
	in.Tags = tags(registry.MaxTags, 3)
}

var limitCases = []limitCase{
	{name: "every field at once", field: "metadata",
		at: allAtOnce,
		past: func(in *registry.Instance) {
			allAtOnce(in)
			in.Metadata["one-more"] = "v"
		}},
	{name: "weight", field: "weight",
		at:   func(in *registry.Instance) { in.Weight = registry.MaxWeight },
		past: func(in *registry.Instance) { in.Weight = registry.MaxWeight + 1 }},
	{name: "metadata pairs", field: "metadata",
		at:   func(in *registry.Instance) { in.Metadata = pairs(registry.MaxMetadataPairs, 8) },
		past: func(in *registry.Instance) { in.Metadata = pairs(registry.MaxMetadataPairs+1, 8) }},
	{name: "metadata key length", field: "metadata",
		at: func(in *registry.Instance) {
			in.Metadata = map[string]string{longName("k", registry.MaxMetadataKeyLen): "v"}
		},
		past: func(in *registry.Instance) {
			in.Metadata = map[string]string{longName("k", registry.MaxMetadataKeyLen+1): "v"}
		}},
	{name: "metadata value length", field: "metadata[k]",
		at: func(in *registry.Instance) {
			in.Metadata = map[string]string{"k": strings.Repeat("v", registry.MaxMetadataValLen)}
		},
		past: func(in *registry.Instance) {
			in.Metadata = map[string]string{"k": strings.Repeat("v", registry.MaxMetadataValLen+1)}
		}},
	{name: "tags", field: "tags",
		at:   func(in *registry.Instance) { in.Tags = tags(registry.MaxTags, 3) },
		past: func(in *registry.Instance) { in.Tags = tags(registry.MaxTags+1, 3) }},
	{name: "tag length", field: "tags[0]",
		at:   func(in *registry.Instance) { in.Tags = tags(1, registry.MaxTagLen) },
		past: func(in *registry.Instance) { in.Tags = tags(1, registry.MaxTagLen+1) }},
	{name: "version length", field: "version",
		at:   func(in *registry.Instance) { in.Version = strings.Repeat("1", registry.MaxVersionLen) },
		past: func(in *registry.Instance) { in.Version = strings.Repeat("1", registry.MaxVersionLen+1) }},
	{name: "zone length", field: "zone",
		at:   func(in *registry.Instance) { in.Zone = strings.Repeat("z", registry.MaxZoneLen) },
		past: func(in *registry.Instance) { in.Zone = strings.Repeat("z", registry.MaxZoneLen+1) }},
	{name: "ID length", field: "id",
		at:   func(in *registry.Instance) { in.ID = longName("id-", registry.MaxIDLen) },
		past: func(in *registry.Instance) { in.ID = longName("id-", registry.MaxIDLen+1) }},
	{name: "host length", field: "address",
		at:   func(in *registry.Instance) { in.Address = longHost(registry.MaxHostLen) + ":65535" },
		past: func(in *registry.Instance) { in.Address = longHost(registry.MaxHostLen+1) + ":65535" }},
	{name: "encoded size", field: "instance",
		at:   func(in *registry.Instance) { encodedTo(in, registry.MaxEncodedSize) },
		past: func(in *registry.Instance) { encodedTo(in, registry.MaxEncodedSize+1) }},
	{name: "service length", field: "service", ownService: true,
		at:   func(in *registry.Instance) { in.Service = longName(in.Service, registry.MaxServiceLen) },
		past: func(in *registry.Instance) { in.Service = longName(in.Service, registry.MaxServiceLen+1) }},
}

// limitsAtAndPast: every documented limit is what every backend accepts
// ("valid on one backend ⇒ valid on all"), and one past it is rejected
// by validation, naming the field, with nothing written.
func limitsAtAndPast(t TB, s *suite) {
	r := s.open(t)
	for _, c := range limitCases {
		at := registry.Instance{Service: service("lim"), Address: addr()}
		c.at(&at)
		l := s.register(t, r, at)
		want := l.Instance()
		got, err := r.Lookup(t.Context(), want.Service)
		if in, ok := got.Find(want.ID); err != nil || !ok || !in.Equal(want) {
			t.Errorf("%s at the limit: Lookup = %v (err %v), want %+v back unchanged", c.name, ids(got), err, describeLimit(want))
		}
		past := registry.Instance{Service: service("lim"), Address: addr()}
		c.past(&past)
		_, err = r.Register(t.Context(), past)
		var fe *registry.FieldError
		if !errors.Is(err, registry.ErrInvalid) || !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, c.field) {
			t.Errorf("%s one past the limit: Register = %v, want ErrInvalid naming %q", c.name, err, c.field)
			continue
		}
		if c.ownService {
			continue // the service name itself is invalid: nothing to look up
		}
		if got, err := lookupIDs(t, r, past.Service); err != nil || len(got) != 0 {
			t.Errorf("%s one past the limit: %s holds %v (err %v), want nothing written", c.name, past.Service, got, err)
		}
	}
}

func describeLimit(in registry.Instance) string {
	b, _ := json.Marshal(in)
	if len(b) > 200 {
		return fmt.Sprintf("%s… (%d bytes)", b[:200], len(b))
	}
	return string(b)
}
