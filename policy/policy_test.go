package policy_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/policy"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// TestParseRejects: each bad policy fails with a *FieldError naming the
// field, wrapping registry.ErrInvalid.
func TestParseRejects(t *testing.T) {
	for _, tc := range []struct{ json, field string }{
		{`{"strategy": "fastest"}`, "strategy"},
		{`{"stratgy": "p2c_ewma"}`, "stratgy"},
		{`{"retry": {"attempts": 3, "backoff": "1s"}}`, "backoff"},
		{`{"split": [{"version": "v1", "percent": 60}, {"version": "v2", "percent": 50}]}`, "split[1].percent"},
		{`{"split": [{"version": "v2", "percent": 101}]}`, "split[0].percent"},
		{`{"split": [{"version": "v2", "percent": -1}]}`, "split[0].percent"},
		{`{"split": [{"version": "v2", "tag": "x", "percent": 5}]}`, "split[0]"},
		{`{"split": [{"percent": 5}]}`, "split[0]"},
		{`{"split": [{"version": "v1", "percent": 50}, {"version": "v2", "percent": 40}]}`, "split[1].percent"},
		{`{"split": [{"version": "a", "percent": 10}, {"version": "b", "percent": 10}, {"version": "c", "percent": 10}]}`, "split"},
		{`{"timeout": "-1s"}`, "timeout"},
		{`{"timeout": "2h"}`, "timeout"},
		{`{"timeout": 5}`, "timeout"},
		{`{"timeout": "soon"}`, "timeout"},
		{`{"retry": {"attempts": -1}}`, "retry.attempts"},
		{`{"retry": {"attempts": 11}}`, "retry.attempts"},
		{`{"retry": {"budget_ratio": 2}}`, "retry.budget_ratio"},
		{`{"retry": {"per_try_timeout": "-5ms"}}`, "retry.per_try_timeout"},
		{`{"retry": {"retry_on": ["retryable", "5xx"]}}`, "retry.retry_on[1]"},
		{`{"retry": {"attempts": "3"}}`, "retry.attempts"},
		{`{"hedge": {"delay": "-1ms"}}`, "hedge.delay"},
		{`{"hedge": {"delay": "10ms", "max_hedges": 2}}`, "hedge.max_hedges"},
		{`{"locality": {"region": "eu"}}`, "locality.region"},
		{`{"locality": {"overprovisioning": 0.5}}`, "locality.overprovisioning"},
		{`{"locality": {"panic_threshold": 50.5}}`, "locality.panic_threshold"},
		{`{"outlier": {"consecutive_failures": -2}}`, "outlier.consecutive_failures"},
		{`{"outlier": {"max_ejected_percent": 101}}`, "outlier.max_ejected_percent"},
		{`{"outlier": {"base_ejection": "1m", "max_ejection": "10s"}}`, "outlier.max_ejection"},
		{`{"hash_key": "a\nb"}`, "hash_key"},
		{`{"filter": {"version": "` + strings.Repeat("v", 300) + `"}}`, "filter.version"},
		{`{} {}`, ""},
		{`{"strategy": `, ""},
		{`[]`, ""},
	} {
		_, err := policy.Parse([]byte(tc.json))
		var fe *policy.FieldError
		if !errors.As(err, &fe) {
			t.Errorf("Parse(%s) = %v, want a *FieldError", tc.json, err)
			continue
		}
		if fe.Field != tc.field {
			t.Errorf("Parse(%s): field %q (%v), want %q", tc.json, fe.Field, err, tc.field)
		}
		if !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("Parse(%s) = %v, does not wrap registry.ErrInvalid", tc.json, err)
		}
	}
}

// TestParseRoundTrip: every field parses, and Marshal writes what Parse
// reads back equal.
func TestParseRoundTrip(t *testing.T) {
	in := `{
		"strategy": "consistent_hash", "hash_key": "X-User-ID",
		"filter": {"zone": "a", "tag": "blue", "metadata": {"tier": "gold"}},
		"split": [{"version": "v1", "percent": 80}, {"version": "v2", "percent": 20}],
		"locality": {"zone": "a"},
		"retry": {"attempts": 2, "budget_ratio": 0.1, "per_try_timeout": "150ms",
			"retry_on": ["connection", "timeout"], "idempotent": false},
		"hedge": {"delay": "20ms", "max_hedges": 1},
		"timeout": "2s",
		"outlier": {"consecutive_failures": 3, "base_ejection": "10s", "max_ejection": "1m",
			"max_ejected_percent": 30, "panic_threshold": -1}
	}`
	p, err := policy.Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if p.Retry.PerTryTimeout != policy.Duration(150*time.Millisecond) || *p.Retry.Idempotent || p.Split[1].Percent != 20 {
		t.Fatalf("parsed %+v", p)
	}
	b, err := policy.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	q, err := policy.Parse(b)
	if err != nil {
		t.Fatalf("Parse(Marshal) = %v\n%s", err, b)
	}
	if !reflect.DeepEqual(p, q) {
		t.Fatalf("round trip changed the policy:\n%+v\n%+v", p, q)
	}
	if b, _ := policy.Marshal(policy.Policy{}); string(b) != "{}" {
		t.Errorf("Marshal(zero) = %s, want {}", b)
	}
	if _, err := policy.Marshal(policy.Policy{Strategy: "fastest"}); err == nil {
		t.Error("Marshal of an invalid policy succeeded")
	}
}

// TestDefaults: Default is valid and what WithDefaults fills in; a
// policy's own values stay.
func TestDefaults(t *testing.T) {
	d := policy.Default()
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := (policy.Policy{}).WithDefaults(); !reflect.DeepEqual(got, d) {
		t.Errorf("zero.WithDefaults() = %+v, want Default() %+v", got, d)
	}
	p := policy.Policy{Strategy: "round_robin", Retry: &policy.Retry{Attempts: 5},
		Outlier: &policy.Outlier{BaseEjection: policy.Duration(time.Hour)}}
	w := p.WithDefaults()
	if w.Strategy != "round_robin" || w.Retry.Attempts != 5 || w.Retry.BudgetRatio != 0.2 || !*w.Retry.Idempotent {
		t.Errorf("WithDefaults = %+v %+v", w, *w.Retry)
	}
	if w.Outlier.MaxEjection != policy.Duration(time.Hour) || w.Outlier.ConsecutiveFailures != 5 {
		t.Errorf("WithDefaults outlier = %+v, want max_ejection raised to base_ejection", *w.Outlier)
	}
	if err := w.Validate(); err != nil {
		t.Errorf("WithDefaults made an invalid policy: %v", err)
	}
	if p.Retry.BudgetRatio != 0 {
		t.Error("WithDefaults modified its receiver's Retry")
	}
}

func instances() registry.Snapshot {
	s := registry.Snapshot{Service: "svc"}
	for i, v := range []string{"v1", "v1", "v1", "v2", "v2", "v3"} {
		s.Instances = append(s.Instances, registry.Instance{ID: string(rune('a' + i)), Service: "svc",
			Address: "10.0.0.1:80", Version: v, Weight: 100, Zone: []string{"a", "b"}[i%2],
			Metadata: map[string]string{"tier": []string{"gold", "iron"}[i%3/2]}})
	}
	return s
}

// TestSelectorOptions: the options a policy gives a selector do what
// the policy says: a two-version split excludes the third version and
// divides the calls, a filter keeps its instances.
func TestSelectorOptions(t *testing.T) {
	pick := func(p policy.Policy, n int) map[string]int {
		t.Helper()
		opts, err := p.SelectorOptions()
		if err != nil {
			t.Fatal(err)
		}
		s, err := selector.New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		s.Update(instances())
		got := map[string]int{}
		for range n {
			in, d, err := s.Pick(context.Background(), selector.PickOptions{})
			if err != nil {
				t.Fatal(err)
			}
			d.Done(nil, time.Millisecond)
			got[in.Version+"/"+in.Zone+"/"+in.Metadata["tier"]]++
		}
		return got
	}
	two := pick(policy.Policy{Split: []policy.SplitEntry{{Version: "v1", Percent: 70}, {Version: "v2", Percent: 30}}}, 10000)
	v1, v2 := 0, 0
	for k, n := range two {
		switch k[:2] {
		case "v1":
			v1 += n
		case "v2":
			v2 += n
		default:
			t.Errorf("%d calls to %s, outside the split", n, k)
		}
	}
	if v2 < 3000-4*46 || v2 > 3000+4*46 { // σ = √(10⁴·0.3·0.7) ≈ 46
		t.Errorf("v2 got %d of 10000, want 3000 ± 184", v2)
	}
	for k := range pick(policy.Policy{Strategy: "round_robin", Filter: &policy.Filter{Zone: "a", Metadata: map[string]string{"tier": "gold"}}}, 100) {
		if !strings.Contains(k, "/a/gold") {
			t.Errorf("filter let %s through", k)
		}
	}
	if _, err := (policy.Policy{Strategy: "nope"}).SelectorOptions(); err == nil {
		t.Error("SelectorOptions of an invalid policy succeeded")
	}
}
