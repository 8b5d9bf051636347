package policy_test

import (
	"reflect"
	"testing"

	"github.com/roster-go/roster/policy"
	"github.com/roster-go/roster/selector"
)

// FuzzParse: Parse never panics; what it accepts Validate accepts,
// Marshal writes back to an equal policy, and a selector takes its
// options (the policy's checks are the selector's).
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"strategy": "maglev", "hash_key": "k"}`,
		`{"split": [{"version": "v2", "percent": 5}]}`,
		`{"split": [{"version": "v1", "percent": 50}, {"version": "v2", "percent": 50}]}`,
		`{"retry": {"attempts": 2, "retry_on": ["timeout"], "idempotent": true, "per_try_timeout": "1s"}}`,
		`{"hedge": {"delay": "5ms"}, "timeout": "1s", "locality": {"zone": "a"}}`,
		`{"outlier": {"consecutive_failures": 2, "base_ejection": "1s", "panic_threshold": -1}}`,
		`{"filter": {"metadata": {"a": "b"}, "tag": "t"}}`, `{"split": [{"tag": "c", "percent": 1e-300}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := policy.Parse(b)
		_ = p.Validate()
		_ = p.WithDefaults().Validate()
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("Parse accepted %q, Validate says %v", b, err)
		}
		out, err := policy.Marshal(p)
		if err != nil {
			t.Fatalf("Marshal of a parsed policy: %v", err)
		}
		q, err := policy.Parse(out)
		if err != nil || !reflect.DeepEqual(p, q) {
			t.Fatalf("round trip of %q: %s, %v\n%+v\n%+v", b, out, err, p, q)
		}
		if err := p.WithDefaults().Validate(); err != nil {
			t.Fatalf("WithDefaults of %q is invalid: %v", b, err)
		}
		opts, err := p.SelectorOptions()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := selector.New(opts...); err != nil {
			t.Fatalf("policy %q is valid, its selector options are not: %v", b, err)
		}
	})
}
