package etcd

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/roster-go/roster/registry/driver"
)

// Records live under <prefix>/_records/<key>, one etcd key each, with no
// lease. "_records" is no valid service name (a name starts with
// [a-z0-9]), so Services and the instance reads and watches, which only
// look at <prefix>/<service>/<id>, never see them. A record's Version is
// its key's ModRevision: it changes on every write and never goes back
// while the cluster keeps its data.

var _ driver.Store = (*Driver)(nil)

// recordsDir is the path segment under the prefix that holds records.
const recordsDir = "/_records/"

func (d *Driver) recordKey(key string) string { return d.prefix + recordsDir + key }

func (d *Driver) record(kv []byte, value []byte, rev int64) driver.Record {
	return driver.Record{
		Key:     strings.TrimPrefix(string(kv), d.prefix+recordsDir),
		Value:   value,
		Version: strconv.FormatInt(rev, 10),
	}
}

// GetRecord implements driver.Store with one linearizable read.
func (d *Driver) GetRecord(ctx context.Context, key string) (driver.Record, error) {
	c, cancel := d.op(ctx)
	defer cancel()
	resp, err := d.cli.Get(c, d.recordKey(key))
	if err != nil {
		return driver.Record{}, d.wrap(ctx, "get record "+key, err)
	}
	if len(resp.Kvs) == 0 {
		return driver.Record{}, fmt.Errorf("etcd: record %s: %w", key, driver.ErrNotFound)
	}
	kv := resp.Kvs[0]
	return d.record(kv.Key, kv.Value, kv.ModRevision), nil
}

// ListRecords implements driver.Store with one range read.
func (d *Driver) ListRecords(ctx context.Context, prefix string) ([]driver.Record, error) {
	c, cancel := d.op(ctx)
	defer cancel()
	recs, _, err := d.listRecords(c, prefix)
	if err != nil {
		return nil, d.wrap(ctx, "list records "+prefix, err)
	}
	return recs, nil
}

func (d *Driver) listRecords(ctx context.Context, prefix string) ([]driver.Record, int64, error) {
	resp, err := d.cli.Get(ctx, d.recordKey(prefix), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, err
	}
	out := make([]driver.Record, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, d.record(kv.Key, kv.Value, kv.ModRevision))
	}
	return out, resp.Header.Revision, nil
}

// condition returns the comparison a write's ifVersion asks for, or
// false when no stored record can satisfy it (a version this driver
// never hands out).
func condition(k, ifVersion string) (clientv3.Cmp, bool) {
	if ifVersion == driver.VersionAbsent {
		return clientv3.Compare(clientv3.CreateRevision(k), "=", 0), true
	}
	rev, err := strconv.ParseInt(ifVersion, 10, 64)
	if err != nil || rev <= 0 {
		return clientv3.Cmp{}, false
	}
	return clientv3.Compare(clientv3.ModRevision(k), "=", rev), true
}

func conflict(key string) error {
	return fmt.Errorf("etcd: record %s: %w", key, driver.ErrConflict)
}

// PutRecord implements driver.Store: a plain put, or a transaction that
// puts only if the key's revision is the one given.
func (d *Driver) PutRecord(ctx context.Context, key string, value []byte, ifVersion string) (driver.Record, error) {
	c, cancel := d.op(ctx)
	defer cancel()
	k := d.recordKey(key)
	put := clientv3.OpPut(k, string(value))
	var rev int64
	if ifVersion == "" {
		resp, err := d.cli.Do(c, put)
		if err != nil {
			return driver.Record{}, d.wrap(ctx, "put record "+key, err)
		}
		rev = resp.Put().Header.Revision
	} else {
		cmp, ok := condition(k, ifVersion)
		if !ok {
			return driver.Record{}, conflict(key)
		}
		resp, err := d.cli.Txn(c).If(cmp).Then(put).Commit()
		if err != nil {
			return driver.Record{}, d.wrap(ctx, "put record "+key, err)
		}
		if !resp.Succeeded {
			return driver.Record{}, conflict(key)
		}
		rev = resp.Header.Revision
	}
	// The put is the transaction's only write, so the revision it
	// created is the key's ModRevision.
	return driver.Record{Key: key, Value: value, Version: strconv.FormatInt(rev, 10)}, nil
}

// DeleteRecord implements driver.Store like PutRecord.
func (d *Driver) DeleteRecord(ctx context.Context, key, ifVersion string) error {
	c, cancel := d.op(ctx)
	defer cancel()
	k := d.recordKey(key)
	if ifVersion == "" {
		if _, err := d.cli.Delete(c, k); err != nil {
			return d.wrap(ctx, "delete record "+key, err)
		}
		return nil
	}
	cmp, ok := condition(k, ifVersion)
	if !ok {
		return conflict(key)
	}
	resp, err := d.cli.Txn(c).If(cmp).Then(clientv3.OpDelete(k)).Commit()
	if err != nil {
		return d.wrap(ctx, "delete record "+key, err)
	}
	if !resp.Succeeded {
		return conflict(key)
	}
	return nil
}

// WatchRecords implements driver.Store: a range read, then an etcd watch
// on the prefix from the next revision. A compaction, a cancelled watch
// or a server whose revision went back (wiped data) makes the stream
// read again; a lost connection or a silent server is reported, as the
// instance streams do.
func (d *Driver) WatchRecords(ctx context.Context, prefix string) (driver.RecordStream, error) {
	sctx, cancel := context.WithCancel(ctx)
	return &recordStream{d: d, prefix: prefix, parent: sctx, cancel: cancel, needList: true}, nil
}

type recordStream struct {
	d      *Driver
	prefix string
	parent context.Context
	cancel context.CancelFunc

	wcancel  context.CancelFunc
	wch      clientv3.WatchChan
	lost     <-chan struct{}
	needList bool
	dirty    bool
	rev      int64
	listed   int64
	state    map[string]driver.Record
	lastSign time.Time
}

func (s *recordStream) Close() error {
	s.cancel()
	return nil
}

func (s *recordStream) closedErr() error {
	return fmt.Errorf("etcd: watch records %s: %w", s.prefix, driver.ErrClosed)
}

func (s *recordStream) Next(ctx context.Context) ([]driver.Record, error) {
	for {
		if s.parent.Err() != nil {
			return nil, s.closedErr()
		}
		if s.needList {
			if err := s.relist(ctx); err != nil {
				return nil, err
			}
		}
		if s.dirty {
			s.dirty = false
			out := make([]driver.Record, 0, len(s.state))
			for _, r := range s.state {
				out = append(out, r)
			}
			return out, nil
		}
		if err := s.wait(ctx); err != nil {
			return nil, err
		}
	}
}

func (s *recordStream) relist(ctx context.Context) error {
	if s.wcancel != nil {
		s.wcancel()
		s.wcancel = nil
	}
	s.lost = s.d.lostC()
	lctx, cancel := s.d.op(ctx)
	defer cancel()
	stop := context.AfterFunc(s.parent, cancel)
	defer stop()
	recs, rev, err := s.d.listRecords(lctx, s.prefix)
	if err != nil {
		if s.parent.Err() != nil {
			return s.closedErr()
		}
		return s.d.wrap(ctx, "watch records "+s.prefix+": list", err)
	}
	s.state = make(map[string]driver.Record, len(recs))
	for _, r := range recs {
		s.state[r.Key] = r
	}
	s.rev, s.listed, s.dirty = rev, rev, true
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(s.parent))
	s.wcancel = wcancel
	s.wch = s.d.cli.Watch(wctx, s.d.recordKey(s.prefix), clientv3.WithPrefix(), clientv3.WithRev(rev+1),
		clientv3.WithProgressNotify())
	s.needList = false
	s.lastSign = time.Now()
	return nil
}

func (s *recordStream) wait(ctx context.Context) error {
	p := s.d.progress
	timer := time.NewTimer(max(p-time.Since(s.lastSign), 0))
	defer timer.Stop()
	select {
	case <-s.parent.Done():
		return s.closedErr()
	case <-ctx.Done():
		return ctx.Err()
	case <-s.lost:
		s.needList = true
		return fmt.Errorf("etcd: watch records %s: %w: connection to the server lost", s.prefix, driver.ErrUnavailable)
	case resp, ok := <-s.wch:
		s.lastSign = time.Now()
		switch {
		case !ok || resp.Canceled || resp.Err() != nil:
			s.needList = true // compacted, leader lost or closed: read again
		case resp.Header.Revision > 0 && resp.Header.Revision < s.rev:
			s.needList = true // the server's data went back in time
		case !resp.IsProgressNotify():
			s.apply(resp.Events)
		}
		return nil
	case <-timer.C:
		if time.Since(s.lastSign) < p {
			return nil
		}
		rev, err := s.d.probe(s.parent, ctx)
		switch {
		case err != nil:
			if s.parent.Err() != nil {
				return s.closedErr()
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("etcd: watch records %s: %w: silent for %v and %v", s.prefix, driver.ErrUnavailable,
				time.Since(s.lastSign).Round(time.Millisecond), err)
		case rev < s.rev:
			s.needList = true
		default:
			s.lastSign = time.Now()
		}
		return nil
	}
}

func (s *recordStream) apply(evs []*clientv3.Event) {
	for _, ev := range evs {
		if ev.Kv.ModRevision <= s.listed {
			continue
		}
		s.rev = max(s.rev, ev.Kv.ModRevision)
		s.dirty = true
		r := s.d.record(ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision)
		if ev.Type == clientv3.EventTypeDelete {
			delete(s.state, r.Key)
			continue
		}
		s.state[r.Key] = r
	}
}
