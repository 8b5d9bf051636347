package conformance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/roster-go/roster/registry"
)

// The record store's checks (registry.Records): what policies and
// operator overrides rely on. A backend that keeps no records skips them.
var recordChecks = []check{
	{name: "RecordsRoundTrip", run: recordsRoundTrip},
	{name: "RecordsConditionalWrites", run: recordsConditional},
	{name: "RecordsCompareAndSwapUnderContention", run: recordsContention},
	{name: "RecordsWatchedAcrossProcesses", run: recordsWatch},
	{name: "RecordsInvalidInputWritesNothing", run: recordsInvalid},
}

func init() { checks = append(checks, recordChecks...) }

// records returns r's record store, skipping the check when the backend
// keeps none.
func records(t TB, r *registry.Registry) *registry.Records {
	t.Helper()
	st, err := r.Records()
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("the backend keeps no records: %v", err)
	}
	if err != nil {
		t.Fatalf("Records: %v", err)
	}
	return st
}

func put(t TB, st *registry.Records, rec registry.Record) registry.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	out, err := st.Put(ctx, rec)
	if err != nil {
		t.Fatalf("Put(%s): %v", rec.Key, err)
	}
	if out.Key != rec.Key || string(out.Value) != string(rec.Value) || out.Version == "" {
		t.Fatalf("Put(%s) = %+v: want the key, the value and a version", rec.Key, out)
	}
	return out
}

// recordPrefix is a prefix no other check or run uses, deleted at cleanup.
func recordPrefix(t TB, st *registry.Records, name string) string {
	p := "roster-conformance/" + service(name) + "/"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		recs, _ := st.List(ctx, p)
		for _, r := range recs {
			_ = st.Delete(ctx, r.Key, "")
		}
	})
	return p
}

func recordsRoundTrip(t TB, s *suite) {
	r, obs, _ := s.pair(t, "records")
	st, ost := records(t, r), records(t, obs)
	p := recordPrefix(t, st, "records")
	ctx := t.Context()
	value := []byte("{\"split\":[{\"version\":\"v2\",\"percent\":5}],\"bytes\":\"\\u0000\xff\"}")
	a := put(t, st, registry.Record{Key: p + "a", Value: value})
	put(t, st, registry.Record{Key: p + "b/c", Value: []byte("c")})
	put(t, st, registry.Record{Key: p[:len(p)-1] + "x/outside", Value: []byte("x")})
	t.Cleanup(func() { _ = st.Delete(context.Background(), p[:len(p)-1]+"x/outside", "") })

	got, err := ost.Get(ctx, p+"a")
	if err != nil || string(got.Value) != string(value) || got.Version != a.Version {
		t.Fatalf("Get from another process = %+v, %v; want %q at version %s", got, err, value, a.Version)
	}
	a2 := put(t, st, registry.Record{Key: p + "a", Value: []byte("second")})
	if a2.Version == a.Version {
		t.Fatalf("Put again kept version %s: versions must change on every write", a.Version)
	}
	list, err := ost.List(ctx, p)
	if err != nil || len(list) != 2 || list[0].Key != p+"a" || list[1].Key != p+"b/c" || string(list[0].Value) != "second" {
		t.Fatalf("List(%s) = %v, %v; want %sa (second) and %sb/c, nothing outside the prefix", p, list, err, p, p)
	}
	if err := st.Delete(ctx, p+"a", ""); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := ost.Get(ctx, p+"a"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("Get after Delete = %v, want ErrNotFound", err)
	}
	if err := st.Delete(ctx, p+"a", ""); err != nil {
		t.Fatalf("Delete of a missing record = %v, want nil", err)
	}
}

func recordsConditional(t TB, s *suite) {
	r := s.open(t)
	st := records(t, r)
	p := recordPrefix(t, st, "cas")
	ctx := t.Context()
	k := p + "k"
	first := put(t, st, registry.Record{Key: k, Value: []byte("1"), Version: registry.VersionAbsent})
	if _, err := st.Put(ctx, registry.Record{Key: k, Value: []byte("lost"), Version: registry.VersionAbsent}); !errors.Is(err, registry.ErrConflict) {
		t.Fatalf("Put(VersionAbsent) over an existing record = %v, want ErrConflict", err)
	}
	second := put(t, st, registry.Record{Key: k, Value: []byte("2"), Version: first.Version})
	if _, err := st.Put(ctx, registry.Record{Key: k, Value: []byte("lost"), Version: first.Version}); !errors.Is(err, registry.ErrConflict) {
		t.Fatalf("Put at a stale version = %v, want ErrConflict", err)
	}
	if err := st.Delete(ctx, k, first.Version); !errors.Is(err, registry.ErrConflict) {
		t.Fatalf("Delete at a stale version = %v, want ErrConflict", err)
	}
	got, err := st.Get(ctx, k)
	if err != nil || string(got.Value) != "2" || got.Version != second.Version {
		t.Fatalf("after refused writes Get = %+v, %v; want 2 at %s", got, err, second.Version)
	}
	if err := st.Delete(ctx, k, second.Version); err != nil {
		t.Fatalf("Delete at the current version: %v", err)
	}
	if _, err := st.Put(ctx, registry.Record{Key: k, Value: []byte("x"), Version: second.Version}); !errors.Is(err, registry.ErrConflict) {
		t.Fatalf("Put at a version of a deleted record = %v, want ErrConflict", err)
	}
	if _, err := st.Get(ctx, k); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("Get after refused Put of a deleted record = %v, want ErrNotFound", err)
	}
}

// recordsContention increments one counter from several processes by
// compare-and-swap: no increment may be lost.
func recordsContention(t TB, s *suite) {
	const writers, each = 4, 5
	st0 := records(t, s.open(t))
	k := recordPrefix(t, st0, "counter") + "n"
	put(t, st0, registry.Record{Key: k, Value: []byte("0"), Version: registry.VersionAbsent})
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for range writers {
		st := records(t, s.open(t))
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- increment(t.Context(), st, k, each)
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatalf("increment: %v", err)
		}
	}
	got, err := st0.Get(t.Context(), k)
	if err != nil || string(got.Value) != strconv.Itoa(writers*each) {
		t.Fatalf("counter = %q, %v; want %d: a compare-and-swap lost a write", got.Value, err, writers*each)
	}
}

func increment(ctx context.Context, st *registry.Records, k string, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for done := 0; done < n; {
		cur, err := st.Get(ctx, k)
		if err != nil {
			return err
		}
		v, err := strconv.Atoi(string(cur.Value))
		if err != nil {
			return fmt.Errorf("counter holds %q", cur.Value)
		}
		_, err = st.Put(ctx, registry.Record{Key: k, Value: []byte(strconv.Itoa(v + 1)), Version: cur.Version})
		switch {
		case err == nil:
			done++
		case !errors.Is(err, registry.ErrConflict):
			return err
		}
	}
	return nil
}

func recordsWatch(t TB, s *suite) {
	r, obs, _ := s.pair(t, "recwatch")
	st, ost := records(t, r), records(t, obs)
	p := recordPrefix(t, st, "recwatch")
	w, err := ost.Watch(t.Context(), p)
	if err != nil {
		t.Fatalf("Watch(%s): %v", p, err)
	}
	t.Cleanup(func() { _ = w.Close() })
	next := func(what string, ok func(registry.RecordSet) bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), s.cfg.Propagation+5*time.Second)
		defer cancel()
		for {
			set, err := w.Next(ctx)
			if err == nil && ok(set) {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("watch did not show %s: last %v, %v", what, set.Records, err)
			}
		}
	}
	next("the empty initial set", func(set registry.RecordSet) bool { return len(set.Records) == 0 })
	a := put(t, st, registry.Record{Key: p + "a", Value: []byte("1")})
	next("a written by another process", func(set registry.RecordSet) bool {
		return len(set.Records) == 1 && set.Records[0].Version == a.Version && string(set.Records[0].Value) == "1"
	})
	put(t, st, registry.Record{Key: p + "a", Value: []byte("2")})
	next("a changed", func(set registry.RecordSet) bool { return len(set.Records) == 1 && string(set.Records[0].Value) == "2" })
	if err := st.Delete(t.Context(), p+"a", ""); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	next("a deleted", func(set registry.RecordSet) bool { return len(set.Records) == 0 })
}

func recordsInvalid(t TB, s *suite) {
	st := records(t, s.open(t))
	p := recordPrefix(t, st, "invalid")
	ctx := t.Context()
	for _, key := range []string{"", "/a", p + "a/", p + "a//b", p + "..", p + "a b", p + "é", p + "a\x00", string(make([]byte, 300))} {
		if _, err := st.Put(ctx, registry.Record{Key: key, Value: []byte("x")}); !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("Put(key %q) = %v, want ErrInvalid", key, err)
		}
	}
	if _, err := st.Put(ctx, registry.Record{Key: p + "big", Value: make([]byte, 64<<10+1)}); !errors.Is(err, registry.ErrInvalid) {
		t.Errorf("Put of 64 KiB + 1 = %v, want ErrInvalid", err)
	}
	if _, err := st.List(ctx, "no-slash"); !errors.Is(err, registry.ErrInvalid) {
		t.Errorf("List(\"no-slash\") = %v, want ErrInvalid", err)
	}
	recs, err := st.List(ctx, p)
	if err != nil || len(recs) != 0 {
		t.Fatalf("after refused writes List = %v, %v; want nothing written", recs, err)
	}
}
