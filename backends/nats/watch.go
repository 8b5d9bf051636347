package nats

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roster-go/roster/internal/backend"
	"github.com/roster-go/roster/registry/driver"
)

// Watch follows the service's keys with a key watcher: the current
// values first, then each change. The stream fails when the connection
// drops, as the watcher cannot tell what it missed (a server that came
// back empty counts its revisions from 1 again): the registry reopens it,
// and the new stream reads the current values again.
func (d *Driver) Watch(ctx context.Context, service string) (driver.Stream, error) {
	ctx, cancel := d.bounded(ctx)
	defer cancel()
	s, err := d.newStream(ctx, service, true)
	if err != nil {
		return nil, d.fail("watch "+service, err)
	}
	return s, nil
}

type stream struct {
	d       *Driver
	service string
	w       jetstream.KeyWatcher
	stop    context.CancelFunc // ends the watcher
	down    <-chan struct{}
	inst    map[string]driver.Instance // by ID
	rev     uint64
	ready   bool // the current values were all read
}

// newStream starts a key watcher on the service. Its revisions start at
// the bucket's last sequence, so that they never go back.
func (d *Driver) newStream(ctx context.Context, service string, create bool) (*stream, error) {
	d.mu.Lock()
	s := &stream{d: d, service: service, down: d.down, inst: map[string]driver.Instance{}}
	d.mu.Unlock()
	kv, err := d.bucket(ctx, create)
	if err != nil {
		return nil, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, err
	}
	s.rev = st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
	// The watcher lives as long as its context: one of its own, which
	// ends the start when ctx does, and then ends only at Close.
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	unhook := context.AfterFunc(ctx, stop)
	s.w, err = kv.Watch(wctx, service+".*")
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

var (
	errDisconnected = errors.New("the connection dropped: the watch may have missed changes")
	errWatchEnded   = errors.New("the watch ended (bucket deleted?)")
)

// Next applies changes until the current values are read and no more
// is waiting, then returns the state.
func (s *stream) Next(ctx context.Context) (driver.Snapshot, error) {
	for {
		select {
		case e, ok := <-s.w.Updates():
			if !ok {
				return driver.Snapshot{}, s.d.fail("watch "+s.service, errWatchEnded)
			}
			s.apply(e)
		case <-s.down:
			return driver.Snapshot{}, s.d.fail("watch "+s.service, errDisconnected)
		case <-ctx.Done():
			return driver.Snapshot{}, ctx.Err()
		}
		if s.ready && len(s.w.Updates()) == 0 {
			out := make([]driver.Instance, 0, len(s.inst))
			for _, in := range s.inst {
				out = append(out, in)
			}
			return driver.Snapshot{Service: s.service, Instances: out, Revision: s.rev, At: time.Now()}, nil
		}
	}
}

// apply records one entry; nil marks the end of the current values. A
// value that is not an instance is served as none.
func (s *stream) apply(e jetstream.KeyValueEntry) {
	if e == nil {
		s.ready = true
		return
	}
	s.rev = max(s.rev, e.Revision())
	service, id, ok := splitKey(e.Key())
	if !ok || service != s.service {
		return
	}
	in, ok := backend.DecodeStored(service, id, e.Value())
	if ok && e.Operation() == jetstream.KeyValuePut {
		s.inst[id] = in
	} else {
		delete(s.inst, id)
	}
}

// Close stops the watcher.
func (s *stream) Close() error {
	s.stop()
	_ = s.w.Stop()
	return nil
}
