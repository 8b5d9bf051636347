package policy

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/roster-go/roster/registry"
)

// Prefix is where policies are stored in a registry's records: the
// policy of service s is the record Prefix + s (see Key).
const Prefix = "policy/"

// Key returns the record key of a service's stored policy.
func Key(service string) string { return Prefix + service }

// Stored is a policy read from a registry.
type Stored struct {
	Service string
	Policy  Policy
	// Version is the record's version, a precondition for Put and
	// Delete (PutIf, DeleteIf) that read-modify-write safely.
	Version string
	// Err is set when the record does not hold a valid policy (written
	// by hand, or by a newer Roster): Policy is then the zero Policy.
	Err error
}

func checkService(service string) error {
	if service == "" || strings.Contains(service, "/") {
		return fieldErr("service", "%q (want a service name, without '/')", service)
	}
	return nil
}

// Put validates p and stores it as the policy of service, for every
// client of the fleet that follows stored policies
// (middleware.WithStoredPolicies). An invalid policy is a *FieldError and
// nothing is written. It returns the stored record's version.
func Put(ctx context.Context, reg *registry.Registry, service string, p Policy) (string, error) {
	return PutIf(ctx, reg, service, p, "")
}

// PutIf is Put with a version precondition: "" writes unconditionally,
// registry.VersionAbsent only if the service has no stored policy, any
// other version only if the stored one is at it (else the error wraps
// registry.ErrConflict and nothing is written).
func PutIf(ctx context.Context, reg *registry.Registry, service string, p Policy, ifVersion string) (string, error) {
	if err := checkService(service); err != nil {
		return "", err
	}
	b, err := Marshal(p)
	if err != nil {
		return "", err
	}
	rs, err := reg.Records()
	if err != nil {
		return "", err
	}
	rec, err := rs.Put(ctx, registry.Record{Key: Key(service), Value: b, Version: ifVersion})
	if err != nil {
		return "", err
	}
	return rec.Version, nil
}

// Get returns the stored policy of service. A service without one is an
// error wrapping registry.ErrNotFound; a record that does not hold a
// valid policy returns that error, with the Stored's Version.
func Get(ctx context.Context, reg *registry.Registry, service string) (Stored, error) {
	if err := checkService(service); err != nil {
		return Stored{}, err
	}
	rs, err := reg.Records()
	if err != nil {
		return Stored{}, err
	}
	rec, err := rs.Get(ctx, Key(service))
	if err != nil {
		return Stored{}, err
	}
	s := decode(rec)
	return s, s.Err
}

// List returns every stored policy, sorted by service. Records that do
// not hold a valid policy are listed with Err set.
func List(ctx context.Context, reg *registry.Registry) ([]Stored, error) {
	rs, err := reg.Records()
	if err != nil {
		return nil, err
	}
	recs, err := rs.List(ctx, Prefix)
	if err != nil {
		return nil, err
	}
	return decodeAll(recs), nil
}

// Delete removes the stored policy of service; clients that followed it
// go back to the policies set in their code. Deleting a policy that is
// not stored is not an error.
func Delete(ctx context.Context, reg *registry.Registry, service string) error {
	return DeleteIf(ctx, reg, service, "")
}

// DeleteIf is Delete with a version precondition, as for PutIf.
func DeleteIf(ctx context.Context, reg *registry.Registry, service, ifVersion string) error {
	if err := checkService(service); err != nil {
		return err
	}
	rs, err := reg.Records()
	if err != nil {
		return err
	}
	return rs.Delete(ctx, Key(service), ifVersion)
}

// Watcher follows the stored policies (see Watch).
type Watcher struct {
	w       *registry.RecordWatcher
	service string
	last    []Stored // of service, when one is watched
	sent    bool
}

// Watch follows the stored policy of service, or of every service when
// service is "". Each Next returns the current policies.
func Watch(ctx context.Context, reg *registry.Registry, service string) (*Watcher, error) {
	if service != "" {
		if err := checkService(service); err != nil {
			return nil, err
		}
	}
	rs, err := reg.Records()
	if err != nil {
		return nil, err
	}
	w, err := rs.Watch(ctx, Prefix)
	if err != nil {
		return nil, err
	}
	return &Watcher{w: w, service: service}, nil
}

// Next blocks until the watched policies change and returns them all,
// sorted by service (none, or one, for a watch of one service: the
// changes of other services' policies are skipped). While the registry
// fails it returns the last policies read with an error wrapping
// registry.ErrUnavailable, and reconnects on the next call;
// registry.ErrClosed and the context's error are final.
func (w *Watcher) Next(ctx context.Context) ([]Stored, error) {
	for {
		set, err := w.w.Next(ctx)
		if err != nil && !errors.Is(err, registry.ErrUnavailable) {
			return nil, err
		}
		all := decodeAll(set.Records)
		if w.service == "" {
			return all, err
		}
		var one []Stored
		for _, s := range all {
			if s.Service == w.service {
				one = append(one, s)
			}
		}
		if err == nil && w.sent && sameVersions(one, w.last) {
			continue // another service's policy changed
		}
		w.last, w.sent = one, true
		return one, err
	}
}

func sameVersions(a, b []Stored) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Version != b[i].Version {
			return false
		}
	}
	return true
}

// Close stops the watch.
func (w *Watcher) Close() error { return w.w.Close() }

func decodeAll(recs []registry.Record) []Stored {
	out := make([]Stored, 0, len(recs))
	for _, rec := range recs {
		name := strings.TrimPrefix(rec.Key, Prefix)
		if strings.Contains(name, "/") {
			continue // not a policy record: a deeper key under policy/
		}
		out = append(out, decode(rec))
	}
	return out
}

func decode(rec registry.Record) Stored {
	s := Stored{Service: strings.TrimPrefix(rec.Key, Prefix), Version: rec.Version}
	p, err := Parse(rec.Value)
	if err != nil {
		s.Err = fmt.Errorf("stored policy of %s (version %s): %w", s.Service, rec.Version, err)
		return s
	}
	s.Policy = p
	return s
}
