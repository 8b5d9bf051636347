package redis

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Sweeping costs per round, not per service: a driver's sweeper runs one
// claim script and one sweep script per chunk of services (all of one hash
// slot, so that the scripts stay Cluster-safe), every chunk of a round in
// one pipeline. A full round, once per sweep interval, renews the sweeper
// leases of every service the process holds and claims those whose holder
// let its lease run out; between rounds, only the services whose earliest
// deadline falls due, or whose log showed a new member, are swept.
//
// A service found empty goes idle: no round sweeps or claims it, and its
// lease runs out. It costs nothing until its log shows a put, or a relist
// finds members. The 10,000 empty services of one process cost 40,000
// commands a second otherwise.

// sweepChunk is the most services one claim or sweep script covers.
const sweepChunk = 128

// sweepBudget is the most members one sweep script removes, across its
// services: a script blocks the server while it runs. Services left with
// due members are swept again after minSweepGap.
const sweepBudget = 200

// sweepLeaseIntervals is the sweeper lease in sweep intervals: the holder
// renews it every round, so it survives two missed ones.
const sweepLeaseIntervals = 3

// minSweepGap is the least time between two sweeper rounds: puts that
// arrive together are swept together, and a deadline that is due while
// its record lives a few microseconds more does not make a tight loop.
const minSweepGap = 5 * time.Millisecond

// sweeperClaimScript takes the sweeper lease (ARGV[1], the process's token, for
// ARGV[2] ms) of every service whose lease is free or already its own.
// Reply per key: -1 when taken, else the ms the holder's lease runs unless
// renewed. A lease without expiry (only a hand-made key has none) gets
// one, so that a stray key cannot stop sweeps for good.
//
// KEYS: sweeper keys, one per service. ARGV: token, lease ms.
var sweeperClaimScript = luaScript(`
local out = {}
for i, k in ipairs(KEYS) do
  local holder = redis.call('GET', k)
  if not holder or holder == ARGV[1] then
    redis.call('SET', k, ARGV[1], 'PX', ARGV[2])
    out[i] = -1
  else
    local left = redis.call('PTTL', k)
    if left == -1 then
      redis.call('PEXPIRE', k, ARGV[2])
      left = tonumber(ARGV[2])
    end
    out[i] = left
  end
end
return out
`)

// sweepScript is run by the holder of the services' sweeper leases; for
// each service it renews the lease, removes members whose deadline passed
// and whose record is gone (PTTL also makes Redis expire it now), logging
// each removal. A member whose record still lives (its deadline was not
// moved, say by a restored snapshot) gets the record's real deadline back.
// Reply per service: the number removed and the ms until its next deadline
// (-1: none; 0: more are due), or -1 and the ms left of the new holder's
// lease when another process holds it: this one lost it (paused for longer
// than the lease) and steps down.
//
// KEYS: idx, rev, log, sweeper of each service. ARGV: token, lease ms,
// log cap, linger ms, removal budget, then each service's instance key
// prefix.
var sweepScript = luaScript(luaNow + luaKeep + `
local token, lease, cap, linger = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local budget = tonumber(ARGV[5])
local out = {}
for i = 1, #KEYS / 4 do
  local idx, rev, log, sw = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
  local holder = redis.call('GET', sw)
  if holder and holder ~= token then
    out[2 * i - 1], out[2 * i] = -1, redis.call('PTTL', sw)
  else
    redis.call('SET', sw, token, 'PX', lease)
    local n = 0
    if budget > 0 then
      local due = redis.call('ZRANGEBYSCORE', idx, '-inf', now, 'LIMIT', 0, budget)
      budget = budget - #due
      for _, id in ipairs(due) do
        local pttl = redis.call('PTTL', ARGV[5 + i] .. id)
        if pttl == -2 then
          redis.call('ZREM', idx, id)
          local r = redis.call('INCR', rev)
          redis.call('XADD', log, 'MAXLEN', '~', cap, '*', 'rev', r, 'op', 'del', 'id', id)
          n = n + 1
        elseif pttl >= 0 then
          redis.call('ZADD', idx, now + pttl, id)
        else
          redis.call('ZADD', idx, now + 3600000, id)
        end
      end
      if #due > 0 then settle(idx, rev, log, linger) end
    end
    local first = redis.call('ZRANGE', idx, 0, 0, 'WITHSCORES')
    local wait = -1
    if first[2] then wait = math.max(0, tonumber(first[2]) - now) end
    out[2 * i - 1], out[2 * i] = n, wait
  end
end
return out
`)

// sweeper sweeps the services a driver's watches follow. One watch per
// service sweeps at a time across all processes: the process whose token
// holds the service's sweeper lease. A holder sweeps a service when its
// earliest deadline falls due, when a put arrives (the new member may be
// the earliest), and every round; the other processes try to take the
// lease in the first round after the holder's would run out, so N
// processes watching a service cost one sweep per interval, plus one claim
// per lease for each of the others, and a dead holder is replaced within a
// lease and a round. The sweeper keeps its own clock: a Redis blocking
// read's timeout is only as precise as the server's hz (100ms at the
// default 10), too coarse to time expiry announcements.
type sweeper struct {
	h      *hashLayout
	token  string
	wake   chan struct{} // 1-buffered: an entry became due
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	svcs    map[string]*sweepEntry
	running bool // the loop runs; it ends when svcs is empty
	closed  bool
}

// sweepEntry is one watched service; its fields are guarded by sweeper.mu.
type sweepEntry struct {
	svc     string
	keys    hashKeys
	streams map[*hashStream]struct{} // the watches to fail if sweeping does
	holding bool
	fresh   bool      // claim at once, not in the next round
	idle    bool      // found empty: no round sweeps or claims it
	kicked  bool      // a put arrived since the entry's turn was picked
	at      time.Time // next turn; zero: the next round (holders)
}

func newSweeper(h *hashLayout) *sweeper {
	ctx, cancel := context.WithCancel(context.Background())
	return &sweeper{h: h, token: fmt.Sprintf("%016x", rand.Uint64()), wake: make(chan struct{}, 1),
		ctx: ctx, cancel: cancel, svcs: map[string]*sweepEntry{}}
}

func (h *hashLayout) sweepLease() time.Duration { return sweepLeaseIntervals * h.o.Sweep }

// add makes the sweeper cover st's service.
func (s *sweeper) add(st *hashStream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	e := s.svcs[st.svc]
	if e == nil {
		e = &sweepEntry{svc: st.svc, keys: st.keys, streams: map[*hashStream]struct{}{}, fresh: true, at: time.Now()}
		s.svcs[st.svc] = e
	}
	e.streams[st] = struct{}{}
	if !s.running {
		s.running = true
		s.wg.Add(1)
		go s.loop()
	}
	s.signal()
}

// remove ends st's share of its service; the last watch of a service
// leaves its lease to expire, for another process to take.
func (s *sweeper) remove(st *hashStream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.svcs[st.svc]; e != nil {
		delete(e.streams, st)
		if len(e.streams) == 0 {
			delete(s.svcs, st.svc)
		}
	}
}

// kick sweeps svc soon if this process holds it, or wakes it if it is
// idle: a put arrived, or a relist found members.
func (s *sweeper) kick(svc string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.svcs[svc]
	if e == nil || !e.holding && !e.idle {
		return
	}
	e.kicked = true
	if e.idle {
		// The lease may have run out: claim at once, as a new entry does.
		e.idle, e.fresh = false, !e.holding
	}
	e.at = time.Now()
	s.signal()
}

func (s *sweeper) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// close stops the loop, for Driver.Close.
func (s *sweeper) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

func (s *sweeper) loop() {
	defer s.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	var round time.Time // the next full round
	for {
		claims, sweeps, next, ok := s.due(&round)
		if !ok {
			return
		}
		wake := s.wake
		if len(claims)+len(sweeps) > 0 {
			s.turn(claims, sweeps)
			next, wake = time.Now().Add(minSweepGap), nil // what is due meanwhile waits for the gap
		}
		t.Reset(time.Until(next))
		select {
		case <-s.ctx.Done():
			return
		case <-wake:
		case <-t.C:
		}
	}
}

// due returns the entries to claim and to sweep now, and when to look
// again; ok is false when the loop is to end.
func (s *sweeper) due(round *time.Time) (claims, sweeps []*sweepEntry, next time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(s.svcs) == 0 {
		s.running = false
		return nil, nil, time.Time{}, false
	}
	now := time.Now()
	full := !now.Before(*round)
	if full {
		*round = now.Add(s.h.o.Sweep)
	}
	next = *round
	for _, e := range s.svcs {
		if e.idle {
			continue
		}
		due := !e.at.IsZero() && !e.at.After(now)
		switch {
		case e.holding && (full || due):
			e.kicked = false
			sweeps = append(sweeps, e)
		case !e.holding && due && (full || e.fresh):
			e.kicked = false
			claims = append(claims, e)
		case e.holding && !e.at.IsZero() && e.at.Before(next), e.fresh && e.at.Before(next):
			next = e.at
		}
	}
	return claims, sweeps, next, true
}

// turn claims and sweeps the entries due, and schedules each one's next
// turn from the replies. An entry whose scripts failed twice in a row
// fails its watches: the backend is unreachable.
func (s *sweeper) turn(claims, sweeps []*sweepEntry) {
	failed := map[*sweepEntry]error{}
	lease := s.h.sweepLease().Milliseconds()
	s.run(sweeperClaimScript, claims, 1, func(keys []string, argv []any, e *sweepEntry) ([]string, []any) {
		if argv == nil {
			argv = []any{s.token, lease}
		}
		return append(keys, e.keys.sweeper), argv
	}, func(e *sweepEntry, res []int64) {
		e.fresh = false
		if res[0] == -1 {
			e.holding = true
			sweeps = append(sweeps, e)
			return
		}
		e.at = time.Now().Add(s.untilFree(res[0]))
	}, failed)
	s.run(sweepScript, sweeps, 2, func(keys []string, argv []any, e *sweepEntry) ([]string, []any) {
		if argv == nil {
			argv = []any{s.token, lease, s.h.o.MaxLen, s.h.o.Linger.Milliseconds(), sweepBudget}
		}
		k := e.keys
		return append(keys, k.idx, k.rev, k.log, k.sweeper), append(argv, k.inst)
	}, func(e *sweepEntry, res []int64) { s.schedule(e, res[0], res[1]) }, failed)
	s.fail(failed)
}

// schedule sets a swept entry's next turn from the sweep's reply.
func (s *sweeper) schedule(e *sweepEntry, removed, wait int64) {
	w := time.Duration(wait) * time.Millisecond
	switch {
	case removed < 0: // wait is the new holder's lease
		e.holding = false
		e.at = time.Now().Add(s.untilFree(wait))
	case e.kicked: // a put the sweep may not have seen
		e.at = time.Now()
	case wait < 0: // empty: its lease runs out, and a put wakes it
		e.idle = true
	case w < s.h.o.Sweep:
		e.at = time.Now().Add(max(w+time.Millisecond, minSweepGap))
	default:
		e.at = time.Time{}
	}
}

// untilFree is when to claim a lease again, given how long the holder's
// runs unless renewed: just after that, in this process's next round.
func (s *sweeper) untilFree(leftMs int64) time.Duration {
	return max(time.Duration(leftMs)*time.Millisecond, minSweepGap)
}

// run runs script over entries, a chunk of one hash slot per call, all
// calls in one pipeline, and once more for the chunks that failed. arg
// appends an entry's keys and arguments to a call's (argv nil: the first
// entry, which sets the common arguments); each entry's reply of width
// items goes to apply, under s.mu. The chunks that failed twice go to
// failed.
func (s *sweeper) run(script *goredis.Script, entries []*sweepEntry, width int,
	arg func(keys []string, argv []any, e *sweepEntry) ([]string, []any),
	apply func(e *sweepEntry, res []int64), failed map[*sweepEntry]error) {
	chunks := s.chunks(entries)
	for attempt := 0; attempt < 2 && len(chunks) > 0; attempt++ {
		calls := make([]scriptCall, len(chunks))
		for i, c := range chunks {
			for _, e := range c {
				calls[i].keys, calls[i].argv = arg(calls[i].keys, calls[i].argv, e)
			}
		}
		cmds := runPipelined(s.ctx, s.h.mux.client(), script, calls)
		var again [][]*sweepEntry
		s.mu.Lock()
		for i, cmd := range cmds {
			res, err := cmd.Int64Slice()
			if err == nil && len(res) != width*len(chunks[i]) {
				err = fmt.Errorf("reply of %d items for %d services", len(res), len(chunks[i]))
			}
			if err != nil {
				again = append(again, chunks[i])
				for _, e := range chunks[i] {
					failed[e] = s.h.wrap("sweep "+e.svc, err)
				}
				continue
			}
			for j, e := range chunks[i] {
				delete(failed, e)
				apply(e, res[j*width:(j+1)*width])
			}
		}
		s.mu.Unlock()
		chunks = again
	}
}

// chunks splits entries into chunks of at most sweepChunk services that
// share a hash slot (on Cluster; elsewhere any services share a chunk).
func (s *sweeper) chunks(entries []*sweepEntry) [][]*sweepEntry {
	slot := func(e *sweepEntry) int {
		if s.h.isCluster() {
			return hashSlot(e.svc)
		}
		return 0
	}
	slices.SortFunc(entries, func(a, b *sweepEntry) int { return cmp.Compare(slot(a), slot(b)) })
	var out [][]*sweepEntry
	for i, e := range entries {
		if i == 0 || len(out[len(out)-1]) == sweepChunk || slot(e) != slot(entries[i-1]) {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], e)
	}
	return out
}

// fail reports each failed entry's error to its watches, makes the shared
// reads they wait on reconnect (a read blocked on a silent link would only
// notice after its block plus a read timeout) and drops the entries: the
// watches end, and the registry opens them again with backoff.
func (s *sweeper) fail(failed map[*sweepEntry]error) {
	if len(failed) == 0 || s.ctx.Err() != nil {
		return
	}
	shards := map[*muxShard]struct{}{}
	s.mu.Lock()
	for e, err := range failed {
		for st := range e.streams {
			st.sweepErr.CompareAndSwap(nil, &err)
			st.sub.poke()
			shards[st.sub.shard] = struct{}{}
		}
		if s.svcs[e.svc] == e {
			delete(s.svcs, e.svc)
		}
	}
	s.mu.Unlock()
	for sh := range shards {
		sh.interrupt()
	}
}

// scriptCall is one script invocation of a pipeline.
type scriptCall struct {
	keys []string
	argv []any
}

// runPipelined runs script once per call in one pipeline (on Cluster, one
// per node), sending the source to a server that does not know it yet
// (restarted, flushed, or a new Cluster node).
func runPipelined(ctx context.Context, c goredis.UniversalClient, script *goredis.Script, calls []scriptCall) []*goredis.Cmd {
	cmds := make([]*goredis.Cmd, len(calls))
	_, _ = c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, cl := range calls {
			cmds[i] = script.EvalSha(ctx, p, cl.keys, cl.argv...)
		}
		return nil
	})
	var missing []int
	for i, cmd := range cmds {
		if goredis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		_, _ = c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, i := range missing {
				cmds[i] = script.Eval(ctx, p, calls[i].keys, calls[i].argv...)
			}
			return nil
		})
	}
	return cmds
}
