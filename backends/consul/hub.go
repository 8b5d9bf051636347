package consul

import (
	"context"
	"hash/fnv"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

// hub follows the whole catalog for the driver's watches, so that
// watching many services costs a few queries, not one per service, and a
// change wakes only the watches of the services it touches:
//
//   - /v1/health/state/any?index=…, filtered to match nothing: a cheap
//     signal that some check changed. The hub then reads the checks of
//     the watched services and of their nodes only (a server-side
//     filter), never every check of the datacenter. A registration, a
//     deregistration, a check going critical (a crashed instance) and a
//     Roster Update (the check's notes carry a digest of the instance)
//     change the checks of one service; the hub wakes the watches of
//     exactly the services whose checks changed, which then read their
//     service (a targeted, non-blocking read).
//   - /v1/catalog/services?index=…: moves also when a service changes
//     without its checks (another tool's check-less registration). The
//     hub compares the names and tags with the last answer: the services
//     that appeared, went or changed tags explain the move, and only
//     their watches wake. A move nothing explains (an instance added to
//     or removed from a service without checks or tags changing) wakes
//     the watches of the services the catalog holds, not of empty ones.
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
	nodes   []string            // the nodes of the watched services' checks, sorted
	names   map[string]uint64   // the catalog's services: a print of their tags
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
		h.names, h.nodes = nil, nil
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

// loop runs query (a blocking query from index) until stop, after a
// burst at most once per every. A failure is reported to every watch
// and retried after a backoff, from index 0.
func (h *hub) loop(stop chan struct{}, every time.Duration, query func(ctx context.Context, index uint64) (uint64, error)) {
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
	b := newBucket(watchBurst, every)
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

// noChecks is a filter no check matches: the signal query's answer is
// empty, and its index is the checks table's.
const noChecks = `CheckID == ""`

func (h *hub) checksLoop(stop chan struct{}) {
	h.loop(stop, watchEvery, func(ctx context.Context, index uint64) (uint64, error) {
		if index > 0 {
			var meta *api.QueryMeta
			err := h.d.block(ctx, func(ctx context.Context) (err error) {
				q := &api.QueryOptions{Datacenter: h.d.o.Datacenter, AllowStale: h.d.o.AllowStale,
					WaitIndex: index, WaitTime: h.d.o.Wait, Filter: noChecks}
				_, meta, err = h.d.watchClient.Health().State(api.HealthAny, q.WithContext(ctx))
				return err
			})
			if err != nil {
				return 0, err
			}
			if meta.LastIndex == index {
				return index, nil // the wait ended with no change
			}
		}
		return h.readChecks(ctx)
	})
}

// readChecks reads the checks of the watched services and of their
// nodes, and wakes the watches whose checks changed. A read that finds
// nodes it did not ask for reads again at once, for their node checks.
func (h *hub) readChecks(ctx context.Context) (uint64, error) {
	var index uint64
	for pass := range 2 {
		filter, nodes := h.checksFilter()
		var checks api.HealthChecks
		var meta *api.QueryMeta
		err := h.d.hubRead(ctx, func(ctx context.Context) (err error) {
			q := &api.QueryOptions{Datacenter: h.d.o.Datacenter, AllowStale: h.d.o.AllowStale, Filter: filter}
			checks, meta, err = h.d.watchClient.Health().State(api.HealthAny, q.WithContext(ctx))
			return err
		})
		if err != nil {
			return 0, err
		}
		index = meta.LastIndex
		again := h.checksRead(checks, index, nodes, pass == 0 && filter != "")
		if !again || filter == "" {
			break
		}
	}
	return index, nil
}

// checksFilter returns the filter of the watched services' checks and
// of their nodes' own checks, and the nodes it names.
func (h *hub) checksFilter() (string, []string) {
	h.mu.Lock()
	names := make([]string, 0, len(h.subs))
	for st := range h.subs {
		names = append(names, st.service)
	}
	nodes := h.nodes
	h.mu.Unlock()
	if len(names) == 0 {
		return noChecks, nil
	}
	slices.Sort(names)
	f := "ServiceName matches " + strconv.Quote(anyOf(slices.Compact(names)))
	if len(nodes) > 0 {
		f += ` or (ServiceID == "" and Node matches ` + strconv.Quote(anyOf(nodes)) + ")"
	}
	if len(f) > maxFilter {
		return "", nil // every check: the request line must fit the agent's 1 MB header limit
	}
	return f, nodes
}

// maxFilter bounds the checks filter, about 15,000 watched services.
const maxFilter = 256 << 10

// anyOf is a regular expression that matches exactly the names.
func anyOf(names []string) string {
	var b strings.Builder
	b.WriteString("^(?:")
	for i, n := range names {
		if i > 0 {
			b.WriteByte('|')
		}
		b.WriteString(regexp.QuoteMeta(n))
	}
	b.WriteString(")$")
	return b.String()
}

// checksRead wakes the watches of the services whose checks changed, or
// whose nodes' own checks changed, and remembers the indexes the read
// explains. It reports whether the checks name nodes the read did not
// ask for: on a first pass it then leaves the watches for the next.
func (h *hub) checksRead(checks api.HealthChecks, index uint64, asked []string, first bool) (again bool) {
	prints := map[string]uint64{}
	nodePrints := map[string]uint64{}
	nodesOf := map[string][]string{}
	var nodes []string
	for _, c := range checks {
		if c.ServiceID == "" { // a node's own check hides or shows all its services
			nodePrints[c.Node] += checkPrint(c)
			continue
		}
		prints[c.ServiceName] += checkPrint(c)
		nodesOf[c.ServiceName] = append(nodesOf[c.ServiceName], c.Node)
		nodes = append(nodes, c.Node)
	}
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	again = slices.ContainsFunc(nodes, func(n string) bool { _, ok := slices.BinarySearch(asked, n); return !ok })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nodes = nodes
	if again && first {
		return true
	}
	for svc, ns := range nodesOf {
		slices.Sort(ns)
		for _, n := range slices.Compact(ns) {
			prints[svc] += nodePrints[n] * 31
		}
	}
	for _, c := range checks {
		h.remember(c.ModifyIndex)
	}
	h.remember(index)
	h.checksN = max(h.checksN, index)
	h.caught.Broadcast()
	for st := range h.subs {
		p := prints[st.service]
		if !st.printed || st.print != p {
			st.print, st.printed = p, true
			st.poke()
		}
	}
	return again
}

func checkPrint(c *api.HealthCheck) uint64 {
	f := fnv.New64a()
	f.Write([]byte(c.Node + "\x00" + c.CheckID + "\x00" + c.Status + "\x00" + strconv.FormatUint(c.ModifyIndex, 10)))
	return f.Sum64()
}

// catalogEvery paces the catalog query, which downloads every service
// name: under churn its windows grow, and one answer explains a window.
// A change with checks is not delayed by it.
const catalogEvery = 250 * time.Millisecond

func (h *hub) catalogLoop(stop chan struct{}) {
	h.loop(stop, catalogEvery, func(ctx context.Context, index uint64) (uint64, error) {
		var names map[string][]string
		var meta *api.QueryMeta
		err := h.d.block(ctx, func(ctx context.Context) (err error) {
			q := &api.QueryOptions{Datacenter: h.d.o.Datacenter, AllowStale: h.d.o.AllowStale, WaitIndex: index, WaitTime: h.d.o.Wait}
			names, meta, err = h.d.watchClient.Catalog().Services(q.WithContext(ctx))
			return err
		})
		if err != nil {
			return 0, err
		}
		if meta.LastIndex != index {
			h.catalogRead(ctx, names, index, meta.LastIndex)
		}
		return meta.LastIndex, nil
	})
}

// catalogRead wakes the watches of the services that appeared, went or
// changed tags between the answers at from and index. If none did, and
// no service came and went in between, and the checks query did not see
// index either, something changed inside a service that the catalog
// holds: their watches wake, not those of empty services.
func (h *hub) catalogRead(ctx context.Context, names map[string][]string, from, index uint64) {
	now := make(map[string]uint64, len(names))
	for n, tags := range names {
		now[n] = tagsPrint(tags)
	}
	h.mu.Lock()
	before := h.names
	h.names = now
	h.mu.Unlock()
	if before == nil {
		return // the first answer: each watch read its state itself
	}
	changed := map[string]bool{}
	for n, p := range now {
		if q, ok := before[n]; !ok || p != q {
			changed[n] = true
		}
	}
	for n := range before {
		if _, ok := now[n]; !ok {
			changed[n] = true
		}
	}
	switch {
	case len(changed) > 0:
		h.wake(func(st *stream) bool { return changed[st.service] })
	case h.extinct(ctx, from):
		// A service came and went between two answers. Only a watch that
		// saw it in between holds a state to correct.
		h.wake(func(st *stream) bool { _, ok := now[st.service]; return !ok && st.held })
	case !h.explained(ctx, index):
		h.wake(func(st *stream) bool { _, ok := now[st.service]; return ok })
	}
}

// probeService is a name no one registers (Roster refuses it).
const probeService = "_roster-probe"

// extinct reports whether the last instance of a service went since
// index. Consul answers a read of a service that does not exist with the
// index of the last such removal, and a removal moves the checks table's
// index too. (Before any removal the first read answers the catalog's
// index: the second tells a registration apart.)
func (h *hub) extinct(ctx context.Context, index uint64) bool {
	var gone, checks *api.QueryMeta
	err := h.d.hubRead(ctx, func(ctx context.Context) (err error) {
		if _, gone, err = h.d.watchClient.Health().Service(probeService, "", false, h.d.query(ctx)); err != nil {
			return err
		}
		q := &api.QueryOptions{Datacenter: h.d.o.Datacenter, AllowStale: h.d.o.AllowStale, Filter: noChecks}
		_, checks, err = h.d.watchClient.Health().State(api.HealthAny, q.WithContext(ctx))
		return err
	})
	return err == nil && gone.LastIndex > index && checks.LastIndex > index
}

func tagsPrint(tags []string) uint64 {
	tags = slices.Clone(tags)
	slices.Sort(tags)
	f := fnv.New64a()
	for _, t := range tags {
		f.Write([]byte(t + "\x00"))
	}
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

// wake wakes the watches that match.
func (h *hub) wake(match func(st *stream) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for st := range h.subs {
		if match(st) {
			st.poke()
		}
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

// hubRead runs one of the hub's non-blocking reads on the pool of
// blocking queries, where its two queries leave room: a queue of
// registrations on the other pool does not delay the watches.
func (d *Driver) hubRead(ctx context.Context, req func(ctx context.Context) error) error {
	_, err := d.run(ctx, []gate{d.watches}, d.o.Timeout, req)
	return err
}

// wait stops the queries' goroutines, for Driver.Close (whose context
// ends them).
func (h *hub) wait() { h.wg.Wait() }
