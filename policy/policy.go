// Package policy is the traffic policy of one service, as data. It says
// how a client picks the service's instances: the strategy, a filter, a
// canary split and a locality zone. It says how calls are retried,
// hedged and bounded in time. A Policy is plain JSON. It can be written by
// hand, kept in a file or in the registry, and changed while clients run.
//
//	p, err := policy.Parse([]byte(`{"strategy": "consistent_hash",
//		"split": [{"version": "v2", "percent": 5}], "retry": {"attempts": 2}}`))
//	if err != nil { ... } // a *FieldError names the field
//	err = client.SetPolicy("user-svc", p) // middleware.Client, state kept
//
// A field left out keeps the client's setting, else the default. So a
// policy says only what it changes, and [Default] lists the defaults.
// [Parse] and [Marshal] are strict and validate. Unknown fields are
// rejected. An invalid value is a [*FieldError] that names the field,
// such as "split[1].percent", and wraps registry.ErrInvalid. See
// docs/policy.md for every field.
package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// Policy is the traffic policy of one service. The zero Policy changes
// nothing: every field takes the client's configuration, else the
// default.
type Policy struct {
	// Strategy is a selector strategy name ("p2c_ewma", "round_robin",
	// "consistent_hash", … as selector.Strategies lists them).
	Strategy string `json:"strategy,omitempty"`
	// HashKey names the request header (contrib/rosterhttp) or metadata
	// key whose value is the call's affinity key for consistent_hash and
	// maglev, and for placing a caller on one side of a split.
	HashKey string `json:"hash_key,omitempty"`
	// Filter keeps only the instances it matches.
	Filter *Filter `json:"filter,omitempty"`
	// Split sends a share of the calls to a canary.
	Split []SplitEntry `json:"split,omitempty"`
	// Locality prefers the instances of one zone while they are usable.
	Locality *Locality `json:"locality,omitempty"`
	// Retry says which failed calls are tried again, how often.
	Retry *Retry `json:"retry,omitempty"`
	// Hedge starts a second attempt when the first is slow.
	Hedge *Hedge `json:"hedge,omitempty"`
	// Timeout bounds each whole call, retries included (0: the caller's
	// context alone).
	Timeout Duration `json:"timeout,omitempty"`
	// Outlier ejects failing instances for a while.
	Outlier *Outlier `json:"outlier,omitempty"`
}

// Filter keeps the instances that match every field it sets.
type Filter struct {
	Version  string            `json:"version,omitempty"`
	Zone     string            `json:"zone,omitempty"`
	Tag      string            `json:"tag,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// SplitEntry is one side of a split: the instances of a version, or
// carrying a tag, get Percent of the calls.
type SplitEntry struct {
	Version string  `json:"version,omitempty"`
	Tag     string  `json:"tag,omitempty"`
	Percent float64 `json:"percent"`
}

// Locality prefers the instances of Zone: they get the calls while they
// are usable, and traffic spills to the others as they fail (see
// selector.WithLocality). A policy stored for a whole fleet usually
// leaves it out, since each caller's own zone differs: give the client
// its zone instead.
type Locality struct {
	Zone string `json:"zone,omitempty"`
	// Region is the caller's region (selector.WithRegion): the other
	// zones of the region are the second tier. It needs Zone.
	Region string `json:"region,omitempty"`
	// Overprovisioning is the factor of the tiers' health, from 1 to
	// 100 (selector.WithOverprovisioning; 0: the default 1.4).
	Overprovisioning float64 `json:"overprovisioning,omitempty"`
	// PanicThreshold is the usable percentage under which a tier is in
	// panic, a whole number from 1 to 100, or -1 for no panic mode
	// (selector.WithPanicThreshold; 0: the client's, default 50).
	PanicThreshold float64 `json:"panic_threshold,omitempty"`
	// A selector's locality is fixed when it is built: a change of these
	// fields, or of Zone, on a service already called is an error.
}

// Retry says which failed calls are tried again on another instance.
type Retry struct {
	// Attempts, the first included (default 3; 1 turns retries off).
	Attempts int `json:"attempts,omitempty"`
	// BudgetRatio caps retries (and hedges) to this share of the calls
	// of the last 10 s (default 0.2), so an outage does not multiply load.
	BudgetRatio float64 `json:"budget_ratio,omitempty"`
	// PerTryTimeout bounds each attempt (0: none but the call's).
	PerTryTimeout Duration `json:"per_try_timeout,omitempty"`
	// RetryOn lists the failures retried: "connection" (refused, reset,
	// unreachable), "timeout" (an attempt's deadline), "retryable" (any
	// failure the classifier calls retryable, the two others included).
	// Default: ["retryable"].
	RetryOn []string `json:"retry_on,omitempty"`
	// Idempotent says whether a call may run twice. When false, a call is
	// retried only where it cannot have reached the instance: the pick
	// failed, or the connection was refused. Left out: the client's
	// setting (middleware.WithIdempotent, default true).
	Idempotent *bool `json:"idempotent,omitempty"`
}

// Retry classes, for Retry.RetryOn.
const (
	RetryOnConnection = "connection"
	RetryOnTimeout    = "timeout"
	RetryOnRetryable  = "retryable"
)

var retryClasses = []string{RetryOnConnection, RetryOnTimeout, RetryOnRetryable}

// Hedge starts another attempt, on another instance, when the first has
// not answered within Delay (set it near the service's p95 latency).
type Hedge struct {
	Delay Duration `json:"delay,omitempty"`
	// MaxHedges is how many extra attempts may run (default 1, the only
	// value middleware.Hedge supports yet).
	MaxHedges int `json:"max_hedges,omitempty"`
}

// Outlier ejects an instance after failures in a row (the client's
// quarantine; see middleware.QuarantineConfig).
type Outlier struct {
	// ConsecutiveFailures ejects an instance after this many failures in
	// a row (default 5).
	ConsecutiveFailures int `json:"consecutive_failures,omitempty"`
	// BaseEjection is the first ejection's length, growing with each
	// (default 30s), up to MaxEjection (default 300s).
	BaseEjection Duration `json:"base_ejection,omitempty"`
	MaxEjection  Duration `json:"max_ejection,omitempty"`
	// MaxEjectedPercent caps the share of instances ejected at once
	// (default 10).
	MaxEjectedPercent int `json:"max_ejected_percent,omitempty"`
	// PanicThreshold: below this percent of admitted instances, ejections
	// are ignored (default 50).
	PanicThreshold int `json:"panic_threshold,omitempty"`
}

// Duration is a time.Duration written in JSON as a string that
// time.ParseDuration reads ("250ms", "2s").
type Duration time.Duration

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	// An UnmarshalTypeError, which the decoder gives the field's path.
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &json.UnmarshalTypeError{Value: "non-string", Type: durationType}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return &json.UnmarshalTypeError{Value: fmt.Sprintf("string %q", s), Type: durationType}
	}
	*d = Duration(v)
	return nil
}

var durationType = reflect.TypeFor[Duration]()

// FieldError reports an invalid field of a Policy. It wraps
// registry.ErrInvalid.
type FieldError struct {
	Field  string // the JSON path: "split[1].percent", "retry.attempts"
	Reason string // what is wrong, and what is wanted
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return "policy: " + e.Reason
	}
	return "policy: " + e.Field + ": " + e.Reason
}

// Unwrap makes errors.Is(err, registry.ErrInvalid) hold.
func (e *FieldError) Unwrap() error { return registry.ErrInvalid }

func fieldErr(field, format string, a ...any) *FieldError {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, a...)}
}

// Limits of the fields, generous but bounded: a policy written by hand
// with a typo of three zeros is an error, not a client that waits a day.
const (
	maxAttempts = 10
	maxDuration = time.Hour
	maxNameLen  = 253
)

// Default returns the policy a service gets when nothing is said: every
// field at the default of the layer it configures.
func Default() Policy {
	idem := true
	return Policy{
		Strategy: string(selector.DefaultStrategy),
		Retry: &Retry{Attempts: 3, BudgetRatio: 0.2, RetryOn: []string{RetryOnRetryable},
			Idempotent: &idem},
		Outlier: &Outlier{ConsecutiveFailures: 5, BaseEjection: Duration(30 * time.Second),
			MaxEjection: Duration(300 * time.Second), MaxEjectedPercent: 10, PanicThreshold: 50},
	}
}

// WithDefaults returns p with every field it leaves out set to Default's.
// Sections it has keep their values, their empty fields filled in.
func (p Policy) WithDefaults() Policy {
	d := Default()
	if p.Strategy == "" {
		p.Strategy = d.Strategy
	}
	if p.Retry == nil {
		p.Retry = d.Retry
	} else {
		r := *p.Retry
		r.Attempts = orDefault(r.Attempts, d.Retry.Attempts)
		r.BudgetRatio = orDefault(r.BudgetRatio, d.Retry.BudgetRatio)
		if len(r.RetryOn) == 0 {
			r.RetryOn = d.Retry.RetryOn
		}
		if r.Idempotent == nil {
			r.Idempotent = d.Retry.Idempotent
		}
		p.Retry = &r
	}
	if p.Hedge != nil && p.Hedge.Delay > 0 && p.Hedge.MaxHedges == 0 {
		h := *p.Hedge
		h.MaxHedges = 1
		p.Hedge = &h
	}
	if p.Outlier == nil {
		p.Outlier = d.Outlier
	} else {
		o, do := *p.Outlier, d.Outlier
		o.ConsecutiveFailures = orDefault(o.ConsecutiveFailures, do.ConsecutiveFailures)
		o.BaseEjection = orDefault(o.BaseEjection, do.BaseEjection)
		o.MaxEjection = orDefault(o.MaxEjection, max(do.MaxEjection, o.BaseEjection))
		o.MaxEjectedPercent = orDefault(o.MaxEjectedPercent, do.MaxEjectedPercent)
		o.PanicThreshold = orDefault(o.PanicThreshold, do.PanicThreshold)
		p.Outlier = &o
	}
	return p
}

func orDefault[T int | float64 | Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// Parse reads a policy from JSON and validates it. Unknown fields,
// trailing data and invalid values are errors; a *FieldError names the
// field.
func Parse(b []byte) (Policy, error) {
	var p Policy
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Policy{}, decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Policy{}, &FieldError{Reason: "trailing data after the policy object"}
	}
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	p.normalize()
	return p, nil
}

// normalize makes empty lists and maps nil, as Marshal leaves them out.
func (p *Policy) normalize() {
	if len(p.Split) == 0 {
		p.Split = nil
	}
	if p.Filter != nil && len(p.Filter.Metadata) == 0 {
		p.Filter.Metadata = nil
	}
	if p.Retry != nil && len(p.Retry.RetryOn) == 0 {
		p.Retry.RetryOn = nil
	}
}

var unknownField = regexp.MustCompile(`^json: unknown field "(.*)"$`)

// decodeError turns a decoding error into a FieldError where it names a
// field.
func decodeError(err error) error {
	if m := unknownField.FindStringSubmatch(err.Error()); m != nil {
		return fieldErr(m[1], "unknown field")
	}
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		want := te.Type.String()
		if te.Type == durationType {
			want = `duration string such as "250ms"`
		}
		return fieldErr(te.Field, "want a %s, not a JSON %s", want, te.Value)
	}
	if fe, ok := errors.AsType[*FieldError](err); ok {
		return fe
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		msg = "not a complete JSON object"
	}
	return &FieldError{Reason: msg}
}

// Marshal returns p as JSON, after validating it: what Marshal writes,
// Parse reads back equal.
func Marshal(p Policy) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(p)
}

// Validate reports the first invalid field of p as a *FieldError, or nil.
// Every field is checked, the zero Policy is valid.
func (p Policy) Validate() error {
	if p.Strategy != "" {
		if _, err := selector.ParseStrategy(p.Strategy); err != nil {
			return fieldErr("strategy", "unknown strategy %q (known: %v)", p.Strategy, selector.Strategies())
		}
	}
	if err := name("hash_key", p.HashKey); err != nil {
		return err
	}
	if f := p.Filter; f != nil {
		for _, fv := range []struct{ field, v string }{{"filter.version", f.Version}, {"filter.zone", f.Zone}, {"filter.tag", f.Tag}} {
			if err := name(fv.field, fv.v); err != nil {
				return err
			}
		}
		for k, v := range f.Metadata {
			if k == "" {
				return fieldErr("filter.metadata", "empty key")
			}
			if err := name("filter.metadata."+k, k+v); err != nil {
				return err
			}
		}
	}
	if err := validateSplit(p.Split); err != nil {
		return err
	}
	if l := p.Locality; l != nil {
		if err := name("locality.zone", l.Zone); err != nil {
			return err
		}
		if err := name("locality.region", l.Region); err != nil {
			return err
		}
		switch pt := l.PanicThreshold; {
		case l.Region != "" && l.Zone == "":
			return fieldErr("locality.region", "%q without a zone (want locality.zone too)", l.Region)
		case l.Overprovisioning != 0 && !(l.Overprovisioning >= 1 && l.Overprovisioning <= 100):
			return fieldErr("locality.overprovisioning", "%v (want 1 to 100; 0: the default 1.4)", l.Overprovisioning)
		case pt != 0 && (pt != math.Trunc(pt) || pt < -1 || pt > 100):
			return fieldErr("locality.panic_threshold", "%v (want a whole number from 1 to 100, or -1 for no panic mode)", pt)
		}
	}
	if r := p.Retry; r != nil {
		if r.Attempts < 0 || r.Attempts > maxAttempts {
			return fieldErr("retry.attempts", "%d (want 1 to %d, the first attempt included)", r.Attempts, maxAttempts)
		}
		if !(r.BudgetRatio >= 0 && r.BudgetRatio <= 1) {
			return fieldErr("retry.budget_ratio", "%v (want 0 to 1; 0: the default 0.2)", r.BudgetRatio)
		}
		if err := duration("retry.per_try_timeout", r.PerTryTimeout); err != nil {
			return err
		}
		for i, c := range r.RetryOn {
			if !slices.Contains(retryClasses, c) {
				return fieldErr(fmt.Sprintf("retry.retry_on[%d]", i), "unknown class %q (known: %v)", c, retryClasses)
			}
		}
	}
	if h := p.Hedge; h != nil {
		if err := duration("hedge.delay", h.Delay); err != nil {
			return err
		}
		if h.MaxHedges < 0 || h.MaxHedges > 1 {
			return fieldErr("hedge.max_hedges", "%d (want 0 or 1: more hedges are not supported yet)", h.MaxHedges)
		}
	}
	if err := duration("timeout", p.Timeout); err != nil {
		return err
	}
	if o := p.Outlier; o != nil {
		switch {
		case o.ConsecutiveFailures < 0 || o.ConsecutiveFailures > 1000:
			return fieldErr("outlier.consecutive_failures", "%d (want 1 to 1000; 0: the default 5)", o.ConsecutiveFailures)
		case o.MaxEjectedPercent < 0 || o.MaxEjectedPercent > 100:
			return fieldErr("outlier.max_ejected_percent", "%d (want 0 to 100)", o.MaxEjectedPercent)
		case o.PanicThreshold < -1 || o.PanicThreshold > 100:
			return fieldErr("outlier.panic_threshold", "%d (want 0 to 100, or -1 for no panic mode)", o.PanicThreshold)
		}
		if err := duration("outlier.base_ejection", o.BaseEjection); err != nil {
			return err
		}
		if err := duration("outlier.max_ejection", o.MaxEjection); err != nil {
			return err
		}
		if o.MaxEjection != 0 && o.MaxEjection < o.BaseEjection {
			return fieldErr("outlier.max_ejection", "%v is below base_ejection %v", time.Duration(o.MaxEjection), time.Duration(o.BaseEjection))
		}
	}
	return nil
}

// name checks a name-like string: bounded, printable.
func name(field, s string) error {
	if len(s) > maxNameLen {
		return fieldErr(field, "%d bytes (want at most %d)", len(s), maxNameLen)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == '\uFFFD' {
			return fieldErr(field, "%q has a control or invalid character", s)
		}
	}
	return nil
}

func duration(field string, d Duration) error {
	if d < 0 {
		return fieldErr(field, "negative duration %v", time.Duration(d))
	}
	if time.Duration(d) > maxDuration {
		return fieldErr(field, "%v (want at most %v)", time.Duration(d), maxDuration)
	}
	return nil
}

// validateSplit checks the split: each entry names a version or a tag
// and a percent in [0, 100], the total is at most 100, and the shape is
// one the selector runs (one canary and the rest, or two sides that take
// every call).
func validateSplit(split []SplitEntry) error {
	total := 0.0
	for i, e := range split {
		f := fmt.Sprintf("split[%d]", i)
		if (e.Version == "") == (e.Tag == "") {
			return fieldErr(f, "want exactly one of version and tag")
		}
		if err := name(f+".version", e.Version); err != nil {
			return err
		}
		if err := name(f+".tag", e.Tag); err != nil {
			return err
		}
		if !(e.Percent >= 0 && e.Percent <= 100) {
			return fieldErr(f+".percent", "%v (want 0 to 100)", e.Percent)
		}
		if total += e.Percent; total > 100+1e-9 {
			return fieldErr(f+".percent", "the split's percents add up to %v, over 100", total)
		}
	}
	switch {
	case len(split) > 2:
		return fieldErr("split", "%d sides: one canary and the rest, or two sides, are supported", len(split))
	case len(split) == 2:
		a, b := split[0], split[1]
		if math.Abs(a.Percent+b.Percent-100) > 1e-9 {
			return fieldErr("split[1].percent", "two sides must add up to 100, not %v", a.Percent+b.Percent)
		}
		if a.Version == "" || b.Version == "" {
			return fieldErr("split", "two sides must both name a version")
		}
		if a.Version == b.Version {
			return fieldErr("split[1].version", "%q is the other side's too", b.Version)
		}
	}
	return nil
}
