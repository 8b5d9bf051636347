package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/registry/driver"
)

// Records are kept alike in both layouts, in three keys that share the
// hash tag {_records}, so that every script runs on one Cluster slot:
//
//	<prefix>:{_records}:data  hash, record key → value
//	<prefix>:{_records}:ver   hash, record key → version
//	<prefix>:{_records}:seq   counter, the last version handed out
//
// A version is the counter's next value, so it is never reused, not even
// for a key deleted and written again. Every write publishes the key on
// the channel <prefix>:{_records}:changed. "{_records}" is no service
// name (a name starts with [a-z0-9]), so neither layout's Services, List
// or Watch reads these keys as a service's.

var _ driver.Store = (*Driver)(nil)

// recordPoll bounds how long a record watch waits between two reads when
// no notification comes: pubsub drops messages while a connection is
// down, and a missed one must not leave a watcher behind for long.
const recordPoll = 500 * time.Millisecond

type recordKeys struct{ data, ver, seq, channel string }

func (d *conn) recordKeys() recordKeys {
	b := d.o.Prefix + ":{_records}:"
	return recordKeys{data: b + "data", ver: b + "ver", seq: b + "seq", channel: b + "changed"}
}

func (k recordKeys) keys() []string { return []string{k.data, k.ver, k.seq} }

// luaCheck leaves ok false when the stored version does not satisfy
// ARGV[2], the write's precondition.
const luaCheck = `local cur = redis.call('HGET', KEYS[2], ARGV[1])
local want = ARGV[2]
local ok = want == '' or (want == '` + driver.VersionAbsent + `' and not cur) or (cur and cur == want)
`

// KEYS: data, ver, seq. ARGV: key, precondition, value, channel.
// Returns the new version, or nil on a failed precondition.
var recordPutScript = luaScript(luaCheck + `if not ok then return false end
local v = tostring(redis.call('INCR', KEYS[3]))
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[1], v)
redis.call('PUBLISH', ARGV[4], ARGV[1])
return v
`)

// KEYS: data, ver, seq. ARGV: key, precondition, channel. Returns 1, or
// nil on a failed precondition.
var recordDelScript = luaScript(luaCheck + `if not ok then return false end
if cur then
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('PUBLISH', ARGV[3], ARGV[1])
end
return 1
`)

// KEYS: data, ver, seq. ARGV: key prefix. Returns key, value, version
// triples of the records whose key starts with the prefix, read at one
// instant. A value without a version was not written by Roster: skipped.
var recordListScript = luaScript(`local out = {}
local p = ARGV[1]
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local k = all[i]
  if string.sub(k, 1, #p) == p then
    local v = redis.call('HGET', KEYS[2], k)
    if v then
      out[#out + 1] = k
      out[#out + 1] = all[i + 1]
      out[#out + 1] = v
    end
  end
end
return out
`)

// KEYS: data, ver, seq. ARGV: key. Returns value, version, or nil.
var recordGetScript = luaScript(`local v = redis.call('HGET', KEYS[2], ARGV[1])
if not v then return false end
local d = redis.call('HGET', KEYS[1], ARGV[1])
if not d then return false end
return {d, v}
`)

// GetRecord implements driver.Store.
func (d *Driver) GetRecord(ctx context.Context, key string) (driver.Record, error) {
	if err := d.known(); err != nil {
		return driver.Record{}, err
	}
	res, err := recordGetScript.Run(ctx, d.c, d.recordKeys().keys(), key).StringSlice()
	switch {
	case errors.Is(err, goredis.Nil):
		return driver.Record{}, fmt.Errorf("redis: record %s: %w", key, driver.ErrNotFound)
	case err != nil:
		return driver.Record{}, d.wrap("get record "+key, err)
	case len(res) != 2:
		return driver.Record{}, d.wrap("get record "+key, fmt.Errorf("reply of %d items", len(res)))
	}
	return driver.Record{Key: key, Value: []byte(res[0]), Version: res[1]}, nil
}

// ListRecords implements driver.Store with one script: the records of a
// deployment are few and small (policies, overrides), and one hash read
// whole gives a consistent set.
func (d *Driver) ListRecords(ctx context.Context, prefix string) ([]driver.Record, error) {
	if err := d.known(); err != nil {
		return nil, err
	}
	recs, err := d.listRecords(ctx, d.c, prefix)
	if err != nil {
		return nil, d.wrap("list records "+prefix, err)
	}
	return recs, nil
}

func (d *conn) listRecords(ctx context.Context, c goredis.Scripter, prefix string) ([]driver.Record, error) {
	res, err := recordListScript.Run(ctx, c, d.recordKeys().keys(), prefix).StringSlice()
	if err != nil {
		return nil, err
	}
	if len(res)%3 != 0 {
		return nil, fmt.Errorf("reply of %d items", len(res))
	}
	out := make([]driver.Record, 0, len(res)/3)
	for i := 0; i < len(res); i += 3 {
		out = append(out, driver.Record{Key: res[i], Value: []byte(res[i+1]), Version: res[i+2]})
	}
	return out, nil
}

func conflict(key string) error { return fmt.Errorf("redis: record %s: %w", key, driver.ErrConflict) }

// PutRecord implements driver.Store with one script: check, count, write
// and publish.
func (d *Driver) PutRecord(ctx context.Context, key string, value []byte, ifVersion string) (driver.Record, error) {
	if err := d.known(); err != nil {
		return driver.Record{}, err
	}
	k := d.recordKeys()
	v, err := recordPutScript.Run(ctx, d.c, k.keys(), key, ifVersion, value, k.channel).Text()
	switch {
	case errors.Is(err, goredis.Nil):
		return driver.Record{}, conflict(key)
	case err != nil:
		return driver.Record{}, d.wrap("put record "+key, err)
	}
	return driver.Record{Key: key, Value: value, Version: v}, nil
}

// DeleteRecord implements driver.Store like PutRecord.
func (d *Driver) DeleteRecord(ctx context.Context, key, ifVersion string) error {
	if err := d.known(); err != nil {
		return err
	}
	k := d.recordKeys()
	err := recordDelScript.Run(ctx, d.c, k.keys(), key, ifVersion, k.channel).Err()
	switch {
	case errors.Is(err, goredis.Nil):
		return conflict(key)
	case err != nil:
		return d.wrap("delete record "+key, err)
	}
	return nil
}

// WatchRecords implements driver.Store: it subscribes to the change
// channel and reads the prefix on each notification, and at least every
// recordPoll, since pubsub loses what is published while the connection
// is down. Next returns when a read differs from the last returned.
func (d *Driver) WatchRecords(ctx context.Context, prefix string) (driver.RecordStream, error) {
	if err := d.known(); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	return &recordStream{d: d, prefix: prefix, parent: sctx, cancel: cancel}, nil
}

type recordStream struct {
	d      *Driver
	prefix string
	parent context.Context
	cancel context.CancelFunc

	mu     sync.Mutex // guards ps and closed: Close may come from another goroutine
	ps     *goredis.PubSub
	closed bool
	msgs   <-chan *goredis.Message
	last   map[string]string // key → version of the set last returned
	sent   bool
}

// Close ends the subscription: closing its socket does not wait on the
// server.
func (s *recordStream) Close() error {
	s.cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.ps != nil {
		_ = s.ps.Close()
	}
	return nil
}

func (s *recordStream) closedErr() error {
	return fmt.Errorf("redis: watch records %s: %w", s.prefix, driver.ErrClosed)
}

func (s *recordStream) Next(ctx context.Context) ([]driver.Record, error) {
	if s.msgs == nil {
		// Subscribed before the read, so that a write after the read is
		// announced. The subscription's own connection is go-redis's:
		// it reconnects by itself, and the poll covers the gap.
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, s.closedErr()
		}
		s.ps = s.d.c.Subscribe(s.parent, s.d.recordKeys().channel)
		s.msgs = s.ps.Channel(goredis.WithChannelSize(16))
		s.mu.Unlock()
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	if s.sent {
		timer.Reset(recordPoll)
	}
	for {
		select {
		case <-s.parent.Done():
			return nil, s.closedErr()
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.msgs:
			s.drainMsgs()
		case <-timer.C:
		}
		timer.Reset(recordPoll)
		recs, err := s.d.listRecords(ctx, s.d.c, s.prefix)
		if err != nil {
			if s.parent.Err() != nil {
				return nil, s.closedErr()
			}
			return nil, s.d.wrap("watch records "+s.prefix, err)
		}
		if !s.sent || s.changed(recs) {
			s.sent = true
			s.last = make(map[string]string, len(recs))
			for _, r := range recs {
				s.last[r.Key] = r.Version
			}
			return recs, nil
		}
	}
}

// drainMsgs drops the notifications already waiting: one read covers
// them all.
func (s *recordStream) drainMsgs() {
	for {
		select {
		case <-s.msgs:
		default:
			return
		}
	}
}

func (s *recordStream) changed(recs []driver.Record) bool {
	if len(recs) != len(s.last) {
		return true
	}
	for _, r := range recs {
		if v, ok := s.last[r.Key]; !ok || v != r.Version {
			return true
		}
	}
	return false
}
