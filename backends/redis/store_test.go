package redis_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

func recordStore(t *testing.T, r *registry.Registry) *registry.Records {
	t.Helper()
	st, err := r.Records()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Records share the prefix with the instances in both layouts: neither
// Services, nor Lookup, nor an instance watch may take one for a service
// or an instance, whatever its key.
func TestRecordsAreNotServicesNorInstances(t *testing.T) {
	t.Parallel()
	for _, layout := range []string{"hash", "keys&poll=100ms"} {
		t.Run(layout, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			r := open(t, "redis://"+srv.Addr()+"?layout="+layout)
			st := recordStore(t, r)
			ctx := t.Context()
			for _, k := range []string{"svc", "svc/10.0.0.9", "other/r-2", "policy/svc"} {
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
			want := []string{in.Instance().ID}
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
				t.Errorf("List(\"\") = %v, %v; want the 4 records and no instance", recs, err)
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

// A record has no expiry: it outlives a restart of a server that keeps
// its data, at the same version, and the version counter goes on from
// where it was, so a stale version still conflicts.
func TestRecordSurvivesRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	r := open(t, "redis://"+srv.Addr())
	st := recordStore(t, r)
	first, err := st.Put(t.Context(), registry.Record{Key: "policy/a", Value: []byte("v1"), Version: registry.VersionAbsent})
	if err != nil {
		t.Fatal(err)
	}
	second, err := st.Put(t.Context(), registry.Record{Key: "policy/a", Value: []byte("v2"), Version: first.Version})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := srv.Restart(ctx, true); err != nil {
		t.Fatal(err)
	}
	var got registry.Record
	for {
		if got, err = st.Get(ctx, "policy/a"); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond) // the client redials on its own
	}
	if err != nil || string(got.Value) != "v2" || got.Version != second.Version {
		t.Fatalf("after restart Get = %+v, %v; want v2 at %s", got, err, second.Version)
	}
	if _, err := st.Put(ctx, registry.Record{Key: "policy/a", Value: []byte("x"), Version: first.Version}); !errors.Is(err, registry.ErrConflict) {
		t.Fatalf("Put at the version before last, after restart = %v, want ErrConflict", err)
	}
	third, err := st.Put(ctx, registry.Record{Key: "policy/a", Value: []byte("v3"), Version: got.Version})
	if err != nil || third.Version == first.Version || third.Version == second.Version {
		t.Fatalf("Put at the current version after restart = %+v, %v; want a new version", third, err)
	}
}

// Pubsub loses what is published while a subscriber is away, so a record
// watch also reads every 500 ms: a change that announces nothing (made
// here by hand, as a lost message would leave it) still reaches it.
func TestRecordWatchPollsWithoutNotification(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	r := open(t, "redis://"+srv.Addr())
	st := recordStore(t, r)
	w, err := st.Watch(t.Context(), "p/")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if set, err := w.Next(ctx); err != nil || len(set.Records) != 0 {
		t.Fatalf("first Next = %v, %v; want the empty set", set, err)
	}
	admin := srv.Client()
	defer admin.Close()
	if err := admin.HSet(ctx, "roster:{_records}:data", "p/quiet", "q").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.HSet(ctx, "roster:{_records}:ver", "p/quiet", "999").Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	set, err := w.Next(ctx)
	if err != nil || len(set.Records) != 1 || set.Records[0].Key != "p/quiet" || set.Records[0].Version != "999" {
		t.Fatalf("Next after a silent change = %v, %v; want p/quiet at 999", set, err)
	}
	// The poll's period, plus scheduling on a loaded machine.
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("a silent change took %v to reach the watch, want about 500ms", took)
	}
}
