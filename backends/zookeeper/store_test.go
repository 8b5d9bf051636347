package zookeeper_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/roster-go/roster/registry"
)

// Records live under <root>/_records in both layouts: neither Services,
// nor Lookup, nor an instance watch may take one for a service or an
// instance, whatever its key.
func TestRecordsAreNotServicesNorInstances(t *testing.T) {
	for name, layout := range map[string]string{"roster": "", "curator": "layout=curator"} {
		t.Run(name, func(t *testing.T) {
			r := open(t, shared.URL(freshRoot(t, "rec"), layout))
			st, err := r.Records()
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			for _, k := range []string{"svc", "svc/r-1", "other/r-2", "policy/svc"} {
				if _, err := st.Put(ctx, registry.Record{Key: k, Value: []byte(`{"address":"127.0.0.1:9"}`)}); err != nil {
					t.Fatal(err)
				}
			}
			lease, err := r.Register(ctx, registry.Instance{Service: "svc", Address: "127.0.0.1:1"})
			if err != nil {
				t.Fatal(err)
			}
			w, err := r.Watch(ctx, "svc")
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			ws, werr := w.Next(ctx)
			want := []string{lease.Instance().ID}
			if svcs, err := r.Services(ctx); err != nil || !slices.Equal(svcs, []string{"svc"}) {
				t.Errorf("Services = %v, %v; want [svc]: records are no services", svcs, err)
			}
			if s, err := r.Lookup(ctx, "svc"); err != nil || !slices.Equal(instanceIDs(s), want) {
				t.Errorf("Lookup(svc) = %v, %v; want only %v", instanceIDs(s), err, want)
			}
			if werr != nil || !slices.Equal(instanceIDs(ws), want) {
				t.Errorf("Watch(svc) = %v, %v; want only %v", instanceIDs(ws), werr, want)
			}
			if s, err := r.Lookup(ctx, "other"); err == nil && len(s.Instances) != 0 {
				t.Errorf("Lookup(other) = %v: a record served as an instance", instanceIDs(s))
			}
			if recs, err := st.List(ctx, ""); err != nil || len(recs) != 4 {
				t.Errorf("List(\"\") = %v, %v; want the 4 records", recs, err)
			}
		})
	}
}

func instanceIDs(s registry.Snapshot) []string {
	var out []string
	for _, in := range s.Instances {
		out = append(out, in.ID)
	}
	return out
}

// A znode deleted and created again starts its data version at 0 again:
// the czxid in the Version keeps the new znode's versions apart from the
// old one's, so a writer holding the old version conflicts.
func TestRecordVersionNotReusedAfterRecreate(t *testing.T) {
	r := open(t, shared.URL(freshRoot(t, "recv"), ""))
	st, err := r.Records()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	old, err := st.Put(ctx, registry.Record{Key: "k", Value: []byte("1"), Version: registry.VersionAbsent})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "k", old.Version); err != nil {
		t.Fatal(err)
	}
	again, err := st.Put(ctx, registry.Record{Key: "k", Value: []byte("2"), Version: registry.VersionAbsent})
	if err != nil {
		t.Fatal(err)
	}
	if again.Version == old.Version {
		t.Fatalf("the znode created again has the old version %s", old.Version)
	}
	if _, err := st.Put(ctx, registry.Record{Key: "k", Value: []byte("lost"), Version: old.Version}); !errors.Is(err, registry.ErrConflict) {
		t.Fatalf("Put at the deleted znode's version = %v, want ErrConflict", err)
	}
	if err := st.Delete(ctx, "k", old.Version); !errors.Is(err, registry.ErrConflict) {
		t.Fatalf("Delete at the deleted znode's version = %v, want ErrConflict", err)
	}
	if got, err := st.Get(ctx, "k"); err != nil || string(got.Value) != "2" || got.Version != again.Version {
		t.Fatalf("Get = %+v, %v; want 2 at %s", got, err, again.Version)
	}
}
