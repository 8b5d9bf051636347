package registry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// remote is a memory driver that does not say it is local: a registry
// over it stands for one whose server is on another host.
type remote struct{ driver.Driver }

// Addresses no client should dial are refused at Register on every
// registry, naming the field, endpoints included; loopback is refused
// only by a registry whose server is elsewhere, unless allowed.
func TestRegisterAddressPolicy(t *testing.T) {
	ctx := context.Background()
	srv := memory.NewServer()
	local := registry.New(memory.NewDriver(srv))
	far := registry.New(remote{memory.NewDriver(srv)})
	allowed := registry.New(remote{memory.NewDriver(srv)}, registry.AllowLoopback())
	for _, r := range []*registry.Registry{local, far, allowed} {
		defer r.Close()
	}
	never := []struct {
		in    registry.Instance
		field string
	}{
		{registry.Instance{Service: "s", Address: "169.254.169.254:80"}, "address"},
		{registry.Instance{Service: "s", Address: "[fe80::1]:80"}, "address"},
		{registry.Instance{Service: "s", Address: "224.0.0.251:5353"}, "address"},
		{registry.Instance{Service: "s", Address: "255.255.255.255:80"}, "address"},
		{registry.Instance{Service: "s", Address: "10.0.0.1:80", Endpoints: []registry.Endpoint{
			{Name: "http", Address: "10.0.0.1:80"}, {Name: "meta", Address: "169.254.169.254:80"}}}, "endpoints[1].address"},
	}
	for _, r := range []*registry.Registry{local, far, allowed} {
		for _, c := range never {
			_, err := r.Register(ctx, c.in)
			var fe *driver.FieldError
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Errorf("%v: Register(%s, %v) = %v, want ErrInvalid on %s", r, c.in.Address, c.in.Endpoints, err, c.field)
			}
		}
	}
	loop := []struct {
		in    registry.Instance
		field string
	}{
		{registry.Instance{Service: "s", Address: "127.0.0.1:80"}, "address"},
		{registry.Instance{Service: "s", Address: "[::1]:80"}, "address"},
		{registry.Instance{Service: "s", Address: "localhost:80"}, "address"},
		{registry.Instance{Service: "s", Address: "10.0.0.1:80", Endpoints: []registry.Endpoint{
			{Name: "http", Address: "10.0.0.1:80"}, {Name: "admin", Address: "127.0.0.1:81"}}}, "endpoints[1].address"},
	}
	for _, c := range loop {
		_, err := far.Register(ctx, c.in)
		var fe *driver.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("remote: Register(%s, %v) = %v, want ErrInvalid on %s saying loopback", c.in.Address, c.in.Endpoints, err, c.field)
		}
		for _, r := range []*registry.Registry{local, allowed} {
			if _, err := r.Register(ctx, c.in); err != nil {
				t.Errorf("%v: Register(%s) = %v, want it registered", r, c.in.Address, err)
			}
		}
	}
}

// What other writers put in the backend obeys the same policy at read:
// a record with a metadata, link-local or multicast address (primary or
// endpoint) is never served; a loopback one only by a local registry or
// one allowed it.
func TestReadAddressPolicy(t *testing.T) {
	ctx := context.Background()
	srv := memory.NewServer()
	raw := memory.NewDriver(srv) // writes without the registry's checks, as a neighbour could
	defer raw.Close()
	for _, in := range []driver.Instance{
		{ID: "good", Service: "s", Address: "10.0.0.1:80", Weight: 1},
		{ID: "meta", Service: "s", Address: "169.254.169.254:80", Weight: 65535},
		{ID: "meta-ep", Service: "s", Address: "10.0.0.2:80", Weight: 1,
			Endpoints: []driver.Endpoint{{Name: "http", Address: "169.254.169.254:80"}}},
		{ID: "mcast", Service: "s", Address: "[ff02::1]:80", Weight: 1},
		{ID: "bcast", Service: "s", Address: "255.255.255.255:80", Weight: 1},
		{ID: "loop", Service: "s", Address: "127.0.0.1:80", Weight: 1},
		{ID: "loop-ep", Service: "s", Address: "10.0.0.3:80", Weight: 1,
			Endpoints: []driver.Endpoint{{Name: "admin", Address: "[::1]:81"}}},
	} {
		if _, err := raw.Register(ctx, in, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		r    *registry.Registry
		want string
	}{
		{registry.New(memory.NewDriver(srv)), "good loop loop-ep"},
		{registry.New(remote{memory.NewDriver(srv)}, registry.AllowLoopback()), "good loop loop-ep"},
		{registry.New(remote{memory.NewDriver(srv)}), "good"},
	} {
		defer c.r.Close()
		s, err := c.r.Lookup(ctx, "s")
		if got := strings.Join(idsOf(s), " "); err != nil || got != c.want {
			t.Errorf("%v: Lookup = %q, %v; want %q", c.r, got, err, c.want)
		}
		w, err := c.r.Watch(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		s, err = w.Next(ctx)
		if got := strings.Join(idsOf(s), " "); err != nil || got != c.want {
			t.Errorf("%v: Watch = %q, %v; want %q", c.r, got, err, c.want)
		}
		w.Close()
	}
}

// The URL option loopback=allow is AllowLoopback on every backend, and
// never reaches the backend's own parser, which rejects what it does not
// know.
func TestOpenLoopbackOption(t *testing.T) {
	ctx := context.Background()
	r, err := registry.Open(ctx, "mem://?loopback=allow")
	if err != nil {
		t.Fatalf("Open(mem://?loopback=allow) = %v", err)
	}
	defer r.Close()
	if _, err := r.Register(ctx, registry.Instance{Service: "s", Address: "127.0.0.1:80"}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"mem://?loopback=yes", "mem://?loopback=allow&loopback=allow"} {
		if _, err := registry.Open(ctx, u); !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("Open(%s) = %v, want ErrInvalid naming loopback", u, err)
		}
	}
}
