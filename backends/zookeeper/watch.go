package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/roster-go/roster/registry/driver"
)

// Watch implements driver.Driver.
func (d *Driver) Watch(ctx context.Context, service string) (driver.Stream, error) {
	return &stream{d: d, service: service, path: d.servicePath(service), closed: make(chan struct{})}, nil
}

// stream follows one service with one-shot watches: a child (or exists)
// watch on the service znode, a data watch per instance znode. Each event
// is followed by the read that re-arms its watch.
type stream struct {
	d       *Driver
	service string
	path    string

	closeOnce sync.Once
	closed    chan struct{}

	conn     *zk.Conn
	lost     <-chan struct{}
	started  bool
	insts    map[string]driver.Instance
	dataW    map[string]<-chan zk.Event // armed data watches, by instance ID
	serviceW <-chan zk.Event            // armed watch on the service znode
	rev      uint64
}

// Close implements driver.Stream. Armed watches stay with the client until
// they fire or the session ends: ZooKeeper cannot remove them.
func (s *stream) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}

// Next implements driver.Stream.
func (s *stream) Next(ctx context.Context) (driver.Snapshot, error) {
	var err error
	if !s.started {
		err = s.start(ctx)
	} else {
		// Registry drops a state repeated: any event counts as a change.
		err = s.wait(ctx)
	}
	if err != nil {
		return driver.Snapshot{}, err
	}
	return s.snapshot(), nil
}

// start reads the whole service with its watches armed. A stream that
// fails is replaced by the registry, so there is no relist in place.
func (s *stream) start(ctx context.Context) error {
	lost, up := s.d.read.lostC()
	if !up {
		// Still connecting: let the call wait for the session instead of
		// failing at once, but any drop from here on ends the stream.
		_ = s.d.call(ctx, "sync", func() error { _, err := s.d.read.current().Sync(s.path); return ignoreNoNode(err) })
		lost, up = s.d.read.lostC()
		if !up {
			return fmt.Errorf("zookeeper: watch %s: %w: no session", s.service, driver.ErrUnavailable)
		}
	}
	s.conn, s.lost = s.d.read.current(), lost
	s.insts, s.dataW = map[string]driver.Instance{}, map[string]<-chan zk.Event{}
	if err := s.readChildren(ctx); err != nil {
		return err
	}
	s.started = true
	return nil
}

func ignoreNoNode(err error) error {
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	return err
}

// snapshot returns the current state.
func (s *stream) snapshot() driver.Snapshot {
	cur := make([]driver.Instance, 0, len(s.insts))
	for _, in := range s.insts {
		cur = append(cur, in)
	}
	return driver.Snapshot{Service: s.service, Instances: cur, Revision: s.rev, At: time.Now()}
}

// readChildren re-arms the service znode's watch and reads the instances
// that have no data watch yet; instances no longer listed are dropped.
func (s *stream) readChildren(ctx context.Context) error {
	var kids []string
	var st *zk.Stat
	var ch <-chan zk.Event
	exists := true
	err := s.d.call(ctx, "watch "+s.service, func() error {
		// A service with no znode is watched for its creation; one
		// created between the two calls is read at once. The loop is
		// bounded for a znode created and deleted over and over.
		for range 3 {
			var err error
			kids, st, ch, err = s.conn.ChildrenW(s.path)
			if !errors.Is(err, zk.ErrNoNode) {
				return err
			}
			if exists, st, ch, err = s.conn.ExistsW(s.path); err != nil || !exists {
				return err
			}
		}
		return fmt.Errorf("service znode %s keeps being created and deleted", s.path)
	})
	if err != nil {
		return err
	}
	s.serviceW = ch
	if exists {
		s.rev = max(s.rev, uint64(st.Pzxid))
	}
	listed := map[string]bool{}
	for _, id := range kids {
		listed[id] = true
		if s.dataW[id] == nil {
			if err := s.readInstance(ctx, id); err != nil {
				return err
			}
		}
	}
	for id := range s.insts {
		if !listed[id] {
			delete(s.insts, id)
		}
	}
	return nil
}

// readInstance reads one instance and arms its data watch.
func (s *stream) readInstance(ctx context.Context, id string) error {
	var val []byte
	var st *zk.Stat
	var ch <-chan zk.Event
	err := s.d.call(ctx, "watch "+s.service+"/"+id, func() error {
		var err error
		val, st, ch, err = s.conn.GetW(s.d.path(s.service, id))
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		delete(s.insts, id) // gone since listed; the child watch says so too
		delete(s.dataW, id)
		return nil
	}
	if err != nil {
		return err
	}
	s.dataW[id] = ch
	s.rev = max(s.rev, uint64(st.Mzxid))
	if in, ok := s.d.decode(s.service, id, val); ok {
		s.insts[id] = in
	} else {
		delete(s.insts, id)
	}
	return nil
}

// wait blocks for the next event and handles it, with every other event
// already delivered, so that one change read as two events gives one state.
func (s *stream) wait(ctx context.Context) error {
	ids, cases := s.cases(ctx)
	chosen, v, _ := reflect.Select(cases)
	for {
		if err := s.handle(ctx, chosen, ids, v); err != nil {
			return err
		}
		ids, cases = s.cases(ctx)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectDefault})
		if chosen, v, _ = reflect.Select(cases); chosen == len(cases)-1 {
			return nil
		}
	}
}

// The fixed select cases, before one per instance data watch.
const (
	caseCtx = iota
	caseClosed
	caseLost
	caseService
	caseData
)

func (s *stream) cases(ctx context.Context) ([]string, []reflect.SelectCase) {
	recv := func(c any) reflect.SelectCase {
		return reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c)}
	}
	cases := []reflect.SelectCase{recv(ctx.Done()), recv(s.closed), recv(s.lost), recv(s.serviceW)}
	ids := make([]string, 0, len(s.dataW))
	for id, ch := range s.dataW {
		ids = append(ids, id)
		cases = append(cases, recv(ch))
	}
	return ids, cases
}

func (s *stream) handle(ctx context.Context, chosen int, ids []string, v reflect.Value) error {
	switch chosen {
	case caseCtx:
		return ctx.Err()
	case caseClosed:
		return fmt.Errorf("zookeeper: watch %s: %w", s.service, driver.ErrClosed)
	case caseLost:
		return fmt.Errorf("zookeeper: watch %s: %w: connection lost", s.service, driver.ErrUnavailable)
	}
	ev, _ := v.Interface().(zk.Event)
	if ev.Type == zk.EventNotWatching {
		return fmt.Errorf("zookeeper: watch %s: %w: %v", s.service, driver.ErrUnavailable, ev.Err)
	}
	if chosen == caseService {
		s.serviceW = nil
		return s.readChildren(ctx)
	}
	id := ids[chosen-caseData]
	delete(s.dataW, id)
	if ev.Type == zk.EventNodeDeleted {
		delete(s.insts, id)
		return nil
	}
	return s.readInstance(ctx, id)
}
