package etcd

import (
	"context"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/roster-go/roster/registry"
)

// Records live beside the instances under the same prefix: neither
// Services, nor Lookup, nor an instance watch may take one for an
// instance or a service, whatever its key.
func TestRecordsAreNotServicesNorInstances(t *testing.T) {
	c := startServer(t)
	d := newTestDriver(t, c, 0)
	r := registry.New(d)
	defer r.Close()
	st, err := r.Records()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	// Keys shaped like a service, an instance key and a service prefix.
	for _, k := range []string{"svc", "svc/r-1", "other/r-2", "policy/svc"} {
		if _, err := st.Put(ctx, registry.Record{Key: k, Value: []byte(`{"address":"127.0.0.1:9"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	in, err := r.Register(ctx, registry.Instance{Service: "svc", Address: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := r.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ws, werr := w.Next(ctx)
	svcs, serr := r.Services(ctx)
	if serr != nil || !slices.Equal(svcs, []string{"svc"}) {
		t.Errorf("Services = %v, %v; want [svc]: records are no services", svcs, serr)
	}
	s, lerr := r.Lookup(ctx, "svc")
	if got := ids(s); lerr != nil || !slices.Equal(got, []string{in.Instance().ID}) {
		t.Errorf("Lookup(svc) = %v, %v; want only %s", got, lerr, in.Instance().ID)
	}
	if got := ids(ws); werr != nil || !slices.Equal(got, []string{in.Instance().ID}) {
		t.Errorf("Watch(svc) = %v, %v; want only %s", got, werr, in.Instance().ID)
	}
	if s, err := r.Lookup(ctx, "other"); err == nil && len(s.Instances) != 0 {
		t.Errorf("Lookup(other) = %v: a record served as an instance", ids(s))
	}
	recs, err := st.List(ctx, "")
	if err != nil || len(recs) != 4 {
		t.Errorf("List(\"\") = %v, %v; want the 4 records and no instance", recs, err)
	}
}

// A record has no lease: it outlives a restart of every member, at the
// same version, and a compare-and-swap at that version still succeeds.
func TestRecordSurvivesRestart(t *testing.T) {
	c := startServer(t)
	d := newTestDriver(t, c, 0)
	r := registry.New(d)
	defer r.Close()
	st, err := r.Records()
	if err != nil {
		t.Fatal(err)
	}
	put, err := st.Put(t.Context(), registry.Record{Key: "policy/a", Value: []byte("v1"), Version: registry.VersionAbsent})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := c.Restart(ctx, true); err != nil {
		t.Fatal(err)
	}
	var got registry.Record
	for {
		if got, err = st.Get(ctx, "policy/a"); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond) // the client reconnects on its own
	}
	if err != nil || string(got.Value) != "v1" || got.Version != put.Version {
		t.Fatalf("after restart Get = %+v, %v; want v1 at %s", got, err, put.Version)
	}
	if _, err := st.Put(ctx, registry.Record{Key: "policy/a", Value: []byte("v2"), Version: got.Version}); err != nil {
		t.Fatalf("Put at the version read after restart: %v", err)
	}
}

// A record watch resumed behind a compaction reads the prefix again
// instead of missing the changes compacted away.
func TestRecordWatchRelistsAfterCompaction(t *testing.T) {
	c := startServer(t)
	d := newTestDriver(t, c, time.Minute)
	ctx := t.Context()
	if _, err := d.PutRecord(ctx, "p/a", []byte("1"), ""); err != nil {
		t.Fatal(err)
	}
	rs, err := d.WatchRecords(ctx, "p/")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	if got, err := rs.Next(ctx); err != nil || len(got) != 1 {
		t.Fatalf("first Next = %v, %v; want p/a", got, err)
	}
	st := rs.(*recordStream)
	// Resume the watch from the listed revision, as after a reconnect,
	// then change and compact behind it.
	st.wcancel()
	if _, err := d.PutRecord(ctx, "p/b", []byte("2"), ""); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteRecord(ctx, "p/a", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(st.parent)
	st.wcancel = wcancel
	st.wch = d.cli.Watch(wctx, d.recordKey("p/"), clientv3.WithPrefix(), clientv3.WithRev(st.rev+1))
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got, err := rs.Next(nctx)
	if err != nil || len(got) != 1 || got[0].Key != "p/b" || string(got[0].Value) != "2" {
		t.Fatalf("Next after compaction = %v, %v; want only p/b", got, err)
	}
}
