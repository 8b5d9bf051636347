package redis

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/roster-go/roster/registry/driver"
)

// keysStream follows one service in the keys layout. The driver's
// keysHub wakes it with the keys of its service after each poll interval's
// scan, and with the key a keyspace event names (when the server
// publishes them). Events are only hints: they are lost while
// disconnected and late under load, so polling stays on. A watch reads
// only the keys it is handed: an empty service costs nothing.
type keysStream struct {
	ks    *keysLayout
	svc   string
	last  driver.Snapshot
	vals  map[string]string // the service's keys and values, as last read
	runID string            // the server's run_id when last checked; "" unknown
	epoch string            // the keyspace's epoch token when last checked; "" unknown
	// epochAt is when the epoch key's expiry was last pushed back.
	epochAt time.Time

	pending bool
	wake    chan struct{} // 1-buffered: the hub handed something over
	closed  chan struct{}
	once    sync.Once

	mu    sync.Mutex          // guards what the hub hands over
	dirty map[string]struct{} // keys named by events since the last read
	scan  []string            // the keys of the last scan, unless read
	isNew bool                // scan holds a scan not yet read
	err   error               // the last scan's failure
}

func (ks *keysLayout) watch(ctx context.Context, service string) (driver.Stream, error) {
	now, err := ks.c.Time(ctx).Result()
	if err != nil {
		return nil, ks.wrap("list "+service, err)
	}
	keys, err := ks.scan(ctx, globEscape(ks.keyPrefix(service))+"*")
	if err != nil {
		return nil, ks.wrap("list "+service, err)
	}
	_, vals, err := ks.fetch(ctx, keys, false)
	if err != nil {
		return nil, ks.wrap("list "+service, err)
	}
	last, err := ks.build(ctx, service, vals, now)
	if err != nil {
		return nil, ks.wrap("list "+service, err)
	}
	st := &keysStream{ks: ks, svc: service, last: last, vals: vals, pending: true,
		wake: make(chan struct{}, 1), closed: make(chan struct{}), dirty: map[string]struct{}{}}
	st.runID = ks.runID(ctx)
	st.epoch, st.epochAt = ks.epochToken(ctx), time.Now()
	ks.hub.join(ctx, st)
	return st, nil
}

// touched records a key an event named; the hub's lock is held.
func (st *keysStream) touched(key string) {
	st.mu.Lock()
	st.dirty[key] = struct{}{}
	st.mu.Unlock()
	st.poke()
}

// scanned hands over the keys of the service found by a scan, or the
// scan's failure; the hub's lock is held.
func (st *keysStream) scanned(keys []string, err error) {
	st.mu.Lock()
	st.scan, st.isNew, st.err = keys, err == nil, err
	st.mu.Unlock()
	st.poke()
}

func (st *keysStream) poke() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// work takes what the hub handed over: the keys to read, whether they
// replace all the service's keys, and a scan's failure.
func (st *keysStream) work() (keys []string, all bool, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	keys, all, err = st.scan, st.isNew, st.err
	st.scan, st.isNew, st.err = nil, false, nil
	for k := range st.dirty {
		keys = append(keys, k)
	}
	clear(st.dirty)
	return keys, all, err
}

// notifyEnabled decides whether to subscribe to keyspace events. When the
// server publishes only some of the events a watch listens to, it warns
// once (slog.Default), naming the missing flags and the delay that
// results.
func (ks *keysLayout) notifyEnabled(ctx context.Context) bool {
	switch {
	case ks.o.Notify == NotifyOff, ks.isCluster():
		// Cluster events are node-local: a subscription on one node misses
		// the others'. Poll only.
		return false
	case ks.o.Notify == NotifyOn:
		return true
	}
	f, err := ks.notifyFlags(ctx)
	if err != nil {
		return true // CONFIG may be renamed away; subscribing costs little
	}
	if n := ks.partialNote(f); n != "" {
		ks.warnFlags.Do(func() { slog.Default().Warn("roster: redis " + ks.name + ": " + n) })
	}
	return eventsUsable(f)
}

// notifyFlags returns the server's notify-keyspace-events.
func (ks *keysLayout) notifyFlags(ctx context.Context) (string, error) {
	cfg, err := ks.c.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		return "", err
	}
	return cfg["notify-keyspace-events"], nil
}

// keyEvents are the keyevent notifications a keys-layout watch listens
// to, each with the notify-keyspace-events flag that publishes it ('A'
// stands for all of them).
var keyEvents = []struct{ flag, what string }{
	{"$", "registrations and updates (SET)"},
	{"g", "deregistrations (DEL)"},
	{"x", "expiries"},
}

// missingEvents returns the flags f lacks, and what goes unannounced
// without them. Without 'E' (keyevent notifications) everything is.
func missingEvents(f string) (flags, what []string) {
	all := strings.Contains(f, "A")
	for _, e := range keyEvents {
		if !strings.Contains(f, "E") || !(all || strings.Contains(f, e.flag)) {
			flags = append(flags, e.flag)
			what = append(what, e.what)
		}
	}
	if !strings.Contains(f, "E") {
		flags = append([]string{"E"}, flags...)
	}
	return flags, what
}

// eventsUsable reports whether notify-keyspace-events flags f publish at
// least one of the keyevents a keys-layout watch listens to.
func eventsUsable(f string) bool {
	_, what := missingEvents(f)
	return len(what) < len(keyEvents)
}

// partialNote describes a server that publishes some of the events a
// watch needs but not all (the article's own "Ex" publishes expiries
// only), or "" when it publishes all or none.
func (ks *keysLayout) partialNote(f string) string {
	flags, what := missingEvents(f)
	if len(what) == 0 || len(what) == len(keyEvents) {
		return ""
	}
	return fmt.Sprintf("notify-keyspace-events=%q lacks %s: %s reach watchers only by the poll relist, within %v (option poll); set it to KEA or Eg$x",
		f, strings.Join(flags, ", "), strings.Join(what, " and "), ks.o.Poll)
}

// notes says when watches poll alone, one sentence each (Driver.Notes).
func (ks *keysLayout) notes(ctx context.Context) []string {
	polled := fmt.Sprintf("changes and expiries reach watchers only by the poll relist, within %v (option poll)", ks.o.Poll)
	switch {
	case ks.isCluster():
		return []string{"layout keys on Redis Cluster: keyspace notifications are node-local and not used; " + polled}
	case ks.o.Notify == NotifyOff:
		return []string{"keyspace notifications not used (notify=off): " + polled}
	}
	f, err := ks.notifyFlags(ctx)
	switch {
	case err != nil && ks.o.Notify == NotifyOn:
		return nil
	case err != nil:
		return []string{fmt.Sprintf("cannot read notify-keyspace-events (%v): watches subscribe anyway; if the server publishes no events, %s",
			ks.wrap("config get", err), polled)}
	case !eventsUsable(f):
		return []string{fmt.Sprintf("keyspace notifications disabled (notify-keyspace-events=%q; set it to Eg$x or EA): %s", f, polled)}
	case ks.partialNote(f) != "":
		return []string{ks.partialNote(f)}
	}
	return nil
}

func (st *keysStream) Next(ctx context.Context) (driver.Snapshot, error) {
	if s, ok, err := opening(st.svc, st.closed, &st.pending, st.last); ok {
		return s, err
	}
	for {
		select {
		case <-ctx.Done():
			return driver.Snapshot{}, ctx.Err()
		case <-st.closed:
			return driver.Snapshot{}, fmt.Errorf("redis: watch %s: %w", st.svc, driver.ErrClosed)
		case <-st.wake:
		}
		keys, all, err := st.work()
		if err != nil {
			return driver.Snapshot{}, err
		}
		if len(keys) == 0 && (!all || len(st.vals) == 0) {
			continue // nothing to read: an empty service stays empty
		}
		s, err := st.read(ctx, keys, all)
		if err != nil {
			return driver.Snapshot{}, st.ks.wrap("watch "+st.svc, err)
		}
		if lost(st.last, s) {
			// A restart (the pool re-dialled without an error) or a wipe
			// looks like instances leaving: say so, so that the registry
			// holds those whose leases have not yet written themselves back.
			restarted, wiped := st.restarted(ctx), st.wiped(ctx)
			if restarted || wiped {
				st.last = s
				return driver.Snapshot{}, fmt.Errorf("redis %s: watch %s: %s", st.ks.name, st.svc, fault(restarted))
			}
		} else {
			st.keepEpoch(ctx)
		}
		st.last = s // changed or not: Registry drops repeats
		return s, nil
	}
}

// read reads keys and returns the service's new state: keys replace the
// service's keys when all is set, else they update them.
func (st *keysStream) read(ctx context.Context, keys []string, all bool) (driver.Snapshot, error) {
	now, vals, err := st.ks.fetch(ctx, keys, true)
	if err != nil {
		return driver.Snapshot{}, err
	}
	if !all {
		for _, k := range keys {
			if v, ok := vals[k]; ok {
				st.vals[k] = v
			} else {
				delete(st.vals, k)
			}
		}
		vals = st.vals
	}
	st.vals = vals
	return st.ks.build(ctx, st.svc, vals, now)
}

// lost reports whether an instance of prev is missing from cur.
func lost(prev, cur driver.Snapshot) bool {
	for _, in := range prev.Instances {
		if _, ok := cur.Find(in.ID); !ok {
			return true
		}
	}
	return false
}

// restarted reports whether the server's run_id changed since the last
// check. It asks only when instances disappeared, which is rare, so that
// a poll costs no extra command. Unknown (a Cluster, INFO refused) is
// never a restart.
func (st *keysStream) restarted(ctx context.Context) bool {
	id := st.ks.runID(ctx)
	if id == "" {
		return false
	}
	prev := st.runID
	st.runID = id
	return prev != "" && prev != id
}

// fault names what a watch saw when instances disappeared.
func fault(restarted bool) string {
	if restarted {
		return "the server restarted (run_id changed)"
	}
	return "the keyspace was wiped (its epoch key " + epochKey + " is gone or new: FLUSHALL, FLUSHDB)"
}

// The keyspace's epoch: a key under the layout's prefix holding a random
// token, created by the first watch that finds it missing. Anything that
// wipes the keyspace (FLUSHALL, FLUSHDB, a restart without data, a
// failover to a replica that lost it) takes it along, so a watch whose
// instances disappear and whose token is no longer there knows that they
// did not leave. Its name is no service's key (a service's keys are
// <prefix>:<service>:<addr>); it expires epochTTL after the last watch
// pushed it back, so an unwatched keyspace keeps nothing.
const (
	epochKey     = "~epoch"
	epochTTL     = 24 * time.Hour
	epochRefresh = time.Hour // how often a watch pushes its expiry back
)

// epochScript returns the epoch token, creating it if it is missing, and
// pushes its expiry back. KEYS: epoch key. ARGV: new token, ttl seconds.
var epochScript = luaScript(`
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
  return ARGV[1]
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
return v
`)

// epochToken returns the keyspace's epoch token, or "" when it cannot be
// known (the script refused, the server unreachable).
func (ks *keysLayout) epochToken(ctx context.Context) string {
	v, err := epochScript.Run(ctx, ks.c, []string{ks.o.Prefix + ":" + epochKey}, rand.Text(), int64(epochTTL/time.Second)).Text()
	if err != nil {
		return ""
	}
	return v
}

// wiped reports whether the epoch token changed since the last check:
// the keyspace was wiped meanwhile. Unknown is never a wipe.
func (st *keysStream) wiped(ctx context.Context) bool {
	tok := st.ks.epochToken(ctx)
	if tok == "" {
		return false
	}
	prev := st.epoch
	st.epoch, st.epochAt = tok, time.Now()
	return prev != "" && prev != tok
}

// keepEpoch pushes the epoch key's expiry back every epochRefresh. It
// never creates the key: a watch that finds it missing must still see
// the wipe when its instances disappear.
func (st *keysStream) keepEpoch(ctx context.Context) {
	if time.Since(st.epochAt) < epochRefresh {
		return
	}
	st.epochAt = time.Now()
	_ = st.ks.c.Expire(ctx, st.ks.o.Prefix+":"+epochKey, epochTTL).Err()
}

// runID returns the server's run_id, which changes at every restart, or
// "" when it cannot be known (Cluster: one per node; INFO refused).
func (ks *keysLayout) runID(ctx context.Context) string {
	if ks.isCluster() {
		return ""
	}
	info, err := ks.c.Info(ctx, "server").Result()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func (st *keysStream) Close() error {
	st.once.Do(func() {
		close(st.closed)
		st.ks.hub.leave(st)
	})
	return nil
}
