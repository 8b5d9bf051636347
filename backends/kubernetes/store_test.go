package kubernetes_test

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/roster-go/roster/registry"
)

// Records are ConfigMaps, instances EndpointSlices and Leases: neither
// Services, nor Lookup, nor an instance watch may show a record, even one
// whose key names a service; and the ConfigMaps carry the key in an
// annotation and the label that selects them.
func TestRecordsAreNotServicesNorInstances(t *testing.T) {
	r := openRegistry(t)
	st, err := r.Records()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const svc = "recsvc-notservice"
	keys := []string{svc, svc + "/r-1", "policy/" + svc}
	for _, k := range keys {
		if _, err := st.Put(ctx, registry.Record{Key: k, Value: []byte(`{"address":"127.0.0.1:9"}`)}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Delete(context.Background(), k, "") })
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
	if s, err := r.Lookup(ctx, svc); err != nil || !slices.Equal(recIDs(s), want) {
		t.Errorf("Lookup(%s) = %v, %v; want only %v", svc, recIDs(s), err, want)
	}
	if werr != nil || !slices.Equal(recIDs(ws), want) {
		t.Errorf("Watch(%s) = %v, %v; want only %v", svc, recIDs(ws), werr, want)
	}
	cs, err := server.Clientset(server.Addr())
	if err != nil {
		t.Fatal(err)
	}
	l, err := cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{LabelSelector: "roster.dev/record=true"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, cm := range l.Items {
		if k := cm.Annotations["roster.dev/key"]; slices.Contains(keys, k) {
			got = append(got, k)
		}
	}
	slices.Sort(got)
	if wantKeys := slices.Sorted(slices.Values(keys)); !slices.Equal(got, wantKeys) {
		t.Errorf("labelled ConfigMaps hold keys %v, want %v", got, wantKeys)
	}
}

func recIDs(s registry.Snapshot) []string {
	var out []string
	for _, in := range s.Instances {
		out = append(out, in.ID)
	}
	return out
}
