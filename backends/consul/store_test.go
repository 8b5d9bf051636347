package consul_test

import (
	"context"
	"slices"
	"testing"

	"github.com/roster-go/roster/registry"
)

// Records sit in the KV store, instances in the catalog: neither
// Services, nor Lookup, nor an instance watch may show a record, even one
// whose key names a service.
func TestRecordsAreNotServicesNorInstances(t *testing.T) {
	a := sharedAgent(t)
	r, err := openRegistry(t, a)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	st, err := r.Records()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	svc := "recsvc-notservice"
	keys := []string{svc, svc + "/r-1", "policy/" + svc}
	for _, k := range keys {
		if _, err := st.Put(ctx, registry.Record{Key: k, Value: []byte(`{"address":"127.0.0.1:9"}`)}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Delete(t.Context(), k, "") })
	}
	lease, err := r.Register(ctx, registry.Instance{Service: svc, Address: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Deregister(context.Background()) }()
	w, err := r.Watch(ctx, svc)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ws, werr := w.Next(ctx)
	want := []string{lease.Instance().ID}
	if svcs, err := r.Services(ctx); err != nil || !slices.Contains(svcs, svc) || slices.Contains(svcs, "policy") {
		t.Errorf("Services = %v, %v; want %s and no record", svcs, err, svc)
	}
	if s, err := r.Lookup(ctx, svc); err != nil || !slices.Equal(ids(s), want) {
		t.Errorf("Lookup(%s) = %v, %v; want only %v", svc, ids(s), err, want)
	}
	if werr != nil || !slices.Equal(ids(ws), want) {
		t.Errorf("Watch(%s) = %v, %v; want only %v", svc, ids(ws), werr, want)
	}
}

func ids(s registry.Snapshot) []string {
	var out []string
	for _, in := range s.Instances {
		out = append(out, in.ID)
	}
	return out
}
