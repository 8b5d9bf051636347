package policy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	_ "github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/policy"
	"github.com/roster-go/roster/registry"
)

func openMem(t *testing.T) *registry.Registry {
	t.Helper()
	reg, err := registry.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return reg
}

// TestStore: Put validates before writing (a bad policy writes nothing),
// Get, List, Delete and Watch see what Put wrote, and a record written
// by hand that is no policy is reported, not hidden.
func TestStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg := openMem(t)
	w, err := policy.Watch(ctx, reg, "user-svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if got, err := w.Next(ctx); err != nil || len(got) != 0 {
		t.Fatalf("first Next = %v, %v; want no policy", got, err)
	}
	bad := policy.Policy{Split: []policy.SplitEntry{{Version: "v2", Percent: 150}}}
	var fe *policy.FieldError
	if _, err := policy.Put(ctx, reg, "user-svc", bad); !errors.As(err, &fe) || fe.Field != "split[0].percent" {
		t.Fatalf("Put(bad) = %v, want a FieldError on split[0].percent", err)
	}
	if _, err := policy.Get(ctx, reg, "user-svc"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("after a rejected Put, Get = %v, want ErrNotFound (nothing written)", err)
	}
	p := policy.Policy{Strategy: "round_robin", Split: []policy.SplitEntry{{Version: "v2", Percent: 5}}}
	v1, err := policy.Put(ctx, reg, "user-svc", p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := w.Next(ctx)
	if err != nil || len(got) != 1 || got[0].Policy.Split[0].Percent != 5 || got[0].Version != v1 {
		t.Fatalf("Next after Put = %+v, %v", got, err)
	}
	p.Split[0].Percent = 50
	if _, err := policy.PutIf(ctx, reg, "user-svc", p, "not-"+v1); !errors.Is(err, registry.ErrConflict) {
		t.Fatalf("PutIf with a stale version = %v, want ErrConflict", err)
	}
	if _, err := policy.PutIf(ctx, reg, "user-svc", p, v1); err != nil {
		t.Fatal(err)
	}
	if s, err := policy.Get(ctx, reg, "user-svc"); err != nil || s.Policy.Split[0].Percent != 50 {
		t.Fatalf("Get = %+v, %v", s, err)
	}
	if got, err := w.Next(ctx); err != nil || len(got) != 1 || got[0].Policy.Split[0].Percent != 50 {
		t.Fatalf("Next after PutIf = %+v, %v", got, err)
	}
	// Another service's policy, and a record written by hand.
	if _, err := policy.Put(ctx, reg, "search", policy.Policy{Strategy: "p2c_ewma"}); err != nil {
		t.Fatal(err)
	}
	rs, _ := reg.Records()
	if _, err := rs.Put(ctx, registry.Record{Key: policy.Key("broken"), Value: []byte(`{"strategy": "fastest"}`)}); err != nil {
		t.Fatal(err)
	}
	all, err := policy.List(ctx, reg)
	if err != nil || len(all) != 3 {
		t.Fatalf("List = %+v, %v; want 3", all, err)
	}
	if all[0].Service != "broken" || all[0].Err == nil || !errors.As(all[0].Err, &fe) || fe.Field != "strategy" {
		t.Errorf("the hand-written record listed as %+v, want its FieldError", all[0])
	}
	if _, err := policy.Get(ctx, reg, "broken"); !errors.As(err, &fe) {
		t.Errorf("Get(broken) = %v, want its FieldError", err)
	}
	if err := policy.Delete(ctx, reg, "user-svc"); err != nil {
		t.Fatal(err)
	}
	if got, err := w.Next(ctx); err != nil || len(got) != 0 {
		t.Fatalf("Next after Delete = %+v, %v; want none", got, err)
	}
	if _, err := policy.Put(ctx, reg, "a/b", p); !errors.As(err, &fe) || fe.Field != "service" {
		t.Errorf("Put(a/b) = %v, want a FieldError on service", err)
	}
}
