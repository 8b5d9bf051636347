package etcd

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"time"

	"github.com/roster-go/roster/internal/backend"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/roster-go/roster/registry/driver"
)

// Watch implements driver.Driver. The stream lists on its first Next;
// see the package documentation for how it detects gaps and stalls.
func (d *Driver) Watch(ctx context.Context, service string) (driver.Stream, error) {
	sctx, cancel := context.WithCancel(ctx)
	return &stream{
		d: d, service: service, sp: d.servicePrefix(service), parent: sctx, cancel: cancel,
		needList: true,
	}, nil
}

// stream is one service's list+watch. Next is called by one goroutine at a
// time; Close may come from another.
type stream struct {
	d       *Driver
	service string
	sp      string             // service key prefix
	parent  context.Context    // ends with Close or the Watch context
	cancel  context.CancelFunc // ends parent

	wcancel context.CancelFunc // ends the current etcd watch
	wch     clientv3.WatchChan
	lost    <-chan struct{} // closed when the connection dropped since the list

	needList bool
	rev      int64                      // every change up to rev is in state
	listed   int64                      // revision of the last full read
	state    map[string]driver.Instance // by ID
	dirty    bool                       // changes came in since the last state returned
	lastSign time.Time                  // last watch response or successful probe
	lists    int                        // full reads so far (tests)

	// sorted is the last snapshot's instances, sorted by ID, nil after a
	// list. changed holds the IDs changed since. The next snapshot merges
	// the two instead of sorting the whole state again.
	sorted  []driver.Instance
	changed map[string]struct{}
}

// Close implements driver.Stream. It cancels the watch and returns.
func (s *stream) Close() error {
	s.cancel()
	return nil
}

func (s *stream) closedErr() error {
	return fmt.Errorf("etcd: watch %s: %w", s.service, driver.ErrClosed)
}

// Next implements driver.Stream.
func (s *stream) Next(ctx context.Context) (driver.Snapshot, error) {
	for {
		if s.parent.Err() != nil {
			return driver.Snapshot{}, s.closedErr()
		}
		if s.needList {
			if err := s.relist(ctx); err != nil {
				return driver.Snapshot{}, err
			}
		}
		if s.dirty {
			if s.drain(); s.needList {
				continue
			}
			s.dirty = false
			return s.snapshot(), nil
		}
		if err := s.wait(ctx); err != nil {
			return driver.Snapshot{}, err
		}
	}
}

// wait handles one watch response or one progress-timer tick.
func (s *stream) wait(ctx context.Context) error {
	p := s.d.progress
	timer := time.NewTimer(max(p-time.Since(s.lastSign), 0))
	defer timer.Stop()
	select {
	case <-s.parent.Done():
		return s.closedErr()
	case <-ctx.Done():
		return ctx.Err()
	case <-s.lost:
		// The client would resume the watch by itself, but watchers must
		// learn that the backend was away: report it, and relist.
		s.needList = true
		return fmt.Errorf("etcd: watch %s: %w: connection to the server lost", s.service, driver.ErrUnavailable)
	case resp, ok := <-s.wch:
		s.handle(resp, ok)
		return nil
	case <-timer.C:
		if time.Since(s.lastSign) < p {
			return nil
		}
		// Quiet for a whole interval: is the server there, and is its
		// revision still ahead of ours? A watch on an unreachable server,
		// or resumed on a server whose data went back in time, stays
		// silent; a linearizable read tells both apart from a quiet service.
		rev, err := s.d.probe(s.parent, ctx)
		switch {
		case err != nil:
			if s.parent.Err() != nil {
				return s.closedErr()
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("etcd: watch %s: %w: silent for %v and %v", s.service, driver.ErrUnavailable,
				time.Since(s.lastSign).Round(time.Millisecond), err)
		case rev < s.rev:
			s.needList = true // data wiped or restored from an older snapshot
		default:
			s.lastSign = time.Now()
		}
		return nil
	}
}

// handle takes one watch response.
func (s *stream) handle(resp clientv3.WatchResponse, ok bool) {
	s.lastSign = time.Now()
	switch {
	case !ok || resp.Canceled || resp.Err() != nil:
		// Compacted past our revision, leader lost, or closed by the
		// client library: whatever it was, relist and watch again.
		s.needList = true
	case resp.Header.Revision > 0 && resp.Header.Revision < s.rev:
		// The server's revision went back: data wiped or restored.
		s.needList = true
	case !resp.IsProgressNotify():
		s.apply(resp.Events)
	}
}

// maxDrain bounds the responses one snapshot takes in, so that a service
// that never stops changing still gets snapshots out.
const maxDrain = 10000

// drain takes in the watch responses that are already waiting, before a
// snapshot is built: a snapshot costs O(n log n) in the service's size, so
// one per response would make a watcher of a 10,000-instance service
// registering at a few thousand a second fall ever further behind (it did:
// the watchers of 10,000 instances in one service had not converged 40s
// after the last registration). A burst becomes one snapshot.
//
// The client library hands responses over one at a time from a goroutine
// of its own, which must run between two of them: a receive that finds
// none ready yields a few times before it concludes that none is waiting.
func (s *stream) drain() {
	idle := 0
	for n := 0; n < maxDrain && idle < drainYields && !s.needList && s.wch != nil; {
		select {
		case resp, ok := <-s.wch:
			s.handle(resp, ok)
			n, idle = n+1, 0
		default:
			idle++
			runtime.Gosched()
		}
	}
}

// drainYields is how many times drain yields without finding a response
// before it stops.
const drainYields = 3

// apply takes in the events of one watch response, in order. One
// revision can change many keys (a transaction, or a lease that expires
// with all its keys), and its events share that revision: only the
// revision of the last full read tells an event already in the state
// apart, never an earlier event of the same revision.
func (s *stream) apply(evs []*clientv3.Event) {
	for _, ev := range evs {
		if ev.Kv.ModRevision <= s.listed {
			continue // already in the listed state
		}
		s.rev = max(s.rev, ev.Kv.ModRevision)
		id, ok := idOf(s.sp, ev.Kv.Key)
		if !ok {
			continue
		}
		// Registry drops a state repeated: every event counts as a change.
		s.dirty = true
		if s.sorted != nil {
			if s.changed == nil {
				s.changed = map[string]struct{}{}
			}
			s.changed[id] = struct{}{}
		}
		in, ok := backend.DecodeStored(s.service, id, ev.Kv.Value)
		if ev.Type == clientv3.EventTypeDelete || !ok {
			delete(s.state, id)
			continue
		}
		s.state[id] = in
	}
}

// relist reads the service in full, then watches from the next revision.
func (s *stream) relist(ctx context.Context) error {
	s.stopWatch()
	s.lost = s.d.lostC() // before the read: a drop during it is not missed
	timeout := s.d.reqT
	if s.lists > 0 {
		// A relist after a discontinuity (leader lost, say) must not keep
		// watchers from learning about an outage for a whole request
		// timeout: it gets the stall-detection budget.
		timeout = min(timeout, 2*s.d.progress)
	}
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stop := context.AfterFunc(s.parent, cancel) // Close ends the read too
	defer stop()
	resp, err := s.d.cli.Get(lctx, s.sp, clientv3.WithPrefix())
	if err != nil {
		if s.parent.Err() != nil {
			return s.closedErr()
		}
		if ctx.Err() == nil && lctx.Err() != nil {
			return fmt.Errorf("etcd: watch %s: list: %w: no answer within %v", s.service, driver.ErrUnavailable, timeout)
		}
		return s.d.wrap(ctx, "watch "+s.service+": list", err)
	}
	state := make(map[string]driver.Instance, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if id, ok := idOf(s.sp, kv.Key); ok {
			if in, ok := backend.DecodeStored(s.service, id, kv.Value); ok {
				state[id] = in
			}
		}
	}
	s.dirty = true // the same state again, maybe: Registry drops it
	s.state, s.rev, s.listed = state, resp.Header.Revision, resp.Header.Revision
	s.sorted = nil
	clear(s.changed)
	s.lists++
	return s.watchFrom(s.rev + 1)
}

// watchFrom starts the etcd watch; changes up to rev-1 are in s.state.
func (s *stream) watchFrom(rev int64) error {
	if s.parent.Err() != nil {
		return s.closedErr()
	}
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(s.parent))
	s.wcancel = wcancel
	s.wch = s.d.cli.Watch(wctx, s.sp, clientv3.WithPrefix(), clientv3.WithRev(rev),
		clientv3.WithProgressNotify())
	s.needList = false
	s.lastSign = time.Now()
	return nil
}

func (s *stream) stopWatch() {
	if s.wcancel != nil {
		s.wcancel()
		s.wcancel = nil
	}
}

// snapshot builds the state's snapshot. The instances are shared with
// the state, not copied: apply replaces an instance, never modifies one,
// and readers must not modify a published snapshot (driver.Snapshot).
// Copying them cost two allocations per instance on every change, 8.5ms
// per snapshot of a 10,000-instance service.
//
// Registry sorts the instances, but finds these sorted. After a list the
// IDs are sorted in full. After that, the last snapshot is merged with
// the IDs changed since, in one pass: sorting 1,000 IDs for one change
// was most of the driver's share of a deregistration's path to watchers.
func (s *stream) snapshot() driver.Snapshot {
	var out []driver.Instance
	if s.sorted == nil {
		ids := slices.Sorted(maps.Keys(s.state))
		out = make([]driver.Instance, len(ids))
		for i, id := range ids {
			out[i] = s.state[id]
		}
	} else {
		out = s.merge()
	}
	s.sorted = out
	clear(s.changed)
	return driver.Snapshot{Service: s.service, Instances: out, Revision: uint64(s.rev), At: time.Now()}
}

// merge returns s.sorted with the changed IDs taken from the state: kept
// or replaced if there, dropped if not, in ID order.
func (s *stream) merge() []driver.Instance {
	changed := slices.Sorted(maps.Keys(s.changed))
	out := make([]driver.Instance, 0, len(s.state))
	take := func(id string) {
		if in, ok := s.state[id]; ok {
			out = append(out, in)
		}
	}
	j := 0
	for _, in := range s.sorted {
		for j < len(changed) && changed[j] < in.ID {
			take(changed[j])
			j++
		}
		if j < len(changed) && changed[j] == in.ID {
			take(in.ID)
			j++
			continue
		}
		out = append(out, in)
	}
	for _, id := range changed[j:] {
		take(id)
	}
	return out
}

// probe reads one key linearizably and returns the cluster's revision.
// Streams of one driver share the answer for half a progress interval, so
// many quiet watches cost one read. It fails when no answer comes within
// two progress intervals (a relist's budget: a registry answering every
// request one interval late is slow, not stalled), or when either context
// ends.
func (d *Driver) probe(a, b context.Context) (int64, error) {
	select {
	case d.probeSem <- struct{}{}:
	case <-a.Done():
		return 0, a.Err()
	case <-b.Done():
		return 0, b.Err()
	}
	defer func() { <-d.probeSem }()
	if time.Since(d.probeAt) < d.progress/2 {
		return d.probeRev, nil
	}
	ctx, cancel := context.WithTimeout(a, 2*d.progress)
	defer cancel()
	stop := context.AfterFunc(b, cancel)
	defer stop()
	resp, err := d.cli.Get(ctx, d.prefix+"/", clientv3.WithCountOnly(), clientv3.WithLimit(1))
	if err != nil {
		if ctx.Err() != nil && a.Err() == nil && b.Err() == nil {
			return 0, fmt.Errorf("no answer to a read within %v", 2*d.progress)
		}
		return 0, err
	}
	d.probeAt, d.probeRev = time.Now(), resp.Header.Revision
	return d.probeRev, nil
}
