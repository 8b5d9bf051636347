package nats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roster-go/roster/registry/driver"
)

var _ driver.Store = (*Driver)(nil)

// recordsToken starts the bucket key of every record. No service name
// starts with '_', so records never show as a service or an instance.
const recordsToken = "_records"

// recordKey is the bucket key of a record: each '/' of the key a token
// separator, each '.' stored as '=' (a record key has no '='), so that a
// prefix is a subject filter the server applies.
func recordKey(key string) string {
	return recordsToken + "." + strings.ReplaceAll(strings.ReplaceAll(key, ".", "="), "/", ".")
}

// recordName is the inverse of recordKey.
func recordName(k string) (string, bool) {
	rest, ok := strings.CutPrefix(k, recordsToken+".")
	return strings.ReplaceAll(strings.ReplaceAll(rest, ".", "/"), "=", "."), ok
}

// recordFilter is the subject filter of the records under prefix.
func recordFilter(prefix string) string {
	if prefix == "" {
		return recordsToken + ".>"
	}
	return recordKey(strings.TrimSuffix(prefix, "/")) + ".>"
}

// GetRecord implements driver.Store.
func (d *Driver) GetRecord(ctx context.Context, key string) (driver.Record, error) {
	ctx, cancel := d.bounded(ctx)
	defer cancel()
	kv, err := d.bucket(ctx, false)
	var e jetstream.KeyValueEntry
	if err == nil {
		e, err = kv.Get(ctx, recordKey(key))
	}
	if noBucket(err) || errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return driver.Record{}, fmt.Errorf("%s: record %s: %w", d.name, key, driver.ErrNotFound)
	}
	if err != nil {
		return driver.Record{}, d.fail("get record "+key, err)
	}
	return driver.Record{Key: key, Value: e.Value(), Version: strconv.FormatUint(e.Revision(), 10)}, nil
}

// ListRecords reads the current values of a watch on the prefix.
func (d *Driver) ListRecords(ctx context.Context, prefix string) ([]driver.Record, error) {
	ctx, cancel := d.bounded(ctx)
	defer cancel()
	s, err := d.newRecordStream(ctx, prefix, false)
	if noBucket(err) {
		return nil, nil
	}
	var recs []driver.Record
	if err == nil {
		recs, err = s.Next(ctx)
		s.Close()
	}
	if err != nil {
		return nil, d.fail("list records "+prefix, err)
	}
	return recs, nil
}

// PutRecord implements driver.Store: Create for VersionAbsent, Update
// for a version, Put otherwise. A record has no message TTL.
func (d *Driver) PutRecord(ctx context.Context, key string, value []byte, ifVersion string) (driver.Record, error) {
	ctx, cancel := d.bounded(ctx)
	defer cancel()
	rev, err := parseRecordVersion(ifVersion)
	if err != nil {
		return driver.Record{}, fmt.Errorf("%s: record %s: %w", d.name, key, err)
	}
	kv, err := d.bucket(ctx, true)
	var n uint64
	if err == nil {
		k := recordKey(key)
		switch ifVersion {
		case "":
			n, err = kv.Put(ctx, k, value)
		case driver.VersionAbsent:
			n, err = kv.Create(ctx, k, value)
		default:
			n, err = kv.Update(ctx, k, value, rev)
		}
	}
	if err := conflict(err); err != nil {
		return driver.Record{}, d.fail("put record "+key, err)
	}
	return driver.Record{Key: key, Value: value, Version: strconv.FormatUint(n, 10)}, nil
}

// DeleteRecord purges the key; its marker, kept for a minute, tells the
// watchers.
func (d *Driver) DeleteRecord(ctx context.Context, key, ifVersion string) error {
	ctx, cancel := d.bounded(ctx)
	defer cancel()
	rev, err := parseRecordVersion(ifVersion)
	if err != nil {
		return fmt.Errorf("%s: record %s: %w", d.name, key, err)
	}
	kv, err := d.bucket(ctx, false)
	if noBucket(err) && ifVersion == "" {
		return nil
	}
	if err == nil {
		opts := []jetstream.KVDeleteOpt{jetstream.PurgeTTL(markerTTL)}
		if ifVersion == driver.VersionAbsent {
			// Only a missing key may be deleted "if absent": a no-op.
			if _, err = kv.Get(ctx, recordKey(key)); errors.Is(err, jetstream.ErrKeyNotFound) {
				return nil
			} else if err == nil {
				err = jetstream.ErrKeyExists
			}
		} else {
			if rev != 0 {
				opts = append(opts, jetstream.LastRevision(rev))
			}
			err = kv.Purge(ctx, recordKey(key), opts...)
		}
	}
	if noBucket(err) {
		err = jetstream.ErrKeyExists // a precondition on a bucket that is gone
	}
	if err := conflict(err); err != nil {
		return d.fail("delete record "+key, err)
	}
	return nil
}

func parseRecordVersion(v string) (uint64, error) {
	if v == "" || v == driver.VersionAbsent {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("version %q is not one this backend gave: %w", v, driver.ErrConflict)
	}
	return n, nil
}

// conflict marks a failed precondition as ErrConflict.
func conflict(err error) error {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLastSeq(err) {
		return fmt.Errorf("%w: %w", err, driver.ErrConflict)
	}
	return err
}

func isWrongLastSeq(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// WatchRecords implements driver.Store with a key watcher on the
// prefix's subjects. It fails at a disconnect, as Watch does.
func (d *Driver) WatchRecords(ctx context.Context, prefix string) (driver.RecordStream, error) {
	ctx, cancel := d.bounded(ctx)
	defer cancel()
	s, err := d.newRecordStream(ctx, prefix, true)
	if err != nil {
		return nil, d.fail("watch records "+prefix, err)
	}
	return s, nil
}

type recordStream struct {
	d     *Driver
	w     jetstream.KeyWatcher
	stop  context.CancelFunc
	down  <-chan struct{}
	recs  map[string]driver.Record
	ready bool
}

func (d *Driver) newRecordStream(ctx context.Context, prefix string, create bool) (*recordStream, error) {
	d.mu.Lock()
	s := &recordStream{d: d, down: d.down, recs: map[string]driver.Record{}}
	d.mu.Unlock()
	kv, err := d.bucket(ctx, create)
	if err != nil {
		return nil, err
	}
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	unhook := context.AfterFunc(ctx, stop)
	s.w, err = kv.Watch(wctx, recordFilter(prefix))
	if !unhook() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		stop()
		return nil, err
	}
	s.stop = stop
	return s, nil
}

func (s *recordStream) Next(ctx context.Context) ([]driver.Record, error) {
	for {
		select {
		case e, ok := <-s.w.Updates():
			if !ok {
				return nil, s.d.fail("watch records", errWatchEnded)
			}
			s.apply(e)
		case <-s.down:
			return nil, s.d.fail("watch records", errDisconnected)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if s.ready && len(s.w.Updates()) == 0 {
			out := make([]driver.Record, 0, len(s.recs))
			for _, r := range s.recs {
				out = append(out, r)
			}
			return out, nil
		}
	}
}

func (s *recordStream) apply(e jetstream.KeyValueEntry) {
	if e == nil {
		s.ready = true
		return
	}
	key, ok := recordName(e.Key())
	if !ok {
		return
	}
	if e.Operation() == jetstream.KeyValuePut {
		s.recs[key] = driver.Record{Key: key, Value: e.Value(), Version: strconv.FormatUint(e.Revision(), 10)}
	} else {
		delete(s.recs, key)
	}
}

func (s *recordStream) Close() error {
	s.stop()
	_ = s.w.Stop()
	return nil
}
