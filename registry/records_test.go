package registry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// storeless hides the memory driver's record store.
type storeless struct{ driver.Driver }

func TestRecordsUnsupported(t *testing.T) {
	r := registry.New(storeless{memory.NewDriver(memory.NewServer())})
	defer r.Close()
	if _, err := r.Records(); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Records on a backend without a store = %v, want errors.ErrUnsupported", err)
	}
}

// TestRecordWatcherStaleThenFresh: a watcher cut off from the backend
// returns its last records marked Stale, once, then the fresh records
// written meanwhile when the backend answers again.
func TestRecordWatcherStaleThenFresh(t *testing.T) {
	srv := memory.NewServer()
	r := registry.New(memory.NewDriver(srv))
	defer r.Close()
	st, err := r.Records()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := st.Put(ctx, registry.Record{Key: "policy/a", Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	w, err := st.Watch(ctx, "policy/")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	set, err := w.Next(ctx)
	if err != nil || len(set.Records) != 1 || set.Stale {
		t.Fatalf("first Next = %+v, %v; want policy/a, fresh", set, err)
	}
	srv.SetReachable(false)
	set, err = w.Next(ctx)
	if !errors.Is(err, registry.ErrUnavailable) || !set.Stale || len(set.Records) != 1 {
		t.Fatalf("Next while down = %+v, %v; want the last records, Stale, ErrUnavailable", set, err)
	}
	other := registry.New(memory.NewDriver(srv))
	defer other.Close()
	ost, _ := other.Records()
	srv.SetReachable(true)
	if _, err := ost.Put(ctx, registry.Record{Key: "policy/a", Value: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	set, err = w.Next(ctx)
	if err != nil || set.Stale || len(set.Records) != 1 || string(set.Records[0].Value) != "2" {
		t.Fatalf("Next after recovery = %+v, %v; want policy/a = 2, fresh", set, err)
	}
}

func TestRecordWatcherCloseUnblocks(t *testing.T) {
	r := registry.New(memory.NewDriver(memory.NewServer()))
	st, _ := r.Records()
	w, err := st.Watch(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := w.Next(context.Background()); errc <- err }()
	r.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, registry.ErrClosed) {
			t.Fatalf("Next after Registry.Close = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Registry.Close did not release a pending RecordWatcher.Next")
	}
	if _, err := st.Get(context.Background(), "a"); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Get after Close = %v, want ErrClosed", err)
	}
}
