package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/roster-go/roster/registry"
)

// limitCase is one documented limit: an instance exactly at it, which
// every backend must store and return unchanged, and one just past it,
// which Register must reject naming field, before anything is written.
type limitCase struct {
	name       string
	field      string // prefix of the FieldError's field for the past case
	at, past   func(in *registry.Instance)
	opts       []registry.RegisterOption // of both registrations
	ownService bool                      // the case changes the service name itself
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
		if missing <= backend.MaxMetadataValLen {
			in.Metadata[k] = strings.Repeat("x", missing)
			return
		}
		// Leave room for the next pair's own bytes, so it never overshoots.
		in.Metadata[k] = strings.Repeat("x", min(backend.MaxMetadataValLen, missing-40))
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
	in.Service = longName(in.Service, backend.MaxServiceLen)
	in.ID = longName("all-", backend.MaxIDLen)
	in.Weight = backend.MaxWeight
	in.Version = strings.Repeat("1", backend.MaxVersionLen)
	in.Zone = strings.Repeat("z", backend.MaxZoneLen)
	in.Region = strings.Repeat("r", backend.MaxRegionLen)
	in.Metadata = pairs(backend.MaxMetadataPairs, 8)
	in.Tags = tags(backend.MaxTags, 3)
	allEndpoints(in)
}

var limitCases = []limitCase{
	{name: "every field at once", field: "metadata",
		at: allAtOnce,
		past: func(in *registry.Instance) {
			allAtOnce(in)
			in.Metadata["one-more"] = "v"
		}},
	{name: "weight", field: "weight",
		at:   func(in *registry.Instance) { in.Weight = backend.MaxWeight },
		past: func(in *registry.Instance) { in.Weight = backend.MaxWeight + 1 }},
	{name: "metadata pairs", field: "metadata",
		at:   func(in *registry.Instance) { in.Metadata = pairs(backend.MaxMetadataPairs, 8) },
		past: func(in *registry.Instance) { in.Metadata = pairs(backend.MaxMetadataPairs+1, 8) }},
	{name: "metadata key length", field: "metadata",
		at: func(in *registry.Instance) {
			in.Metadata = map[string]string{longName("k", backend.MaxMetadataKeyLen): "v"}
		},
		past: func(in *registry.Instance) {
			in.Metadata = map[string]string{longName("k", backend.MaxMetadataKeyLen+1): "v"}
		}},
	{name: "metadata value length", field: "metadata[k]",
		at: func(in *registry.Instance) {
			in.Metadata = map[string]string{"k": strings.Repeat("v", backend.MaxMetadataValLen)}
		},
		past: func(in *registry.Instance) {
			in.Metadata = map[string]string{"k": strings.Repeat("v", backend.MaxMetadataValLen+1)}
		}},
	{name: "tags", field: "tags",
		at:   func(in *registry.Instance) { in.Tags = tags(backend.MaxTags, 3) },
		past: func(in *registry.Instance) { in.Tags = tags(backend.MaxTags+1, 3) }},
	{name: "tag length", field: "tags[0]",
		at:   func(in *registry.Instance) { in.Tags = tags(1, backend.MaxTagLen) },
		past: func(in *registry.Instance) { in.Tags = tags(1, backend.MaxTagLen+1) }},
	{name: "version length", field: "version",
		at:   func(in *registry.Instance) { in.Version = strings.Repeat("1", backend.MaxVersionLen) },
		past: func(in *registry.Instance) { in.Version = strings.Repeat("1", backend.MaxVersionLen+1) }},
	{name: "zone length", field: "zone",
		at:   func(in *registry.Instance) { in.Zone = strings.Repeat("z", backend.MaxZoneLen) },
		past: func(in *registry.Instance) { in.Zone = strings.Repeat("z", backend.MaxZoneLen+1) }},
	{name: "region length", field: "region",
		at:   func(in *registry.Instance) { in.Region = strings.Repeat("r", backend.MaxRegionLen) },
		past: func(in *registry.Instance) { in.Region = strings.Repeat("r", backend.MaxRegionLen+1) }},
	{name: "ID length", field: "id",
		at:   func(in *registry.Instance) { in.ID = longName("id-", backend.MaxIDLen) },
		past: func(in *registry.Instance) { in.ID = longName("id-", backend.MaxIDLen+1) }},
	{name: "host length", field: "address",
		at:   func(in *registry.Instance) { in.Address = longHost(backend.MaxHostLen) + ":65535" },
		past: func(in *registry.Instance) { in.Address = longHost(backend.MaxHostLen+1) + ":65535" }},
	{name: "encoded size", field: "instance",
		at:   func(in *registry.Instance) { encodedTo(in, backend.MaxEncodedSize) },
		past: func(in *registry.Instance) { encodedTo(in, backend.MaxEncodedSize+1) }},
	{name: "service length", field: "service", ownService: true,
		at:   func(in *registry.Instance) { in.Service = longName(in.Service, backend.MaxServiceLen) },
		past: func(in *registry.Instance) { in.Service = longName(in.Service, backend.MaxServiceLen+1) }},
	// A name starts and ends with [a-z0-9] and may hold '.', '_' and '-'
	// between: a Kubernetes label value, at most a DNS label long.
	{name: "service shape", field: "service", ownService: true,
		at:   func(in *registry.Instance) { in.Service = serviceShape(in.Service, "9") },
		past: func(in *registry.Instance) { in.Service = serviceShape(in.Service, "-") }},
	{name: "service ending in '.'", field: "service", ownService: true,
		at:   func(in *registry.Instance) { in.Service = serviceShape(in.Service, "z") },
		past: func(in *registry.Instance) { in.Service = serviceShape(in.Service, ".") }},
	{name: "service ending in '_'", field: "service", ownService: true,
		at:   func(in *registry.Instance) { in.Service = serviceShape(in.Service, "0") },
		past: func(in *registry.Instance) { in.Service = serviceShape(in.Service, "_") }},
	{name: "service starting with a digit", field: "service", ownService: true,
		at:   func(in *registry.Instance) { in.Service = "7" + in.Service },
		past: func(in *registry.Instance) { in.Service = "-" + in.Service }},
	{name: "ID shape", field: "id",
		at:   func(in *registry.Instance) { in.ID = longName("Z9._-", backend.MaxIDLen-3) + "._-" },
		past: func(in *registry.Instance) { in.ID = "-" + longName("Z9", backend.MaxIDLen-1) }},
	{name: "metadata key shape", field: "metadata",
		at: func(in *registry.Instance) {
			in.Metadata = map[string]string{longName("-_Z9", backend.MaxMetadataKeyLen-2) + "_-": "v"}
		},
		past: func(in *registry.Instance) { in.Metadata = map[string]string{"a.b": "v"} }},
	// Version, zone and region are free text: any printable UTF-8, spaces too.
	{name: "zone and version text", field: "zone",
		at: func(in *registry.Instance) {
			in.Zone = fillText("eu west ✓ ", backend.MaxZoneLen)
			in.Version = fillText("1.0 — ünï ", backend.MaxVersionLen)
		},
		past: func(in *registry.Instance) { in.Zone = "eu\twest" }},
	{name: "region text", field: "region",
		at:   func(in *registry.Instance) { in.Region = fillText("eu west ✓ ", backend.MaxRegionLen) },
		past: func(in *registry.Instance) { in.Region = "eu\nwest" }},
	{name: "weight 0 (drained)", field: "weight", opts: []registry.RegisterOption{registry.Drained()},
		at:   func(in *registry.Instance) { in.Weight = 0 },
		past: func(in *registry.Instance) { in.Weight = 1 }},
}

// serviceShape is a 63-character name of every allowed character:
// service (unique to the run), then '.', '_' and '-' between letters,
// ending in last.
func serviceShape(service, last string) string {
	s := service + ".a_b-c"
	return s + strings.Repeat("0", backend.MaxServiceLen-len(s)-len(last)) + last
}

// fillText repeats text (multi-byte characters included) and pads it
// with 'x' to exactly n bytes.
func fillText(text string, n int) string {
	var b strings.Builder
	for b.Len()+len(text) <= n {
		b.WriteString(text)
	}
	return b.String() + strings.Repeat("x", n-b.Len())
}

// limitsAtAndPast: every documented limit is what every backend accepts
// ("valid on one backend ⇒ valid on all"), and one past it is rejected
// by validation, naming the field, with nothing written.
func limitsAtAndPast(t TB, s *suite) {
	r := s.open(t)
	for _, c := range slices.Concat(limitCases, endpointLimits) {
		at := registry.Instance{Service: service("lim"), Address: addr()}
		c.at(&at)
		l := s.register(t, r, at, c.opts...)
		want := l.Instance()
		got, err := r.Lookup(t.Context(), want.Service)
		if in, ok := got.Find(want.ID); err != nil || !ok || !in.Equal(want) {
			t.Errorf("%s at the limit: Lookup = %v (err %v), want %+v back unchanged", c.name, ids(got), err, describeLimit(want))
		}
		past := registry.Instance{Service: service("lim"), Address: addr()}
		c.past(&past)
		_, err = r.Register(t.Context(), past, c.opts...)
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

// edgeTTLs are the TTLs at the ends of what any backend takes: below the
// minimum, at it, at and past the maximum, and huge ones chosen so that
// a backend storing whole seconds or milliseconds in 32 bits, or
// rounding up with an overflow, would wrap them to a lease of a couple
// of seconds.
func edgeTTLs(lim registry.Limits) []time.Duration {
	ttls := []time.Duration{
		time.Nanosecond,
		1e6 * time.Hour,
		(1<<32 + 2) * time.Second,      // int32 seconds wrap to 2s
		(1<<32)*time.Millisecond + 2e9, // int32 milliseconds wrap to 2s
		(1 << 31) * time.Second,        // int32 seconds wrap negative
		(1 << 31) * time.Millisecond,   // int32 milliseconds wrap negative
		math.MaxInt64 / time.Second * time.Second,
		math.MaxInt64,
	}
	if lim.MinTTL > time.Nanosecond {
		ttls = append(ttls, lim.MinTTL-time.Nanosecond, lim.MinTTL)
	}
	if lim.MaxTTL > 0 && lim.MaxTTL < math.MaxInt64 {
		ttls = append(ttls, lim.MaxTTL, lim.MaxTTL+1)
	}
	return ttls
}

// ttlEdges: a TTL at either end of the range is either accepted and
// works — the instance is there, and still there two test TTLs later
// (no heartbeat is due before a long TTL's third), so no overflow
// turned it into a short lease — or rejected as ErrInvalid naming the
// ttl, with nothing written; never ErrUnavailable (retried forever).
// TTLs below the minimum and above the maximum the backend declares
// must be rejected. Under RunChecks only the TTLs up to MaxRecordTTL
// are tried, since a killed run must leave nothing lasting.
func ttlEdges(t TB, s *suite) {
	r := s.open(t)
	lim := r.Limits()
	var long []*registry.Lease
	for _, ttl := range edgeTTLs(lim) {
		if s.maxTTL > 0 && ttl > s.maxTTL {
			t.Logf("TTL %v: not checked, above the run's bound of %v", ttl, s.maxTTL)
			continue
		}
		in := s.inst(service("ttl-edge"))
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		l, err := r.Register(ctx, in, registry.WithTTL(ttl))
		cancel()
		outside := ttl < lim.MinTTL || (lim.MaxTTL > 0 && ttl > lim.MaxTTL)
		switch {
		case err != nil:
			ttlRejected(t, r, ttl, in.Service, err)
			continue
		case outside:
			t.Errorf("TTL %v outside [%v, %v]: accepted, want ErrInvalid", ttl, lim.MinTTL, lim.MaxTTL)
		case l.TTL() < ttl:
			t.Errorf("TTL %v: effective TTL %v is shorter", ttl, l.TTL())
		}
		t.Cleanup(func() { deregisterNow(l) })
		if ttl >= time.Hour {
			long = append(long, l)
		}
	}
	select {
	case <-time.After(2 * s.cfg.TTL):
	case <-t.Context().Done():
		return
	}
	for _, l := range long {
		in := l.Instance()
		if got, err := lookupIDs(t, r, in.Service); err != nil || len(got) != 1 || l.State() != registry.LeaseHealthy {
			t.Errorf("TTL %v: %v after 2×%v holds %v (err %v), lease %v (err %v); want the instance, healthy",
				l.TTL(), in.Service, s.cfg.TTL, got, err, l.State(), l.Err())
		}
	}
}

func ttlRejected(t TB, r *registry.Registry, ttl time.Duration, svc string, err error) {
	t.Helper()
	var fe *registry.FieldError
	if !errors.Is(err, registry.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "ttl" {
		t.Errorf("TTL %v: Register = %v, want success or ErrInvalid naming the ttl", ttl, err)
		return
	}
	if got, err := lookupIDs(t, r, svc); err != nil || len(got) != 0 {
		t.Errorf("TTL %v rejected, but %s holds %v (err %v), want nothing written", ttl, svc, got, err)
	}
}

func deregisterNow(l *registry.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = l.Deregister(ctx)
}
