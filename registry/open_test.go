package registry_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	_ "github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
)

func TestOpenErrorsAreTypedAndRedacted(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{
		"nosuch://user:s3cret@host:1?token=s3cret",
		"redis://user:s3cret@host:1/%zz",
		"user:s3cret@host",
		"",
		"mem://x/path?token=s3cret",
	} {
		r, err := registry.Open(ctx, u)
		if err == nil {
			r.Close()
			t.Errorf("Open(%q) succeeded", u)
			continue
		}
		if !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("Open(%q) = %v, want ErrInvalid", u, err)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q) error leaks the secret: %v", u, err)
		}
	}
}

func TestOpenMemory(t *testing.T) {
	ctx := context.Background()
	r, err := registry.Open(ctx, "mem://open-test")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := r.String(); got != "registry(mem://open-test)" {
		t.Errorf("String() = %q", got)
	}
	// A second registry on the same name shares the server.
	r2, err := registry.Open(ctx, "mem://open-test")
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	l, err := r.Register(ctx, registry.Instance{Service: "shared", Address: "127.0.0.1:9"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Deregister(ctx)
	s, err := r2.Lookup(ctx, "shared")
	if err != nil || len(s.Instances) != 1 {
		t.Fatalf("mem://open-test not shared: %v %v", s.Instances, err)
	}
	found := false
	for _, sc := range registry.Schemes() {
		found = found || sc == "mem"
	}
	if !found {
		t.Errorf("Schemes() = %v, want mem listed", registry.Schemes())
	}
}
