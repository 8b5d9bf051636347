package registry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/internal/logbuf"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

func memRegistry(t *testing.T) (*registry.Registry, *memory.Server) {
	t.Helper()
	srv := memory.NewServer()
	r := registry.New(memory.NewDriver(srv))
	t.Cleanup(func() { _ = r.Close() })
	return r, srv
}

// Drained starts an instance at weight 0, written so from the first
// write; without it Weight 0 is DefaultWeight; the two cannot mix.
func TestRegisterDrained(t *testing.T) {
	r, _ := memRegistry(t)
	ctx := context.Background()
	l, err := r.Register(ctx, registry.Instance{Service: "s", Address: "h:1"}, registry.Drained())
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Lookup(ctx, "s")
	if got, ok := s.Find(l.Instance().ID); err != nil || !ok || got.Weight != 0 {
		t.Fatalf("drained registration stored as %+v (found %v, %v), want weight 0", got, ok, err)
	}
	if err := l.SetWeight(ctx, 10); err != nil {
		t.Fatal(err)
	}
	plain, err := r.Register(ctx, registry.Instance{Service: "s", Address: "h:2"})
	if err != nil || plain.Instance().Weight != registry.DefaultWeight {
		t.Fatalf("Weight 0 without Drained = %+v, %v; want DefaultWeight", plain.Instance(), err)
	}
	_, err = r.Register(ctx, registry.Instance{Service: "s", Address: "h:3", Weight: 5}, registry.Drained())
	var fe *driver.FieldError
	if !errors.As(err, &fe) || fe.Field != "weight" {
		t.Fatalf("Weight 5 with Drained = %v, want an error on weight", err)
	}
}

// Register stores the canonical address, so two spellings of one endpoint
// are one endpoint; input that cannot be canonicalised, or a weight past
// MaxWeight, is rejected naming the field and writes nothing.
func TestRegisterInputRules(t *testing.T) {
	r, _ := memRegistry(t)
	ctx := context.Background()
	l, err := r.Register(ctx, registry.Instance{Service: "s", Address: "API.Local:80"})
	if err != nil || l.Instance().Address != "api.local:80" {
		t.Fatalf("Register(API.Local:80) = %+v, %v; want address api.local:80", l.Instance(), err)
	}
	for _, tc := range []struct {
		in   registry.Instance
		want string
	}{
		{registry.Instance{Service: "t", Address: "h:+80"}, "address"},
		{registry.Instance{Service: "t", Address: "x:00080"}, "address"},
		{registry.Instance{Service: "t", Address: "[h]:80"}, "address"},
		{registry.Instance{Service: "t", Address: "h:80", Weight: backend.MaxWeight + 1}, "invalid weight: 65536 exceeds 65535"},
	} {
		_, err := r.Register(ctx, tc.in)
		if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Register(%+v) = %v, want ErrInvalid naming %q", tc.in, err, tc.want)
		}
	}
	if s, err := r.Lookup(ctx, "t"); err != nil || len(s.Instances) != 0 {
		t.Fatalf("rejected registrations wrote %v (%v)", s.Instances, err)
	}
}

// What a driver reads back is checked once, in Registry, for every
// backend: a record of another service, an address that does not parse,
// or a repeated ID is skipped and reported; a valid address is served in
// its canonical form. The memory server is written here with its own
// driver, bypassing validation, as another process could.
func TestReadBackChecked(t *testing.T) {
	srv := memory.NewServer()
	raw := memory.NewDriver(srv)
	defer raw.Close()
	ctx := context.Background()
	for _, in := range []driver.Instance{
		{ID: "good", Service: "s", Address: "H:1", Weight: 1},
		{ID: "other", Service: "t", Address: "h:2", Weight: 1},
		{ID: "plus", Service: "s", Address: "h:+80", Weight: 1},
		{ID: "heavy", Service: "s", Address: "h:3", Weight: 70000},
	} {
		if _, err := raw.Register(ctx, in, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	var log logbuf.Buffer
	r := registry.New(memory.NewDriver(srv), registry.WithLogger(log.Logger()))
	defer r.Close()
	s, err := r.Lookup(ctx, "s")
	if err != nil || len(s.Instances) != 1 || s.Instances[0].ID != "good" || s.Instances[0].Address != "h:1" {
		t.Fatalf("Lookup = %+v, %v; want only good, at h:1", s.Instances, err)
	}
	if n := strings.Count(log.String(), "skipped a record"); n != 1 {
		t.Fatalf("%d warnings, want 1 (rate-limited): %s", n, log.String())
	}
}

// One registration announces several ports. Without an Address the
// first endpoint is the primary; every address is made canonical.
func TestRegisterEndpoints(t *testing.T) {
	r, _ := memRegistry(t)
	ctx := context.Background()
	l, err := r.Register(ctx, registry.Instance{Service: "s", Endpoints: []registry.Endpoint{
		{Name: "http", Address: "[::ffff:127.0.0.1]:8080", Protocol: "http"},
		{Name: "grpc", Address: "[0:0:0:0:0:0:0:1]:9090", Protocol: "grpc"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Lookup(ctx, "s")
	got, ok := s.Find(l.Instance().ID)
	if err != nil || !ok {
		t.Fatalf("Lookup: %v, found %v", err, ok)
	}
	if got.Address != "127.0.0.1:8080" || got.Endpoints[0].Address != "127.0.0.1:8080" {
		t.Errorf("primary %q, http %q; want both 127.0.0.1:8080", got.Address, got.Endpoints[0].Address)
	}
	if ep, ok := got.Endpoint("grpc"); !ok || ep.Address != "[::1]:9090" || ep.Protocol != "grpc" {
		t.Errorf("grpc endpoint = %+v, %v", ep, ok)
	}
	_, err = r.Register(ctx, registry.Instance{Service: "s", Address: "h:1", Endpoints: []registry.Endpoint{{Name: "x", Address: "nope"}}})
	var fe *registry.FieldError
	if !errors.As(err, &fe) || fe.Field != "endpoints[0].address" {
		t.Errorf("bad endpoint address: %v, want a FieldError on endpoints[0].address", err)
	}
}
