package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/roster-go/roster/internal/backend"

	goredis "github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/registry/driver"
)

// hashKeys are the keys of one service in the hash layout. They share the
// hash tag {svc}: one Cluster slot, so one script can touch them all.
// hashLayout stores each service under one hash tag, updated by atomic
// scripts with a change log (the package doc, "Layout hash").
type hashLayout struct {
	*conn
	mux    *logMux  // the change-log reads of all watches
	sweeps *sweeper // the sweeps of all watched services
	marks  svcMarks // what this driver wrote to the services index
}

// svcMarks remembers, per service, the latest deadline a driver wrote to
// the services index (server milliseconds).
type svcMarks struct {
	mu     sync.Mutex
	m      map[string]int64
	writes int
}

// claim reports whether the index's entry for svc may be more than ttl/2
// behind deadline, so that a heartbeat must refresh it, and if so marks
// the refresh made at once: the heartbeats of a service's registrations
// often run together, and all of them would otherwise see the entry stale
// and write it. If the write fails, release takes the claim back.
func (s *svcMarks) claim(svc string, deadline int64, ttl time.Duration) (prev int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev = s.m[svc]
	if prev >= deadline-ttl.Milliseconds()/2 {
		return prev, false
	}
	if s.m == nil {
		s.m = map[string]int64{}
	}
	s.m[svc] = deadline
	return prev, true
}

// release takes back claim's mark for svc unless another write moved it.
func (s *svcMarks) release(svc string, deadline, prev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[svc] == deadline {
		s.m[svc] = prev
	}
}

// wrote records a write; every 1,024 writes it forgets the services whose
// mark is over svcMarkAge older than this one, so that the map follows the
// services the process registers now.
func (s *svcMarks) wrote(svc string, deadline int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]int64{}
	}
	s.m[svc] = max(s.m[svc], deadline)
	if s.writes++; s.writes%1024 == 0 {
		for k, d := range s.m {
			if d < deadline-svcMarkAge.Milliseconds() {
				delete(s.m, k)
			}
		}
	}
}

// svcMarkAge is how long a service's mark outlives its last write. A
// forgotten mark costs one write more.
const svcMarkAge = time.Hour

// limits: PX TTLs, in milliseconds.
func (h *hashLayout) limits() driver.Limits {
	return driver.Limits{MinTTL: 10 * time.Millisecond, TTLGranularity: time.Millisecond}
}

func (h *hashLayout) list(ctx context.Context, service string) (driver.Snapshot, error) {
	s, _, err := h.snapshot(ctx, h.c, service)
	return s, err
}

func (h *hashLayout) notes(context.Context) []string { return nil }

type hashKeys struct {
	inst    string // prefix of instance keys; the ID follows
	idx     string
	rev     string
	log     string
	sweeper string // who sweeps the service: a process's token, PX lease
}

func (h *hashLayout) hkeys(service string) hashKeys {
	base := h.o.Prefix + ":{" + service + "}:"
	return hashKeys{inst: base + "i:", idx: base + "idx", rev: base + "rev", log: base + "log", sweeper: base + "sweeper"}
}

func (h *hashLayout) servicesKey() string { return h.o.Prefix + ":services" }

// luaNow is the server's clock in milliseconds. Redis 7 replicates script
// effects, so reading TIME before writing is allowed.
const luaNow = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// luaKeep defines the functions that make a service forget: every script
// that changes a service ends with one of them. Both drop log entries
// older than linger (exactly, not by whole stream nodes: the data of
// instances that left must go). The keys idx, rev and log always get one
// absolute expiry: they go together, and a script never sees one without
// the others.
//
// settle, after a removal, makes the keys expire linger after the latest
// deadline in the index, or after now if that is later: so a service
// without instances leaves nothing behind.
//
// extend, after a put with deadline d, makes sure the keys outlive d by
// linger. It extends them to d + 2 × linger, so that a heartbeat only
// checks (PTTL) and does not write, but once per linger.
const luaKeep = `local function trim(log, linger)
  redis.call('XTRIM', log, 'MINID', math.max(0, now - linger))
end
local function expire(idx, rev, log, at)
  redis.call('PEXPIREAT', idx, at)
  redis.call('PEXPIREAT', rev, at)
  redis.call('PEXPIREAT', log, at)
end
local function settle(idx, rev, log, linger)
  trim(log, linger)
  local last = redis.call('ZRANGE', idx, -1, -1, 'WITHSCORES')
  local at = now
  if last[2] and tonumber(last[2]) > at then at = tonumber(last[2]) end
  expire(idx, rev, log, at + linger)
end
local function extend(idx, rev, log, linger, deadline)
  trim(log, linger)
  local left = redis.call('PTTL', rev)
  if left < 0 or now + left < deadline + linger then
    expire(idx, rev, log, deadline + 2 * linger)
  end
end
`

// putScript registers, heartbeats and updates: it re-writes the whole
// record with a fresh TTL, moves the deadline, and logs a put when the
// stored record was missing or different. It returns the new deadline and
// whether the record existed. A heartbeat (ARGV[5]) writes nothing when
// the record is gone: the lease then registers again.
//
// KEYS: inst, idx, rev, log. ARGV: id, data, ttl ms, log cap, mode, linger ms.
var putScript = luaScript(luaNow + luaKeep + `
local ttl = tonumber(ARGV[3])
local old = redis.call('GET', KEYS[1])
if not old and ARGV[5] == 'heartbeat' then return {0, 0} end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ttl)
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
if old ~= ARGV[2] then
  local rev = redis.call('INCR', KEYS[3])
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[4], '*', 'rev', rev, 'op', 'put', 'id', ARGV[1], 'data', ARGV[2])
end
extend(KEYS[2], KEYS[3], KEYS[4], tonumber(ARGV[6]), now + ttl)
if old then return {now + ttl, 1} end
return {now + ttl, 0}
`)

// delScript deregisters. A removal is logged with its ID only: that is
// all a watcher needs to apply it.
//
// KEYS: inst, idx, rev, log. ARGV: id, log cap, linger ms.
var delScript = luaScript(luaNow + luaKeep + `
local a = redis.call('DEL', KEYS[1])
local b = redis.call('ZREM', KEYS[2], ARGV[1])
if a + b > 0 then
  local rev = redis.call('INCR', KEYS[3])
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[2], '*', 'rev', rev, 'op', 'del', 'id', ARGV[1])
  settle(KEYS[2], KEYS[3], KEYS[4], tonumber(ARGV[3]))
end
return a + b
`)

// servicesScript records a service's latest deadline in the services
// index, drops services whose deadline passed more than linger ago, and
// keeps the index itself until linger after the latest deadline written.
//
// KEYS: services. ARGV: service, deadline ms, linger ms.
var servicesScript = luaScript(luaNow + `
local deadline, linger = tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], 'GT', deadline, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - linger))
local left = redis.call('PTTL', KEYS[1])
if left < 0 or now + left < deadline + linger then
  redis.call('PEXPIREAT', KEYS[1], deadline + linger)
end
return 0
`)

// snapshotScript reads the live members, their records, the revision and
// the log's last ID in one atomic step, so a watch can resume from exactly
// that point. Reply: {rev, lastID, id1, data1, id2, data2, …}. With more
// than ARGV[2] live members (unless it is negative) it reads no record and
// replies {rev, lastID, now}: the caller pages (pagedSnapshot).
//
// KEYS: idx, rev, log. ARGV: instance key prefix, most members.
var snapshotScript = luaScript(luaNow + `
local out = {redis.call('GET', KEYS[2]) or '0', '0-0'}
local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
if last[1] then out[2] = last[1][1] end
local most = tonumber(ARGV[2])
if most >= 0 and redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf') > most then
  out[3] = tostring(now)
  return out
end
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
for _, id in ipairs(ids) do
  local v = redis.call('GET', ARGV[1] .. id)
  if v then
    out[#out + 1] = id
    out[#out + 1] = v
  end
end
return out
`)

// encodeRecord and decodeRecord use driver.Instance's JSON form, the
// stored form of every backend that keeps instances as JSON.
func encodeRecord(in driver.Instance) (string, error) {
	b, err := backend.Encode(in)
	if err != nil {
		return "", fmt.Errorf("%w: redis: encode %s: %v", driver.ErrInvalid, in.ID, err)
	}
	return string(b), nil
}

func decodeRecord(s string) (driver.Instance, error) {
	var in driver.Instance
	err := json.Unmarshal([]byte(s), &in)
	return in, err
}

type hashReg struct {
	h    *hashLayout
	keys hashKeys
	svc  string
	id   string
	ttl  time.Duration
	data string
}

func (h *hashLayout) register(ctx context.Context, inst driver.Instance, ttl time.Duration) (driver.Registration, error) {
	data, err := encodeRecord(inst)
	if err != nil {
		return nil, err
	}
	r := &hashReg{h: h, keys: h.hkeys(inst.Service), svc: inst.Service, id: inst.ID, ttl: ttl, data: data}
	if _, err := r.put(ctx, "register"); err != nil {
		return nil, err
	}
	return r, nil
}

// put writes the record; existed reports whether Redis still held it.
func (r *hashReg) put(ctx context.Context, op string) (existed bool, err error) {
	k := r.keys
	res, err := putScript.Run(ctx, r.h.c, []string{k.inst + r.id, k.idx, k.rev, k.log},
		r.id, r.data, r.ttl.Milliseconds(), r.h.o.MaxLen, op, r.h.o.Linger.Milliseconds()).Int64Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("reply of %d items", len(res))
	}
	if err != nil {
		return false, r.h.wrap(op+" "+r.svc+"/"+r.id, err)
	}
	if res[1] == 0 && op == "heartbeat" {
		return false, nil
	}
	deadline := res[0]
	// The services index lives in another slot (one hot key on Cluster),
	// so it is a second, best effort write: Services double-checks every
	// entry against the service's own index. Its score is a deadline, so
	// refreshing it once the score is TTL/2 behind (every other heartbeat)
	// keeps it ahead of the clock; the registrations of a service in one
	// process share that refresh.
	refresh, prev, claimed := op != "heartbeat", int64(0), false
	if !refresh {
		prev, claimed = r.h.marks.claim(r.svc, deadline, r.ttl)
		refresh = claimed
	}
	if refresh {
		err := servicesScript.Run(ctx, r.h.c, []string{r.h.servicesKey()}, r.svc, deadline, r.h.o.Linger.Milliseconds()).Err()
		if err != nil {
			if claimed {
				r.h.marks.release(r.svc, deadline, prev)
			}
			return false, r.h.wrap(op+" "+r.svc+"/"+r.id, err)
		}
		r.h.marks.wrote(r.svc, deadline)
	}
	return res[1] == 1, nil
}

// Heartbeat re-writes the whole record with a fresh TTL and deadline (not
// just PEXPIRE), which repairs an index entry or record content lost in a
// failover. If the record itself is gone (expired during a partition,
// FLUSHALL, an external DEL) it writes nothing and returns ErrNotFound:
// the lease registers again at once, so the instance is back within one
// heartbeat.
func (r *hashReg) Heartbeat(ctx context.Context) error {
	existed, err := r.put(ctx, "heartbeat")
	if err == nil && !existed {
		err = fmt.Errorf("redis %s: heartbeat %s/%s: record is gone: %w", r.h.name, r.svc, r.id, driver.ErrNotFound)
	}
	return err
}

func (r *hashReg) Update(ctx context.Context, inst driver.Instance) error {
	data, err := encodeRecord(inst)
	if err != nil {
		return err
	}
	r.data = data
	_, err = r.put(ctx, "update")
	return err
}

func (r *hashReg) Deregister(ctx context.Context) error {
	k := r.keys
	err := delScript.Run(ctx, r.h.c, []string{k.inst + r.id, k.idx, k.rev, k.log}, r.id, r.h.o.MaxLen, r.h.o.Linger.Milliseconds()).Err()
	if err != nil {
		return r.h.wrap("deregister "+r.svc+"/"+r.id, err)
	}
	return nil
}

// snapshot reads a service's live instances, its revision and the ID
// of the last log entry, through c. A service of more than relistPage
// members is read in pages.
func (h *hashLayout) snapshot(ctx context.Context, c goredis.UniversalClient, service string) (driver.Snapshot, string, error) {
	s, lastID, err := h.snapshotOnce(ctx, c, service, relistPage)
	if errors.Is(err, errPaged) {
		s, lastID, err = h.pagedSnapshot(ctx, c, service, s.Revision, lastID)
		if refused(err) {
			// An ACL written before paging lacks ZSCAN, MGET or XRANGE.
			s, lastID, err = h.snapshotOnce(ctx, c, service, -1)
		}
	}
	if err != nil {
		return driver.Snapshot{}, "", h.wrap("list "+service, err)
	}
	return s, lastID, nil
}

// snapshotOnce runs snapshotScript. It returns errPaged, with the
// revision, the last ID and no instances, when the service has more than
// most members.
func (h *hashLayout) snapshotOnce(ctx context.Context, c goredis.Scripter, service string, most int) (driver.Snapshot, string, error) {
	k := h.hkeys(service)
	res, err := snapshotScript.Run(ctx, c, []string{k.idx, k.rev, k.log}, k.inst, most).StringSlice()
	if err != nil {
		return driver.Snapshot{}, "", err
	}
	if len(res) < 2 {
		return driver.Snapshot{}, "", fmt.Errorf("short snapshot reply (%d items)", len(res))
	}
	rev, _ := strconv.ParseUint(res[0], 10, 64)
	if len(res) == 3 {
		return driver.Snapshot{Service: service, Revision: rev}, res[1], errPaged
	}
	s := driver.Snapshot{Service: service, Revision: rev, At: time.Now(), Instances: make([]driver.Instance, 0, (len(res)-2)/2)}
	for i := 2; i+1 < len(res); i += 2 {
		in, err := decodeRecord(res[i+1])
		if err != nil || in.ID != res[i] {
			continue // not ours: ignore rather than fail the whole list
		}
		s.Instances = append(s.Instances, in)
	}
	return s, res[1], nil
}

func (h *hashLayout) services(ctx context.Context) ([]string, error) {
	now, err := h.c.Time(ctx).Result()
	if err != nil {
		return nil, h.wrap("services", err)
	}
	ms := now.UnixMilli()
	// Writers trim entries that are more than linger past their deadline.
	cands, err := h.c.ZRangeByScore(ctx, h.servicesKey(), &goredis.ZRangeBy{Min: "(" + strconv.FormatInt(ms, 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, h.wrap("services", err)
	}
	// A service's entry outlives a deregistration: check its own index.
	cmds := make([]*goredis.IntCmd, len(cands))
	_, err = h.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, svc := range cands {
			cmds[i] = p.ZCount(ctx, h.hkeys(svc).idx, "("+strconv.FormatInt(ms, 10), "+inf")
		}
		return nil
	})
	if err != nil {
		return nil, h.wrap("services", err)
	}
	out := []string{}
	for i, svc := range cands {
		if cmds[i].Val() > 0 {
			out = append(out, svc)
		}
	}
	slices.Sort(out)
	return out, nil
}
