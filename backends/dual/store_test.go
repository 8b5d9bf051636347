package dual_test

import (
	"context"
	"errors"
	"testing"

	"github.com/roster-go/roster/backends/dual"
	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
)

// TestRecordsCopiedToTheOtherSide: records are read from the preferred
// side, and a write there reaches the other side too, so that the next
// deploy of the migration (the other side preferred, or alone) finds them.
func TestRecordsCopiedToTheOtherSide(t *testing.T) {
	ctx := context.Background()
	oldSrv, newSrv := memory.NewServer(), memory.NewServer()
	reg := registry.New(dual.New(memory.NewDriver(oldSrv), memory.NewDriver(newSrv), dual.Options{}))
	defer reg.Close()
	st, err := reg.Records()
	if err != nil {
		t.Fatal(err)
	}
	rec, err := st.Put(ctx, registry.Record{Key: "policy/api", Value: []byte("v1")})
	if err != nil {
		t.Fatal(err)
	}
	newSide := registry.New(memory.NewDriver(newSrv))
	defer newSide.Close()
	nst, _ := newSide.Records()
	if got, err := nst.Get(ctx, "policy/api"); err != nil || string(got.Value) != "v1" {
		t.Fatalf("new side holds %+v, %v; want the copy v1", got, err)
	}
	if _, err := st.Put(ctx, registry.Record{Key: "policy/api", Value: []byte("v2"), Version: rec.Version}); err != nil {
		t.Fatalf("Put at the preferred side's version: %v", err)
	}
	if got, _ := nst.Get(ctx, "policy/api"); string(got.Value) != "v2" {
		t.Fatalf("new side holds %q after a conditional Put, want v2", got.Value)
	}
	if err := st.Delete(ctx, "policy/api", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := nst.Get(ctx, "policy/api"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("after Delete the new side's copy = %v, want ErrNotFound", err)
	}
}
