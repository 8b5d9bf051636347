package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/roster-go/roster/registry"
)

// view follows one service for the instances endpoint: the latest
// snapshot, an index that counts the changes the agent saw (instances or
// the stale flag), and a channel closed on each change for long polls.
type view struct {
	name   string
	w      *registry.Watcher
	cancel context.CancelFunc
	done   chan struct{}
	notify func(service string)

	// Guarded by Agent.mu: when the view was last asked for, the long
	// polls on it, and whether a template follows it (never evicted).
	used   time.Time
	holds  int
	pinned bool

	mu      sync.Mutex
	snap    registry.Snapshot
	index   uint64 // 0 until the first snapshot
	staleAt time.Time
	changed chan struct{}
}

// instanceList is the answer of the instances endpoint.
type instanceList struct {
	Service   string              `json:"service"`
	Index     uint64              `json:"index"`    // the agent's change counter: pass it back as ?index= to wait for the next change
	Revision  uint64              `json:"revision"` // the backend's revision
	Stale     bool                `json:"stale"`    // the registry fails: this is the last good list
	At        time.Time           `json:"at"`       // when the list was read from the backend
	Instances []registry.Instance `json:"instances"`
}

func newView(name string, w *registry.Watcher, notify func(string)) *view {
	ctx, cancel := context.WithCancel(context.Background())
	v := &view{name: name, w: w, cancel: cancel, done: make(chan struct{}), notify: notify, changed: make(chan struct{})}
	go v.follow(ctx)
	return v
}

func (v *view) follow(ctx context.Context) {
	defer close(v.done)
	for {
		snap, err := v.w.Next(ctx)
		if err != nil && !errors.Is(err, registry.ErrUnavailable) {
			return // closed
		}
		v.mu.Lock()
		switch {
		case !snap.Stale:
			v.staleAt = time.Time{}
		case v.staleAt.IsZero():
			v.staleAt = time.Now()
		}
		v.snap = snap
		v.index++
		close(v.changed)
		v.changed = make(chan struct{})
		v.mu.Unlock()
		v.notify(v.name)
	}
}

func (v *view) stop() {
	v.cancel()
	_ = v.w.Close()
	<-v.done
}

// current returns the latest state, and a channel closed when it changes.
func (v *view) current() (instanceList, <-chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := v.snap
	inst := s.Instances
	if inst == nil {
		inst = []registry.Instance{}
	}
	return instanceList{Service: v.name, Index: v.index, Revision: s.Revision, Stale: s.Stale, At: s.At, Instances: inst}, v.changed
}

// wait returns the state once its index differs from index (and is not
// 0: the first snapshot is in), or when ctx ends, whichever comes first.
// A zero index waits for the first snapshot only.
func (v *view) wait(ctx context.Context, index uint64) (instanceList, error) {
	for {
		cur, ch := v.current()
		if cur.Index != 0 && cur.Index != index {
			return cur, nil
		}
		select {
		case <-ch:
		case <-v.done:
			return cur, fmt.Errorf("agent: %w", registry.ErrClosed)
		case <-ctx.Done():
			if cur.Index == 0 {
				return cur, fmt.Errorf("%w: no answer from the registry for %s yet", registry.ErrUnavailable, v.name)
			}
			return cur, nil // a long poll that timed out answers with the unchanged state
		}
	}
}

// staleSince returns since when the service is stale (zero: fresh).
func (v *view) staleSince() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.staleAt
}

// view returns the view of a service, following it on first use.
func (a *Agent) view(name string) (*view, error) { return a.useView(name, false, false) }

// holdView returns the view of a service for a long poll: it is not
// evicted until release is called.
func (a *Agent) holdView(name string) (v *view, release func(), err error) {
	if v, err = a.useView(name, true, false); err != nil {
		return nil, nil, err
	}
	return v, func() {
		a.mu.Lock()
		v.holds--
		v.used = time.Now()
		a.mu.Unlock()
	}, nil
}

// useView returns the view of a service, following it on first use, and
// marks it used now; hold counts a long poll, pin keeps it for good.
func (a *Agent) useView(name string, hold, pin bool) (*view, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, fmt.Errorf("agent: %w", registry.ErrClosed)
	}
	v, ok := a.views[name]
	if !ok {
		if len(a.views) >= a.cfg.MaxServices {
			return nil, fmt.Errorf("%w services: the agent follows %d already (Config.MaxServices)", errTooMany, len(a.views))
		}
		w, err := a.reg.Watch(a.ctx, name)
		if err != nil {
			return nil, err
		}
		v = newView(name, w, a.changed)
		a.views[name] = v
	}
	v.used = time.Now()
	if hold {
		v.holds++
	}
	v.pinned = v.pinned || pin
	return v, nil
}

// evictIdle stops following the services nobody asked about for
// Config.ServiceIdle, until ctx ends. So names asked for once, such as
// junk from a misbehaving program, do not hold MaxServices for good.
func (a *Agent) evictIdle(ctx context.Context) {
	idle := a.cfg.ServiceIdle
	tick := time.NewTicker(max(idle/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			for _, v := range a.takeIdle(now.Add(-idle)) {
				v.stop()
				a.stats.forget(v.name)
				a.history.forget(v.name)
				a.events.notify()
			}
		}
	}
}

// takeIdle removes and returns the views unused since cutoff.
func (a *Agent) takeIdle(cutoff time.Time) []*view {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*view
	for name, v := range a.views {
		if !v.pinned && v.holds == 0 && v.used.Before(cutoff) {
			delete(a.views, name)
			out = append(out, v)
		}
	}
	return out
}

// services returns the followed views, for the dashboard and metrics.
func (a *Agent) followed() []*view {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*view, 0, len(a.views))
	for _, v := range a.views {
		out = append(out, v)
	}
	return out
}
