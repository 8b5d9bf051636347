package consul

import (
	"context"
	"hash/fnv"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

// hub follows the whole catalog for the driver's watches, so that
// watching many services costs two blocking queries, not one per service:
//
//   - /v1/health/state/any?index=…: every health check. A registration, a
//     deregistration, a check going critical (a crashed instance) and a
//     Roster Update (the check's notes carry a digest of the instance)
//     change the checks of one service; the hub wakes the watches of
//     exactly the services whose checks changed, which then read their
//     service (a targeted, non-blocking read).
//   - /v1/catalog/services?index=…: moves also when a service changes
//     without its checks (metadata written by another tool). A move the
//     checks query has not seen at the same index wakes every watch.
//
// Both run while at least one watch is open.
type hub struct {
	d *Driver

	mu      sync.Mutex
	subs    map[*stream]struct{}
	reads   gate          // the watches' targeted reads: few at a time, few connections
	stop    chan struct{} // nil while stopped
	wg      sync.WaitGroup
	checksN uint64              // LastIndex of the latest checks read
	seen    map[uint64]struct{} // indexes explained by the checks query
	seenQ   []uint64            // seen, oldest first: bounded
	caught  *sync.Cond          // signalled when checksN moves
}

// seenMax bounds the indexes the hub remembers.
const seenMax = 4096

// hubReads is how many watches read their service at once, after a wake:
// with the two blocking queries, a process watching any number of
// services holds at most 10 connections for its watches.
const hubReads = 8

func newHub(d *Driver) *hub {
	h := &hub{d: d, subs: map[*stream]struct{}{}, seen: map[uint64]struct{}{}, reads: make(gate, hubReads)}
	h.caught = sync.NewCond(&h.mu)
	return h
}

// add subscribes st, starting the queries if it is the first.
func (h *hub) add(st *stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.subs[st] = struct{}{}
	if h.stop == nil {
		h.stop = make(chan struct{})
		h.checksN = 0
		h.wg.Add(2)
		go h.checksLoop(h.stop)
		go h.catalogLoop(h.stop)
	}
}

// remove unsubscribes st, stopping the queries after the last. It does
// not wait for them: their context ends at once.
func (h *hub) remove(st *stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, st)
	if len(h.subs) == 0 && h.stop != nil {
		close(h.stop)
		h.stop = nil
		h.caught.Broadcast()
	}
}

// loop runs query (a blocking query from index) until stop, passing each
// result to handle. A failure is reported to every watch and retried after
// a backoff, from index 0.
func (h *hub) loop(stop chan struct{}, query func(ctx context.Context, index uint64) (uint64, error)) {
	defer h.wg.Done()
	ctx, cancel := context.WithCancel(h.d.life)
	defer cancel()
	go func() {
		select {
		case <-stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	b := newBucket(watchBurst, watchEvery)
	var index uint64
	backoff := time.Duration(0)
	for {
		if b.take(ctx) != nil {
			return
		}
		next, err := query(ctx, index)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			h.broadcast(h.d.wrap(ctx, "watch", err))
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			index = 0
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		switch {
		case next < index: // the index went back (agent restarted, snapshot restored)
			index = 0
		case next < 1:
			index = 1 // index 0 would make every query return at once
		default:
			index = next
		}
	}
}

func (h *hub) checksLoop(stop chan struct{}) {
	h.loop(stop, func(ctx context.Context, index uint64) (uint64, error) {
		var checks api.HealthChecks
		var meta *api.QueryMeta
		err := h.d.block(ctx, func(ctx context.Context) (err error) {
			q := &api.QueryOptions{Datacenter: h.d.o.Datacenter, AllowStale: h.d.o.AllowStale, WaitIndex: index, WaitTime: h.d.o.Wait}
			checks, meta, err = h.d.watchClient.Health().State(api.HealthAny, q.WithContext(ctx))
			return err
		})
		if err != nil {
			return 0, err
		}
		h.checksRead(checks, meta.LastIndex)
		return meta.LastIndex, nil
	})
}

func (h *hub) catalogLoop(stop chan struct{}) {
	first := true
	h.loop(stop, func(ctx context.Context, index uint64) (uint64, error) {
		var meta *api.QueryMeta
		err := h.d.block(ctx, func(ctx context.Context) (err error) {
			q := &api.QueryOptions{Datacenter: h.d.o.Datacenter, AllowStale: h.d.o.AllowStale, WaitIndex: index, WaitTime: h.d.o.Wait}
			_, meta, err = h.d.watchClient.Catalog().Services(q.WithContext(ctx))
			return err
		})
		if err != nil {
			return 0, err
		}
		if !first && meta.LastIndex != index && !h.explained(ctx, meta.LastIndex) {
			h.wakeAll()
		}
		first = false
		return meta.LastIndex, nil
	})
}

// checksRead wakes the watches of the services whose checks changed, and
// remembers the indexes the read explains.
func (h *hub) checksRead(checks api.HealthChecks, index uint64) {
	prints := map[string]uint64{}
	for _, c := range checks {
		prints[c.ServiceName] += checkPrint(c)
	}
	node := prints[""] // a node's own checks hide or show all its services
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range checks {
		h.remember(c.ModifyIndex)
	}
	h.remember(index)
	h.checksN = max(h.checksN, index)
	h.caught.Broadcast()
	for st := range h.subs {
		p := prints[st.service]*31 + node
		if !st.printed || st.print != p {
			st.print, st.printed = p, true
			st.poke()
		}
	}
}

func checkPrint(c *api.HealthCheck) uint64 {
	f := fnv.New64a()
	f.Write([]byte(c.Node + "\x00" + c.CheckID + "\x00" + c.Status + "\x00" + strconv.FormatUint(c.ModifyIndex, 10)))
	return f.Sum64()
}

// remember records an index the checks query saw; h.mu is held.
func (h *hub) remember(index uint64) {
	if _, ok := h.seen[index]; ok {
		return
	}
	h.seen[index] = struct{}{}
	h.seenQ = append(h.seenQ, index)
	if len(h.seenQ) > seenMax {
		delete(h.seen, h.seenQ[0])
		h.seenQ = h.seenQ[1:]
	}
}

// explained reports whether the checks query saw index: a catalog change
// that came with a checks change at the same index (a registration, a
// deregistration, a Roster Update) has woken its watches already. It
// waits up to a second for the checks query to catch up.
func (h *hub) explained(ctx context.Context, index uint64) bool {
	timer := time.AfterFunc(time.Second, func() {
		h.mu.Lock()
		h.caught.Broadcast()
		h.mu.Unlock()
	})
	defer timer.Stop()
	start := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.checksN < index && time.Since(start) < time.Second && ctx.Err() == nil && h.stop != nil {
		h.caught.Wait()
	}
	_, ok := h.seen[index]
	return ok
}

func (h *hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for st := range h.subs {
		st.poke()
	}
}

// broadcast reports a failed query to every watch.
func (h *hub) broadcast(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for st := range h.subs {
		st.fail(err)
	}
}

// wait stops the queries' goroutines, for Driver.Close (whose context
// ends them).
func (h *hub) wait() { h.wg.Wait() }
