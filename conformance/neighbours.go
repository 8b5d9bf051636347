package conformance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// The checks of this file are about neighbours: other writers of the
// same keyspace (another team, a script, another tool) who write records
// Roster did not validate.

// ForeignWriter is implemented by harnesses that can write a record the
// way another writer of the backend could: raw, with nothing keeping it
// alive, under a key or node name that sorts before Roster's own.
// ForeignDuplicateNeverWins uses it to claim a live instance's ID.
type ForeignWriter interface {
	// WriteForeign writes in (Service, ID, Address, Weight) as a record
	// of its own, beside any record of the same ID, and returns what
	// removes it. A backend that keeps one record per service and ID
	// (a key or path named by both) returns errors.ErrUnsupported: a
	// second record of an ID cannot exist there.
	WriteForeign(ctx context.Context, in registry.Instance) (remove func(context.Context) error, err error)
}

// Addresses no registry may serve, whoever wrote them.
const (
	metadataAddr  = "169.254.169.254:80"
	multicastAddr = "224.0.0.251:5353"
)

// foreignDuplicate: a record claiming a live instance's ID, written by a
// neighbour under a key or node that sorts first and at the highest
// weight, does not replace the live instance in Lookup or Watch.
func foreignDuplicate(t TB, s *suite) {
	fw := s.h.(ForeignWriter)
	r, obs := s.open(t), s.observer(t)
	svc := service("dup")
	real := s.register(t, r, s.inst(svc)).Instance()
	w := s.watch(t, obs, svc)
	s.waitCount(t, obs, svc, 1, "the live instance")

	fake := registry.Instance{ID: real.ID, Service: svc, Address: "10.6.6.6:1", Weight: 65535}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	remove, err := fw.WriteForeign(ctx, fake)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("n/a: the backend keeps one record per service and ID: a duplicate cannot exist")
	}
	if err != nil {
		t.Fatalf("Harness.WriteForeign(%s at %s): %v", fake.ID, fake.Address, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = remove(ctx)
	})
	// A registration made after the foreign write is the barrier: once
	// readers see it, they have read the foreign record too.
	marker := s.register(t, r, s.inst(svc)).Instance()
	served := func(snap registry.Snapshot) (bool, string) {
		got, ok := snap.Find(real.ID)
		_, hasMarker := snap.Find(marker.ID)
		return ok && hasMarker && got.Address == real.Address && got.Weight == real.Weight,
			fmt.Sprintf("%s: %s at %s weight %d (the live one is at %s weight %d)",
				describe(&snap), real.ID, got.Address, got.Weight, real.Address, real.Weight)
	}
	eventually(t, s.cfg.Propagation, "the marker seen by a watcher, the live instance kept", func() (bool, string) {
		snap, err := next(t, w, s.cfg.Propagation)
		if err != nil {
			return false, err.Error()
		}
		if _, ok := snap.Find(marker.ID); !ok {
			return false, "marker not yet seen: " + describe(&snap)
		}
		if ok, why := served(snap); !ok {
			t.Fatalf("Watch serves the foreign duplicate: %s", why)
		}
		return true, ""
	})
	for name, reg := range map[string]*registry.Registry{"the observer": obs, "a new registry": s.open(t)} {
		snap, err := reg.Lookup(t.Context(), svc)
		if err != nil {
			t.Fatalf("Lookup on %s: %v", name, err)
		}
		if ok, why := served(snap); !ok {
			t.Fatalf("Lookup on %s serves the foreign duplicate: %s", name, why)
		}
	}
}

// undialableRefused: Register refuses the cloud metadata address and a
// multicast one, as primary or endpoint, naming the field, and writes
// nothing.
func undialableRefused(t TB, s *suite) {
	r := s.open(t)
	svc := service("undial")
	for _, c := range []struct {
		in    registry.Instance
		field string
	}{
		{registry.Instance{Service: svc, Address: metadataAddr}, "address"},
		{registry.Instance{Service: svc, Address: multicastAddr}, "address"},
		{registry.Instance{Service: svc, Endpoints: []registry.Endpoint{{Name: "meta", Address: metadataAddr}}}, "address"},
		{registry.Instance{Service: svc, Address: addr(), Endpoints: []registry.Endpoint{
			{Name: "http", Address: addr()}, {Name: "meta", Address: metadataAddr}}}, "endpoints[1].address"},
	} {
		_, err := r.Register(t.Context(), c.in, registry.WithTTL(s.cfg.TTL))
		var fe *driver.FieldError
		if !errors.Is(err, registry.ErrInvalid) || !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("Register(%s, endpoints %v) = %v, want ErrInvalid on %s", c.in.Address, c.in.Endpoints, err, c.field)
		}
	}
	if ids, err := lookupIDs(t, r, svc); err != nil || len(ids) != 0 {
		t.Fatalf("after refused registrations: %v, %v; want nothing", ids, err)
	}
}

// undialableNotServed: records with such addresses that a neighbour
// wrote (through a driver, without the registry's checks, or raw where
// the harness can) are never served by Lookup or Watch.
func undialableNotServed(t TB, s *suite) {
	r, obs := s.open(t), s.observer(t)
	svc := service("undialread")
	w := s.watch(t, obs, svc)
	raw, err := s.h.MakeDriver(t.Context())
	if err != nil {
		t.Fatalf("Harness.MakeDriver: %v", err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	var bad []string
	for i, a := range []string{metadataAddr, multicastAddr} {
		in := registry.Instance{ID: fmt.Sprintf("undial-%d", i), Service: svc, Address: a, Weight: 65535}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		reg, err := raw.Register(ctx, in, max(s.cfg.TTL, 10*time.Second))
		cancel()
		if err != nil {
			t.Logf("the backend refuses %s itself: %v", a, err) // Kubernetes does
			continue
		}
		bad = append(bad, in.ID)
		t.Cleanup(func() { _ = reg.Deregister(context.Background()) })
	}
	if fw, ok := s.h.(ForeignWriter); ok {
		in := registry.Instance{ID: "undial-raw", Service: svc, Address: metadataAddr, Weight: 65535}
		remove, err := fw.WriteForeign(t.Context(), in)
		switch {
		case err == nil:
			bad = append(bad, in.ID)
			t.Cleanup(func() { _ = remove(context.Background()) })
		case !errors.Is(err, errors.ErrUnsupported):
			t.Logf("the backend refuses %s itself: %v", in.Address, err)
		}
	}
	marker := s.register(t, r, s.inst(svc)).Instance()
	s.notServed(t, obs, w, svc, marker.ID, bad)
}

// notServed waits for marker, written after the records of bad, to reach
// w and Lookup, then fails if any of bad is served.
func (s *suite) notServed(t TB, obs *registry.Registry, w *registry.Watcher, svc, marker string, bad []string) {
	t.Helper()
	check := func(how string, snap registry.Snapshot) (bool, string) {
		if _, ok := snap.Find(marker); !ok {
			return false, "marker not yet seen: " + describe(&snap)
		}
		for _, id := range bad {
			if in, ok := snap.Find(id); ok {
				t.Fatalf("%s serves %s at %s", how, id, in.Address)
			}
		}
		return true, ""
	}
	eventually(t, s.cfg.Propagation, "the marker seen by a watcher", func() (bool, string) {
		snap, err := next(t, w, s.cfg.Propagation)
		if err != nil {
			return false, err.Error()
		}
		return check("Watch", snap)
	})
	for name, reg := range map[string]*registry.Registry{"the observer": obs, "a new registry": s.open(t)} {
		snap, err := reg.Lookup(t.Context(), svc)
		if err != nil {
			t.Fatalf("Lookup on %s: %v", name, err)
		}
		if ok, why := check("Lookup on "+name, snap); !ok {
			t.Fatalf("Lookup on %s: %s", name, why)
		}
	}
}

// roUndialableNotServed: on a read-only backend, an instance published
// at the metadata address through the server's own API is not served.
func roUndialableNotServed(t TB, s *suite, ro ReadOnly) {
	obs := s.observer(t)
	svc := service("undialro")
	w := s.watch(t, obs, svc)
	bad := publish(t, ro, registry.Instance{Service: svc, Address: metadataAddr, Weight: 100})
	marker := publish(t, ro, s.inst(svc))
	s.notServed(t, obs, w, svc, marker, []string{bad})
}
