package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/registry/driver"
)

// muxStreams is the most change logs one blocking read follows. XREAD
// takes any number of streams, but the server walks all of them each time
// the read is issued again, so a very long list makes every event cost
// more; 1,000 watched services still take one connection.
const muxStreams = 1024

// logMux multiplexes the change-log reads of a driver's hash watches: each
// shard is one connection blocked in one XREAD over up to muxStreams logs.
// On Cluster a multi-key read must stay within a hash slot, so shards are
// per slot there (services that share a slot share a connection).
//
// A shard is woken to take in a new log by an entry on its own wake
// stream (<prefix>:mux:<token>), which is part of every read; the stream
// expires after linger and is deleted when the shard stops.
type logMux struct {
	h      *hashLayout
	mu     sync.Mutex
	shards []*muxShard
	side   goredis.UniversalClient // relists, sweeps and wakes; nil until the first watch
	closed bool
}

// muxShard is one connection and its read loop.
type muxShard struct {
	m      *logMux
	slot   int // hash slot of its logs on Cluster, else -1
	wake   string
	blk    goredis.UniversalClient // guarded by m.mu: replaced by interrupt
	subs   map[*logSub]struct{}    // guarded by m.mu
	waking atomic.Bool             // a wake entry is on its way
	stop   chan struct{}
	done   chan struct{}
}

// logSub is one watch's place in a shard: the log it follows, the ID of
// the last entry handed over, and the entries read since.
type logSub struct {
	key    string
	revKey string // the service's revision counter
	shard  *muxShard
	notify chan struct{} // 1-buffered

	// What the shard's quiet check compares: the watch's revision, when
	// it last saw an entry or checked, and whether the counter moved.
	rev      atomic.Uint64
	activeAt atomic.Int64 // unix nanoseconds
	stale    atomic.Bool

	mu     sync.Mutex
	cursor string
	gen    uint64 // bumped by reset: reads planned before are dropped
	inbox  []goredis.XMessage
	err    error
}

// subscribe adds a log to a shard, to be read from after cursor.
func (m *logMux) subscribe(ctx context.Context, svc, key, revKey, cursor string) (*logSub, error) {
	sub := &logSub{key: key, revKey: revKey, cursor: cursor, notify: make(chan struct{}, 1)}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, fmt.Errorf("redis: watch %s: %w", svc, driver.ErrClosed)
	}
	sub.shard = m.shardFor(svc)
	sub.shard.subs[sub] = struct{}{}
	m.mu.Unlock()
	if err := sub.shard.wakeUp(ctx); err != nil {
		sub.unsubscribe()
		return nil, err
	}
	return sub, nil
}

// shardFor returns a shard with room for a log of svc; m.mu is held.
func (m *logMux) shardFor(svc string) *muxShard {
	slot := -1
	if m.h.isCluster() {
		slot = hashSlot(svc)
	}
	for _, s := range m.shards {
		if s.slot == slot && len(s.subs) < muxStreams {
			return s
		}
	}
	s := &muxShard{
		m: m, slot: slot, blk: m.h.watchClient(), subs: map[*logSub]struct{}{},
		// The service's hash tag puts the wake stream in the shard's slot.
		wake: fmt.Sprintf("%s:mux:%016x:{%s}", m.h.o.Prefix, rand.Uint64(), svc),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	m.shards = append(m.shards, s)
	go s.loop()
	return s
}

// client returns the client of the watches' other commands: relists,
// sweeps, sweeper claims and wakes. It holds at most two connections, so
// that a process watching 1,000 services holds four, and does not retry:
// a relist that fails reports the outage at once and the registry retries
// with backoff (the shared client's retries, nested in a Sentinel
// client's own, took over 10s to give up); the sweeper retries once.
func (m *logMux) client() goredis.UniversalClient {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.side == nil {
		cp := *m.h.copts
		cp.PoolSize, cp.MaxActiveConns, cp.MinIdleConns, cp.MaxIdleConns = 2, 2, 0, 2
		cp.MaxRetries = -1
		// A thousand watches opened at once queue their relists here:
		// waiting for a connection is not a failure of the backend.
		cp.PoolTimeout = max(cp.PoolTimeout, 30*time.Second)
		m.side = goredis.NewUniversalClient(&cp)
	}
	return m.side
}

// close stops every shard, for Driver.Close.
func (m *logMux) close() {
	m.mu.Lock()
	m.closed = true
	shards := m.shards
	m.shards = nil
	for _, s := range shards {
		s.halt()
	}
	if m.side != nil {
		_ = m.side.Close()
	}
	m.mu.Unlock()
	for _, s := range shards {
		<-s.done
		s.broadcast(fmt.Errorf("redis: watch: %w", driver.ErrClosed))
	}
}

// unsubscribe takes the log out of its shard, stopping the shard when it
// was the last. It does not block on the network.
func (sub *logSub) unsubscribe() {
	m := sub.shard.m
	m.mu.Lock()
	defer m.mu.Unlock()
	s := sub.shard
	delete(s.subs, sub)
	if len(s.subs) > 0 {
		return
	}
	for i, x := range m.shards {
		if x == s {
			m.shards = append(m.shards[:i], m.shards[i+1:]...)
			s.halt()
			return
		}
	}
}

// halt closes the shard's connection, which interrupts its read; m.mu is
// held.
func (s *muxShard) halt() {
	close(s.stop)
	_ = s.blk.Close()
}

// interrupt replaces the shard's connection: a read blocked on a dead
// link (no RST, no FIN) returns now rather than after its block and read
// timeout. The watches see a broken read and relist.
func (s *muxShard) interrupt() {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	select {
	case <-s.stop:
		return
	default:
	}
	old := s.blk
	s.blk = s.m.h.watchClient()
	_ = old.Close()
}

// wakeUp makes the shard's blocked read return, so that it reads the
// logs added since it was issued. One wake entry serves every log added
// before the loop issues its next read.
func (s *muxShard) wakeUp(ctx context.Context) error {
	if s.waking.Swap(true) {
		return nil
	}
	_, err := s.m.client().Pipelined(ctx, func(p goredis.Pipeliner) error {
		p.XAdd(ctx, &goredis.XAddArgs{Stream: s.wake, MaxLen: 1, Values: []string{"w", "1"}})
		p.PExpire(ctx, s.wake, s.m.h.o.Linger)
		return nil
	})
	if err != nil {
		s.waking.Store(false)
		return s.m.h.wrap("watch", err)
	}
	return nil
}

// readPlan is what one read covers: the cursor and generation of each
// subscriber at the time it was issued.
type readPlan struct {
	blk  goredis.UniversalClient
	args []string // keys, then IDs
	subs map[string][]planned
}

type planned struct {
	sub    *logSub
	cursor string
	gen    uint64
}

// plan builds the next read: each log from the lowest cursor of its
// subscribers (a log has two when a watch is reopened before the old one
// closed), and the wake stream from its last entry.
func (s *muxShard) plan(wakeID string) readPlan {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	s.waking.Store(false)
	p := readPlan{blk: s.blk, subs: make(map[string][]planned, len(s.subs))}
	for sub := range s.subs {
		sub.mu.Lock()
		p.subs[sub.key] = append(p.subs[sub.key], planned{sub, sub.cursor, sub.gen})
		sub.mu.Unlock()
	}
	keys := make([]string, 0, len(p.subs)+1)
	ids := make([]string, 0, len(p.subs)+1)
	for key, ps := range p.subs {
		low := ps[0].cursor
		for _, x := range ps[1:] {
			if idLess(x.cursor, low) {
				low = x.cursor
			}
		}
		keys, ids = append(keys, key), append(ids, low)
	}
	p.args = append(append(keys, s.wake), append(ids, wakeID)...)
	return p
}

// loop reads the shard's logs until it is stopped, handing each entry to
// the subscribers of its log. A failed read is reported to every
// subscriber (each relists, or gives up after a second failure) and
// retried after a backoff.
func (s *muxShard) loop() {
	defer close(s.done)
	defer s.forget()
	wakeID := "0-0"
	backoff := time.Duration(0)
	checked := time.Now()
	for {
		p := s.plan(wakeID)
		res, err := p.blk.XRead(context.Background(), &goredis.XReadArgs{Streams: p.args, Count: 1000, Block: s.m.h.o.Quiet}).Result()
		select {
		case <-s.stop:
			return
		default:
		}
		if err != nil && !errors.Is(err, goredis.Nil) {
			s.broadcast(s.m.h.wrap("watch", err))
			backoff = min(max(2*backoff, 50*time.Millisecond), 2*time.Second)
			select {
			case <-s.stop:
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		for _, xs := range res {
			if xs.Stream == s.wake {
				wakeID = xs.Messages[len(xs.Messages)-1].ID
				continue
			}
			for _, x := range p.subs[xs.Stream] {
				x.sub.deliver(xs.Messages, x.gen)
			}
		}
		if time.Since(checked) >= s.m.h.o.Quiet {
			s.checkRevs()
			checked = time.Now()
		}
	}
}

// checkRevs is the quiet check of the shard's watches that saw no entry
// for quiet: one MGET of their revision counters, where each watch used
// to send a GET (10,000 quiet watches, 1,000 commands a second). The
// watches whose counter moved check again, and relist. A failed read
// changes nothing: the shard's own read reports a broken link. A refused
// one (an ACL written before MGET was needed) makes each watch check on
// its own.
func (s *muxShard) checkRevs() {
	cutoff := time.Now().Add(-s.m.h.o.Quiet).UnixNano()
	s.m.mu.Lock()
	var subs []*logSub
	for sub := range s.subs {
		if sub.activeAt.Load() <= cutoff {
			subs = append(subs, sub)
		}
	}
	s.m.mu.Unlock()
	if len(subs) == 0 {
		return
	}
	keys := make([]string, len(subs))
	for i, sub := range subs {
		keys[i] = sub.revKey
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.m.h.o.Quiet)
	defer cancel()
	vals, err := s.m.client().MGet(ctx, keys...).Result()
	all := err != nil && refused(err)
	if !all && (err != nil || len(vals) != len(subs)) {
		return
	}
	for i, sub := range subs {
		if all || moved(vals[i], sub.rev.Load()) {
			sub.stale.Store(true)
			sub.poke()
		}
	}
}

// moved reports whether a revision counter read by MGET is not rev. A
// missing counter is a forgotten, empty service: revision 0.
func moved(v any, rev uint64) bool {
	s, ok := v.(string)
	if !ok {
		return rev != 0
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return err != nil || n != rev
}

// seen records the watch's revision, for the quiet check.
func (sub *logSub) seen(rev uint64) {
	sub.rev.Store(rev)
	sub.activeAt.Store(time.Now().UnixNano())
}

// forget deletes the wake stream of a stopped shard, best effort: it
// expires after linger anyway.
func (s *muxShard) forget() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.m.client().Del(ctx, s.wake).Err()
}

func (s *muxShard) broadcast(err error) {
	s.m.mu.Lock()
	subs := make([]*logSub, 0, len(s.subs))
	for sub := range s.subs {
		subs = append(subs, sub)
	}
	s.m.mu.Unlock()
	for _, sub := range subs {
		sub.fail(err)
	}
}

// deliver queues the entries after the subscriber's cursor, unless it was
// reset since the read was planned.
func (sub *logSub) deliver(msgs []goredis.XMessage, gen uint64) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.gen != gen {
		return
	}
	for _, m := range msgs {
		if idLess(sub.cursor, m.ID) {
			sub.inbox = append(sub.inbox, m)
			sub.cursor = m.ID
		}
	}
	sub.poke()
}

func (sub *logSub) fail(err error) {
	sub.mu.Lock()
	if sub.err == nil {
		sub.err = err
	}
	sub.mu.Unlock()
	sub.poke()
}

// poke wakes the watch waiting on the subscriber.
func (sub *logSub) poke() {
	select {
	case sub.notify <- struct{}{}:
	default:
	}
}

// reset moves the subscriber to cursor after a relist, dropping what was
// read before. A cursor that moved back (the log was recreated) is read
// from at once.
func (sub *logSub) reset(ctx context.Context, cursor string) error {
	sub.mu.Lock()
	back := idLess(cursor, sub.cursor)
	sub.cursor, sub.inbox, sub.err = cursor, nil, nil
	sub.gen++
	sub.mu.Unlock()
	if back {
		return sub.shard.wakeUp(ctx)
	}
	return nil
}

// requeue puts back what take returned, ahead of what came since.
func (sub *logSub) requeue(msgs []goredis.XMessage, err error) {
	sub.mu.Lock()
	sub.inbox = append(msgs, sub.inbox...)
	if sub.err == nil {
		sub.err = err
	}
	sub.mu.Unlock()
	sub.poke()
}

// take returns the entries queued and the read error, if any, and clears
// them.
func (sub *logSub) take() ([]goredis.XMessage, error) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	msgs, err := sub.inbox, sub.err
	sub.inbox, sub.err = nil, nil
	return msgs, err
}

// wait blocks until entries or a read error are queued, the subscriber is
// poked, ctx is done or stop is closed.
func (sub *logSub) wait(ctx context.Context, stop <-chan struct{}) ([]goredis.XMessage, error) {
	if msgs, err := sub.take(); len(msgs) > 0 || err != nil {
		return msgs, err
	}
	select {
	case <-sub.notify:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-stop:
	}
	return sub.take()
}

// idLess compares stream entry IDs (ms-seq).
func idLess(a, b string) bool {
	am, as := splitID(a)
	bm, bs := splitID(b)
	return am < bm || am == bm && as < bs
}

func splitID(id string) (ms, seq uint64) {
	m, s, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseUint(m, 10, 64)
	seq, _ = strconv.ParseUint(s, 10, 64)
	return ms, seq
}

// hashSlot is the Redis Cluster slot of keys with hash tag tag: CRC16
// (XMODEM) mod 16384.
func hashSlot(tag string) int {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
