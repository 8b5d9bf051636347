package redis

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// keysHub is what a driver's keys-layout watches share: one subscription
// to keyspace events, whose events wake only the watches of the service
// they name, and one scan of the layout's keys per poll interval. Each
// watch used to hold its own subscription, and to scan the whole database
// every interval: 1,000 watched services held 1,000 connections and made
// 2,000 commands a second with nothing changing.
type keysHub struct {
	ks *keysLayout

	mu      sync.Mutex
	streams map[string]map[*keysStream]struct{} // by service
	run     *hubRun                             // nil while no watch is open
}

// hubRun is the hub's goroutines while watches are open.
type hubRun struct {
	ps   *goredis.PubSub // nil without notifications
	scan chan struct{}   // 1-buffered: scan now
	stop chan struct{}
	wg   sync.WaitGroup
}

// join adds st to the hub, starting the hub's goroutines for the first
// watch.
func (h *keysHub) join(ctx context.Context, st *keysStream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.streams == nil {
		h.streams = map[string]map[*keysStream]struct{}{}
	}
	if h.streams[st.svc] == nil {
		h.streams[st.svc] = map[*keysStream]struct{}{}
	}
	h.streams[st.svc][st] = struct{}{}
	if h.run != nil {
		return
	}
	run := &hubRun{scan: make(chan struct{}, 1), stop: make(chan struct{})}
	if h.ks.notifyEnabled(ctx) {
		db := strconv.Itoa(h.ks.copts.DB)
		// Not "expire": heartbeats (EXPIRE) change nothing a watcher sees,
		// and would make every watcher read on every heartbeat.
		run.ps = h.ks.c.Subscribe(context.WithoutCancel(ctx),
			"__keyevent@"+db+"__:set", "__keyevent@"+db+"__:del", "__keyevent@"+db+"__:expired")
		run.wg.Go(func() { h.listen(run) })
	}
	run.wg.Go(func() { h.poll(run) })
	h.run = run
}

// leave takes st out of the hub, stopping the hub's goroutines after the
// last watch.
func (h *keysHub) leave(st *keysStream) {
	h.mu.Lock()
	if set := h.streams[st.svc]; set != nil {
		delete(set, st)
		if len(set) == 0 {
			delete(h.streams, st.svc)
		}
	}
	var run *hubRun
	if len(h.streams) == 0 {
		run, h.run = h.run, nil
	}
	h.mu.Unlock()
	run.halt()
}

// close stops the hub's goroutines, for Driver.Close.
func (h *keysHub) close() {
	h.mu.Lock()
	run := h.run
	h.run = nil
	h.mu.Unlock()
	run.halt()
}

func (run *hubRun) halt() {
	if run == nil {
		return
	}
	close(run.stop)
	if run.ps != nil {
		_ = run.ps.Close()
	}
	run.wg.Wait()
}

// listen hands each event's key to the watches of its service. A
// (re)subscription makes the hub scan at once: events may have been lost
// before it.
func (h *keysHub) listen(run *hubRun) {
	prefix := h.ks.o.Prefix + ":"
	for msg := range run.ps.ChannelWithSubscriptions() {
		switch m := msg.(type) {
		case *goredis.Message:
			rest, ok := strings.CutPrefix(m.Payload, prefix)
			svc, _, ok2 := strings.Cut(rest, ":")
			if !ok || !ok2 {
				continue
			}
			h.mu.Lock()
			for st := range h.streams[svc] {
				st.touched(m.Payload)
			}
			h.mu.Unlock()
		case *goredis.Subscription:
			select {
			case run.scan <- struct{}{}:
			default:
			}
		}
	}
}

// poll scans the layout's keys once per poll interval, or at once when
// asked, and hands each watch the keys of its service.
func (h *keysHub) poll(run *hubRun) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-run.stop
		cancel()
	}()
	t := time.NewTicker(h.ks.o.Poll)
	defer t.Stop()
	for {
		select {
		case <-run.stop:
			return
		case <-t.C:
		case <-run.scan:
		}
		h.scanAll(ctx)
	}
}

// scanAll runs one scan for every watched service.
func (h *keysHub) scanAll(ctx context.Context) {
	keys, err := h.ks.scan(ctx, globEscape(h.ks.o.Prefix+":")+"*")
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		err = h.ks.wrap("watch", err)
	}
	byService := map[string][]string{}
	prefix := h.ks.o.Prefix + ":"
	for _, k := range keys {
		if svc, _, ok := strings.Cut(strings.TrimPrefix(k, prefix), ":"); ok {
			byService[svc] = append(byService[svc], k)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for svc, set := range h.streams {
		for st := range set {
			st.scanned(byService[svc], err)
		}
	}
}
