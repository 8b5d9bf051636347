package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/roster-go/roster/internal/backend"
	"github.com/roster-go/roster/internal/backoff"
	"github.com/roster-go/roster/registry/driver"
)

// Record is one stored key and value at a Version (see Records).
type Record = driver.Record

// ErrConflict reports a Records write whose version precondition failed.
var ErrConflict = driver.ErrConflict

// VersionAbsent, as a Put or Delete precondition, means "only if the key
// does not exist yet".
const VersionAbsent = driver.VersionAbsent

// Records is a registry's store of small records that outlive every
// process: the traffic policies (package policy) and operator overrides
// the whole fleet reads. Get one with Registry.Records. Keys are paths
// such as "policy/user-svc"; values are at most driver.MaxRecordSize
// bytes. Every registering backend keeps them; read-only ones (DNS) do
// not.
type Records struct {
	r  *Registry
	st driver.Store
}

// Records returns the registry's record store. It fails with an error
// wrapping errors.ErrUnsupported when the backend keeps no records.
func (r *Registry) Records() (*Records, error) {
	st := backend.GuardStore(r.drv.(checked).Driver)
	if st == nil {
		return nil, fmt.Errorf("%s: records: %w: the backend keeps no records", r, errors.ErrUnsupported)
	}
	return &Records{r: r, st: st}, nil
}

// Get returns the record at key, or an error wrapping ErrNotFound.
func (s *Records) Get(ctx context.Context, key string) (Record, error) {
	if err := checkRecordKey("key", key); err != nil {
		return Record{}, err
	}
	b, cancel := s.r.bound(ctx)
	defer cancel()
	rec, err := s.st.GetRecord(b, key)
	if err != nil {
		err = b.err("get record", s.r.lookupTimeout, err)
		return Record{}, fmt.Errorf("%s: get record %s: %w", s.r, key, err)
	}
	return rec, nil
}

// List returns the records whose keys start with prefix ("" or ending in
// '/'), sorted by key.
func (s *Records) List(ctx context.Context, prefix string) ([]Record, error) {
	if err := checkRecordPrefix(prefix); err != nil {
		return nil, err
	}
	b, cancel := s.r.bound(ctx)
	defer cancel()
	recs, err := s.st.ListRecords(b, prefix)
	if err != nil {
		err = b.err("list records", s.r.lookupTimeout, err)
		return nil, fmt.Errorf("%s: list records %s: %w", s.r, prefix, err)
	}
	return sortRecords(recs), nil
}

// Put writes rec.Value at rec.Key and returns the record as stored, with
// its new Version. rec.Version is a precondition: "" writes
// unconditionally, VersionAbsent only if the key does not exist, and any
// other value only if the stored record is at that version; otherwise
// the error wraps ErrConflict and nothing is written.
func (s *Records) Put(ctx context.Context, rec Record) (Record, error) {
	if err := checkRecordKey("key", rec.Key); err != nil {
		return Record{}, err
	}
	if len(rec.Value) > driver.MaxRecordSize {
		return Record{}, invalid("value", "%d bytes, over the limit of %d", len(rec.Value), driver.MaxRecordSize)
	}
	b, cancel := s.r.bound(ctx)
	defer cancel()
	out, err := s.st.PutRecord(b, rec.Key, bytes.Clone(rec.Value), rec.Version)
	if err != nil {
		err = b.err("put record", s.r.lookupTimeout, err)
		return Record{}, fmt.Errorf("%s: put record %s: %w", s.r, rec.Key, err)
	}
	return out, nil
}

// Delete removes the record at key. ifVersion is a precondition as for
// Put ("" unconditionally). Deleting a missing record unconditionally is
// not an error.
func (s *Records) Delete(ctx context.Context, key, ifVersion string) error {
	if err := checkRecordKey("key", key); err != nil {
		return err
	}
	b, cancel := s.r.bound(ctx)
	defer cancel()
	if err := s.st.DeleteRecord(b, key, ifVersion); err != nil {
		err = b.err("delete record", s.r.lookupTimeout, err)
		return fmt.Errorf("%s: delete record %s: %w", s.r, key, err)
	}
	return nil
}

// Watch follows the records under prefix ("" or ending in '/').
func (s *Records) Watch(ctx context.Context, prefix string) (*RecordWatcher, error) {
	if err := checkRecordPrefix(prefix); err != nil {
		return nil, err
	}
	if err := s.r.checkOpen(); err != nil {
		return nil, err
	}
	return &RecordWatcher{s: s, prefix: prefix}, nil
}

// RecordSet is the state of the records under a prefix: sorted by key,
// Stale when the backend could not be read and the set is the last one
// read.
type RecordSet struct {
	Records []Record
	Stale   bool
}

// RecordWatcher follows the records under one prefix. Its first Next
// returns the current records; each later Next blocks until they differ
// from the last returned, or until the backend fails: then Next returns
// the last good set marked Stale with an error wrapping ErrUnavailable,
// and the next call reconnects after a backoff. Only ErrClosed and the
// context's error are final. A RecordWatcher is used by one goroutine at
// a time.
type RecordWatcher struct {
	s       *Records
	prefix  string
	st      driver.RecordStream
	fails   int
	last    RecordSet
	sent    bool
	closed  bool
	backoff backoff.Policy
}

// Next returns the next state of the records, as described on
// RecordWatcher.
func (w *RecordWatcher) Next(ctx context.Context) (RecordSet, error) {
	for {
		if w.closed {
			return RecordSet{}, fmt.Errorf("watch records %s: %w", w.prefix, ErrClosed)
		}
		if err := w.s.r.checkOpen(); err != nil {
			return RecordSet{}, err
		}
		recs, err := w.next(ctx)
		if ctx.Err() != nil {
			return RecordSet{}, ctx.Err()
		}
		if err != nil {
			if errors.Is(err, ErrClosed) {
				return RecordSet{}, err
			}
			stale := RecordSet{Records: w.last.Records, Stale: true}
			if w.sent && w.last.Stale {
				continue // already said; keep reconnecting
			}
			w.last, w.sent = stale, true
			return stale, fmt.Errorf("watch records %s: %w", w.prefix, err)
		}
		set := RecordSet{Records: sortRecords(recs)}
		if w.sent && !w.last.Stale && sameRecords(set.Records, w.last.Records) {
			continue
		}
		w.last, w.sent = set, true
		return set, nil
	}
}

// next reads the stream, opening it first (after a backoff when it
// failed before).
func (w *RecordWatcher) next(ctx context.Context) ([]Record, error) {
	if w.st == nil {
		if w.fails > 0 {
			t := time.NewTimer(w.backoff.Delay(w.fails - 1))
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			case <-t.C:
			}
		}
		st, err := w.s.st.WatchRecords(ctx, w.prefix)
		if err != nil {
			w.fails++
			return nil, err
		}
		w.st = st
	}
	recs, err := w.st.Next(ctx)
	if err != nil {
		w.st.Close()
		w.st = nil
		w.fails++
		return nil, err
	}
	w.fails = 0
	return recs, nil
}

// Close stops the watcher. A later Next returns ErrClosed.
func (w *RecordWatcher) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	if w.st != nil {
		return w.st.Close()
	}
	return nil
}

func sortRecords(recs []Record) []Record {
	slices.SortFunc(recs, func(a, b Record) int { return strings.Compare(a.Key, b.Key) })
	return recs
}

func sameRecords(a, b []Record) bool {
	return slices.EqualFunc(a, b, func(x, y Record) bool {
		return x.Key == y.Key && x.Version == y.Version && bytes.Equal(x.Value, y.Value)
	})
}

// checkRecordKey accepts paths of segments of [A-Za-z0-9._-] joined by
// '/', without empty, "." or ".." segments: every backend can store them
// as keys, paths or object names.
func checkRecordKey(field, key string) error {
	if key == "" {
		return invalid(field, "empty")
	}
	if len(key) > driver.MaxRecordKey {
		return invalid(field, "%d bytes, over the limit of %d", len(key), driver.MaxRecordKey)
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return invalid(field, "%q: empty, \".\" or \"..\" segment", key)
		}
		for _, c := range seg {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				return invalid(field, "%q: character %q (letters, digits, '.', '_', '-' and '/' only)", key, c)
			}
		}
	}
	return nil
}

func checkRecordPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if !strings.HasSuffix(prefix, "/") {
		return invalid("prefix", "%q must be empty or end in '/'", prefix)
	}
	return checkRecordKey("prefix", strings.TrimSuffix(prefix, "/"))
}
