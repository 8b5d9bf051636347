package redis_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

// Two tenants on one database with prefixes svc:staging and svc: with the
// keys layout such a prefix is refused (B would list a phantom service
// "staging" made of A's instances, and could add to A's "api"); with the
// hash layout, whose prefix ends at the service's '{', the two are
// isolated both ways.
func TestPrefixesCannotOverlap(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := "redis://" + srv.Addr() + "?layout="
	_, err := registry.Open(t.Context(), base+"keys&prefix=svc:staging")
	if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "prefix") {
		t.Fatalf("keys layout with prefix svc:staging: Open = %v, want ErrInvalid naming the prefix", err)
	}
	a := open(t, base+"hash&prefix=svc:staging")
	b := open(t, base+"hash&prefix=svc")
	ctx := t.Context()
	if _, err := a.Register(ctx, registry.Instance{Service: "api", Address: "10.0.0.1:80"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Register(ctx, registry.Instance{Service: "staging", Address: "api:443"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		r         *registry.Registry
		name, own string
	}{{a, "A (svc:staging)", "api"}, {b, "B (svc)", "staging"}} {
		svcs, err := c.r.Services(ctx)
		if err != nil || !slices.Equal(svcs, []string{c.own}) {
			t.Errorf("%s: Services = %v, %v; want only [%s]", c.name, svcs, err, c.own)
		}
	}
	s, err := a.Lookup(ctx, "api")
	if err != nil || len(s.Instances) != 1 || s.Instances[0].Address != "10.0.0.1:80" {
		t.Errorf("A's api = %+v, %v; want only its own 10.0.0.1:80", s.Instances, err)
	}
}
