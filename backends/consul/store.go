package consul

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/roster-go/roster/registry/driver"
)

// Records live in Consul's KV store, one key each under recordsPrefix,
// apart from the catalog where instances are: Services, Lookup and the
// watches never read the KV store. A record's Version is its key's
// ModifyIndex, a Raft index: it changes on every write and never goes
// back, not even for a key deleted and written again. Writes are KV
// transactions, so that an unconditional put still returns the index it
// wrote at.

var _ driver.Store = (*Driver)(nil)

// recordsPrefix is where records live in the KV store.
const recordsPrefix = "roster/records/"

func kvRecord(p *api.KVPair) driver.Record {
	return driver.Record{
		Key:     strings.TrimPrefix(p.Key, recordsPrefix),
		Value:   p.Value,
		Version: strconv.FormatUint(p.ModifyIndex, 10),
	}
}

// GetRecord implements driver.Store.
func (d *Driver) GetRecord(ctx context.Context, key string) (driver.Record, error) {
	var p *api.KVPair
	_, err := d.call(ctx, func(ctx context.Context) (err error) {
		p, _, err = d.client.KV().Get(recordsPrefix+key, d.query(ctx))
		return err
	})
	if err != nil {
		return driver.Record{}, d.wrap(ctx, "get record "+key, err)
	}
	if p == nil {
		return driver.Record{}, fmt.Errorf("consul: record %s: %w", key, driver.ErrNotFound)
	}
	return kvRecord(p), nil
}

// ListRecords implements driver.Store.
func (d *Driver) ListRecords(ctx context.Context, prefix string) ([]driver.Record, error) {
	var recs []driver.Record
	_, err := d.call(ctx, func(ctx context.Context) (err error) {
		recs, _, err = d.listRecords(d.client, d.query(ctx), prefix)
		return err
	})
	if err != nil {
		return nil, d.wrap(ctx, "list records "+prefix, err)
	}
	return recs, nil
}

func (d *Driver) listRecords(c *api.Client, q *api.QueryOptions, prefix string) ([]driver.Record, uint64, error) {
	pairs, meta, err := c.KV().List(recordsPrefix+prefix, q)
	if err != nil {
		return nil, 0, err
	}
	out := make([]driver.Record, 0, len(pairs))
	for _, p := range pairs {
		out = append(out, kvRecord(p))
	}
	return out, meta.LastIndex, nil
}

// check returns the transaction operation that tests a write's
// precondition, nil for none, or false when no stored record can satisfy
// it (a version this driver never hands out).
func check(k, ifVersion string) (*api.KVTxnOp, bool) {
	switch ifVersion {
	case "":
		return nil, true
	case driver.VersionAbsent:
		return &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: k}, true
	}
	idx, err := strconv.ParseUint(ifVersion, 10, 64)
	if err != nil || idx == 0 {
		return nil, false
	}
	return &api.KVTxnOp{Verb: api.KVCheckIndex, Key: k, Index: idx}, true
}

func conflict(key string) error { return fmt.Errorf("consul: record %s: %w", key, driver.ErrConflict) }

// txn runs ops as one KV transaction. A transaction that Consul rolled
// back for a failed check is ErrConflict; one refused for the token's
// rights is ErrInvalid, as any 403 is.
func (d *Driver) txn(ctx context.Context, what, key string, ops api.KVTxnOps) (*api.KVTxnResponse, error) {
	var ok bool
	var resp *api.KVTxnResponse
	_, err := d.call(ctx, func(ctx context.Context) (err error) {
		ok, resp, _, err = d.client.KV().Txn(ops, d.query(ctx))
		return err
	})
	if err != nil {
		return nil, d.wrap(ctx, what+" "+key, err)
	}
	if !ok {
		for _, e := range resp.Errors {
			if strings.Contains(strings.ToLower(e.What), "permission denied") {
				return nil, fmt.Errorf("consul: %s %s: %w: permission denied (check the ACL token: it needs key_prefix %q write): %s",
					what, key, driver.ErrInvalid, recordsPrefix, e.What)
			}
		}
		return nil, conflict(key)
	}
	return resp, nil
}

// PutRecord implements driver.Store: one transaction of the check, if
// any, and the set, which returns the index it wrote at.
func (d *Driver) PutRecord(ctx context.Context, key string, value []byte, ifVersion string) (driver.Record, error) {
	k := recordsPrefix + key
	chk, ok := check(k, ifVersion)
	if !ok {
		return driver.Record{}, conflict(key)
	}
	var ops api.KVTxnOps
	if chk != nil {
		ops = append(ops, chk)
	}
	ops = append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: k, Value: value})
	resp, err := d.txn(ctx, "put record", key, ops)
	if err != nil {
		return driver.Record{}, err
	}
	// The set is the last operation; a check before it answers with the
	// entry as it was.
	if n := len(resp.Results); n > 0 && resp.Results[n-1] != nil && resp.Results[n-1].ModifyIndex > 0 {
		return driver.Record{Key: key, Value: value, Version: strconv.FormatUint(resp.Results[n-1].ModifyIndex, 10)}, nil
	}
	return driver.Record{}, fmt.Errorf("consul: put record %s: %w: the transaction's answer has no index", key, driver.ErrUnavailable)
}

// DeleteRecord implements driver.Store like PutRecord.
func (d *Driver) DeleteRecord(ctx context.Context, key, ifVersion string) error {
	k := recordsPrefix + key
	chk, ok := check(k, ifVersion)
	if !ok {
		return conflict(key)
	}
	var ops api.KVTxnOps
	if chk != nil {
		ops = append(ops, chk)
	}
	if ifVersion != driver.VersionAbsent {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVDelete, Key: k})
	}
	_, err := d.txn(ctx, "delete record", key, ops)
	return err
}

// WatchRecords implements driver.Store with blocking queries on the
// prefix: the first Next reads at once, each later one waits for the
// prefix's index to move past the last read.
func (d *Driver) WatchRecords(ctx context.Context, prefix string) (driver.RecordStream, error) {
	sctx, cancel := context.WithCancel(ctx)
	return &recordStream{d: d, prefix: prefix, parent: sctx, cancel: cancel}, nil
}

type recordStream struct {
	d      *Driver
	prefix string
	parent context.Context
	cancel context.CancelFunc
	index  uint64 // LastIndex of the last read; 0 before the first
	sent   bool
}

func (s *recordStream) Close() error {
	s.cancel()
	return nil
}

func (s *recordStream) Next(ctx context.Context) ([]driver.Record, error) {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	cancelled := context.AfterFunc(s.parent, stop)
	defer cancelled()
	for {
		if s.parent.Err() != nil {
			return nil, fmt.Errorf("consul: watch records %s: %w", s.prefix, driver.ErrClosed)
		}
		var recs []driver.Record
		var index uint64
		err := s.d.block(ctx, func(rctx context.Context) (err error) {
			q := s.d.query(rctx)
			if s.sent {
				q.WaitIndex, q.WaitTime = s.index, s.d.o.Wait
			}
			recs, index, err = s.d.listRecords(s.d.watchClient, q, s.prefix)
			return err
		})
		if err != nil {
			if s.parent.Err() != nil {
				return nil, fmt.Errorf("consul: watch records %s: %w", s.prefix, driver.ErrClosed)
			}
			return nil, s.d.wrap(ctx, "watch records "+s.prefix, err)
		}
		if s.sent && index == s.index {
			continue // the wait ended with no change
		}
		// An index that went back (a restored snapshot, another server)
		// starts the wait again from the answer's, as Consul advises.
		s.index, s.sent = index, true
		return recs, nil
	}
}
