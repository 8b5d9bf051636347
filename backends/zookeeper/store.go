package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/roster-go/roster/registry/driver"
)

// Records live in persistent znodes, children of <root>/_records, one
// level deep: a key's '/' is ':' in the znode's name
// (policy/user-svc → <root>/_records/policy:user-svc), since ':' is no
// key character. So a list is one Children read and a watch one child
// watch, and no parent znode is ever taken for a record with an empty
// value. "_records" is no valid service name, so Services, List and the
// instance watches skip it in both layouts.
//
// A record's Version is "<czxid>.<version>": the transaction that
// created the znode and its data version. The data version alone starts
// again at 0 when a znode is deleted and created again; the czxid never
// repeats.

var _ driver.Store = (*Driver)(nil)

// recordsDir is the znode under the root that holds records.
const recordsDir = "_records"

func (d *Driver) recordsPath() string { return d.root + "/" + recordsDir }

func (d *Driver) recordPath(key string) string {
	return d.recordsPath() + "/" + strings.ReplaceAll(key, "/", ":")
}

func recordKey(name string) string { return strings.ReplaceAll(name, ":", "/") }

func recordVersion(st *zk.Stat) string {
	return strconv.FormatInt(st.Czxid, 10) + "." + strconv.FormatInt(int64(st.Version), 10)
}

// parseVersion splits a Version; false for one this driver never hands out.
func parseVersion(v string) (czxid int64, version int32, ok bool) {
	c, n, found := strings.Cut(v, ".")
	if !found {
		return 0, 0, false
	}
	cz, err1 := strconv.ParseInt(c, 10, 64)
	ver, err2 := strconv.ParseInt(n, 10, 32)
	if err1 != nil || err2 != nil || cz <= 0 || ver < 0 {
		return 0, 0, false
	}
	return cz, int32(ver), true
}

func conflict(key string) error {
	return fmt.Errorf("zookeeper: record %s: %w", key, driver.ErrConflict)
}

// GetRecord implements driver.Store.
func (d *Driver) GetRecord(ctx context.Context, key string) (driver.Record, error) {
	conn := d.read.current()
	var data []byte
	var st *zk.Stat
	err := d.call(ctx, "get record "+key, func() (err error) {
		data, st, err = conn.Get(d.recordPath(key))
		return err
	})
	if err != nil {
		return driver.Record{}, err // ErrNoNode is ErrNotFound (ErrorKind)
	}
	return driver.Record{Key: key, Value: data, Version: recordVersion(st)}, nil
}

// ListRecords implements driver.Store.
func (d *Driver) ListRecords(ctx context.Context, prefix string) ([]driver.Record, error) {
	recs, _, err := d.readRecords(ctx, prefix, nil)
	return recs, err
}

// readRecords reads the records under prefix. With watches non-nil it
// also arms a watch on the directory and on each record not yet in
// watches, and adds them (the directory under ""): each fires once, at
// the next change of what it watches.
func (d *Driver) readRecords(ctx context.Context, prefix string, watches map[string]<-chan zk.Event) ([]driver.Record, map[string]<-chan zk.Event, error) {
	conn := d.read.current()
	dir := d.recordsPath()
	var names []string
	err := d.call(ctx, "list records "+prefix, func() error {
		var err error
		switch _, armed := watches[""]; {
		case watches == nil || armed:
			names, _, err = conn.Children(dir)
		default:
			var ch <-chan zk.Event
			names, _, ch, err = conn.ChildrenW(dir)
			if errors.Is(err, zk.ErrNoNode) {
				// No record yet: wait for the directory to appear.
				var ok bool
				ok, _, ch, err = conn.ExistsW(dir)
				if err == nil && ok {
					return errRetry // created meanwhile: read it
				}
			}
			if err == nil {
				watches[""] = ch
			}
		}
		return err
	})
	switch {
	case errors.Is(err, errRetry):
		return d.readRecords(ctx, prefix, watches)
	case errors.Is(err, zk.ErrNoNode):
		return []driver.Record{}, watches, nil
	case err != nil:
		return nil, watches, err
	}
	p := strings.ReplaceAll(prefix, "/", ":")
	out := []driver.Record{}
	for _, name := range names {
		if !strings.HasPrefix(name, p) {
			continue
		}
		path := dir + "/" + name
		var data []byte
		var st *zk.Stat
		err := d.call(ctx, "list records "+prefix, func() (err error) {
			if _, armed := watches[path]; watches == nil || armed {
				data, st, err = conn.Get(path)
				return err
			}
			var ch <-chan zk.Event
			data, st, ch, err = conn.GetW(path)
			if err == nil {
				watches[path] = ch
			}
			return err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue // deleted since the directory was read; its watch says so
		}
		if err != nil {
			return nil, watches, err
		}
		out = append(out, driver.Record{Key: recordKey(name), Value: data, Version: recordVersion(st)})
	}
	return out, watches, nil
}

var errRetry = errors.New("retry")

// PutRecord implements driver.Store. VersionAbsent is a create, which
// fails if the znode exists; a version is a set at that data version,
// once the znode's czxid is checked; "" is a set, or a create where
// there is no znode.
func (d *Driver) PutRecord(ctx context.Context, key string, value []byte, ifVersion string) (driver.Record, error) {
	conn := d.read.current()
	p := d.recordPath(key)
	var st *zk.Stat
	// A create answers with no Stat: one transaction creates the znode and
	// sets its data again, whose answer has the Stat of the znode created.
	create := func() error {
		res, err := conn.Multi(&zk.CreateRequest{Path: p, Data: value, Acl: d.acl},
			&zk.SetDataRequest{Path: p, Data: value, Version: 0})
		if err != nil {
			return multiErr(res, err)
		}
		if len(res) != 2 || res[1].Stat == nil {
			return fmt.Errorf("answer of %d results", len(res))
		}
		st = res[1].Stat
		return nil
	}
	var err error
	switch {
	case ifVersion == driver.VersionAbsent:
		err = d.withDir(ctx, conn, "put record "+key, create)
		if errors.Is(err, zk.ErrNodeExists) {
			return driver.Record{}, conflict(key)
		}
	case ifVersion == "":
		err = d.withDir(ctx, conn, "put record "+key, func() error {
			for {
				var err error
				if st, err = conn.Set(p, value, -1); !errors.Is(err, zk.ErrNoNode) {
					return err
				}
				if err = create(); !errors.Is(err, zk.ErrNodeExists) {
					return err
				}
			}
		})
	default:
		cz, ver, ok := parseVersion(ifVersion)
		if !ok {
			return driver.Record{}, conflict(key)
		}
		err = d.call(ctx, "put record "+key, func() error {
			if err := sameZnode(conn, p, cz); err != nil {
				return err
			}
			var err error
			st, err = conn.Set(p, value, ver)
			return err
		})
		if errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode) || errors.Is(err, errOtherZnode) {
			return driver.Record{}, conflict(key)
		}
	}
	if err != nil {
		return driver.Record{}, err
	}
	return driver.Record{Key: key, Value: value, Version: recordVersion(st)}, nil
}

// multiErr returns the error of the operation that failed in a
// transaction rather than the rollback ("runtime inconsistency") of the
// others.
func multiErr(res []zk.MultiResponse, err error) error {
	for _, r := range res {
		for _, e := range []error{zk.ErrNodeExists, zk.ErrNoNode, zk.ErrNoAuth, zk.ErrInvalidACL, zk.ErrBadVersion} {
			if errors.Is(r.Error, e) {
				return r.Error
			}
		}
	}
	return err
}

var errOtherZnode = errors.New("the znode was deleted and created again")

// sameZnode checks that the znode at p is the one created at czxid. The
// data version alone would take a znode created again for the one
// deleted; the window between this check and the write is one round
// trip.
func sameZnode(conn *zk.Conn, p string, czxid int64) error {
	ok, st, err := conn.Exists(p)
	switch {
	case err != nil:
		return err
	case !ok:
		return zk.ErrNoNode
	case st.Czxid != czxid:
		return errOtherZnode
	}
	return nil
}

// withDir runs fn, creating the records directory first when fn finds
// it missing (fn's create fails with ErrNoNode).
func (d *Driver) withDir(ctx context.Context, conn *zk.Conn, what string, fn func() error) error {
	for range 3 {
		err := d.call(ctx, what, fn)
		if !errors.Is(err, zk.ErrNoNode) {
			return err
		}
		// The directory is a container: the server deletes it once it
		// has no records, and a write may race with that.
		if err := d.ensureParents(ctx, conn, d.recordPath("x")); err != nil {
			return err
		}
	}
	return d.call(ctx, what, fn)
}

// DeleteRecord implements driver.Store like PutRecord.
func (d *Driver) DeleteRecord(ctx context.Context, key, ifVersion string) error {
	conn := d.read.current()
	p := d.recordPath(key)
	switch ifVersion {
	case "":
		err := d.call(ctx, "delete record "+key, func() error { return conn.Delete(p, -1) })
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		return err
	case driver.VersionAbsent:
		var ok bool
		err := d.call(ctx, "delete record "+key, func() (err error) {
			ok, _, err = conn.Exists(p)
			return err
		})
		if err == nil && ok {
			return conflict(key)
		}
		return err
	}
	cz, ver, ok := parseVersion(ifVersion)
	if !ok {
		return conflict(key)
	}
	err := d.call(ctx, "delete record "+key, func() error {
		if err := sameZnode(conn, p, cz); err != nil {
			return err
		}
		return conn.Delete(p, ver)
	})
	if errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode) || errors.Is(err, errOtherZnode) {
		return conflict(key)
	}
	return err
}

// WatchRecords implements driver.Store: each Next reads the prefix and
// arms one-shot watches on the directory and on every record, then
// waits for one to fire. A watch armed stays armed until it fires, so a
// record is watched once, not once per read. recordRelist bounds the
// wait, in case a watch was lost with a session.
func (d *Driver) WatchRecords(ctx context.Context, prefix string) (driver.RecordStream, error) {
	sctx, cancel := context.WithCancel(ctx)
	return &recordStream{d: d, prefix: prefix, parent: sctx, cancel: cancel, watches: map[string]<-chan zk.Event{}}, nil
}

// recordRelist is the longest a record watch waits without reading.
const recordRelist = 30 * time.Second

type recordStream struct {
	d       *Driver
	prefix  string
	parent  context.Context
	cancel  context.CancelFunc
	watches map[string]<-chan zk.Event // armed, by path ("" the directory)
	last    map[string]string          // key → version last returned
	sent    bool
}

func (s *recordStream) Close() error {
	s.cancel()
	return nil
}

func (s *recordStream) closedErr() error {
	return fmt.Errorf("zookeeper: watch records %s: %w", s.prefix, driver.ErrClosed)
}

func (s *recordStream) Next(ctx context.Context) ([]driver.Record, error) {
	for {
		if s.parent.Err() != nil {
			return nil, s.closedErr()
		}
		recs, _, err := s.d.readRecords(ctx, s.prefix, s.watches)
		if err != nil {
			if s.parent.Err() != nil {
				return nil, s.closedErr()
			}
			return nil, err
		}
		if !s.sent || s.changed(recs) {
			s.sent = true
			s.last = make(map[string]string, len(recs))
			for _, r := range recs {
				s.last[r.Key] = r.Version
			}
			return recs, nil
		}
		if err := s.wait(ctx); err != nil {
			return nil, err
		}
	}
}

// wait blocks until an armed watch fires, and disarms it.
func (s *recordStream) wait(ctx context.Context) error {
	timer := time.NewTimer(recordRelist)
	defer timer.Stop()
	cases := []reflect.SelectCase{
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.parent.Done())},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)},
	}
	paths := make([]string, 0, len(s.watches))
	for p, ch := range s.watches {
		paths = append(paths, p)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	i, _, _ := reflect.Select(cases)
	switch i {
	case 0:
		return s.closedErr()
	case 1:
		return ctx.Err()
	case 2:
		return nil // read again; the watches armed stay armed
	}
	delete(s.watches, paths[i-3])
	return nil
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
