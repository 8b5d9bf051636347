package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/roster-go/roster/registry/driver"
)

// Register implements driver.Driver: an ephemeral znode in the session of
// the TTL (rounded up to whole seconds).
func (d *Driver) Register(ctx context.Context, inst driver.Instance, ttl time.Duration) (driver.Registration, error) {
	val, err := d.encode(inst)
	if err != nil {
		return nil, err
	}
	ttl = ttlRounded(ttl)
	s, err := d.sessionFor(ttl)
	if err != nil {
		return nil, err
	}
	r := &registration{d: d, s: s, path: d.path(inst.Service, inst.ID), id: inst.ID, ttl: ttl}
	if err := r.create(ctx, "register "+inst.ID, val); err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.watchdog = time.AfterFunc(ttl, r.expire)
	r.mu.Unlock()
	return r, nil
}

// ttlRounded rounds ttl up to whole seconds, or down within the last
// second below math.MaxInt64, where rounding up would overflow to a
// negative TTL (and a watchdog firing at once).
func ttlRounded(ttl time.Duration) time.Duration {
	if ttl%time.Second != 0 {
		ttl = ttl.Truncate(time.Second)
		if ttl <= math.MaxInt64-time.Second {
			ttl += time.Second
		}
	}
	return max(ttl, limits.MinTTL)
}

// sessionRequest is the session timeout asked of the server for a TTL:
// the protocol carries an int32 of milliseconds (about 24.8 days), and
// the client library wraps a longer one into a negative timeout that
// never connects. The server clamps the request to its
// maxSessionTimeout anyway, and the registration's watchdog keeps the
// TTL itself.
func sessionRequest(ttl time.Duration) time.Duration {
	return min(ttl, math.MaxInt32*time.Millisecond)
}

// registration is one ephemeral znode and the session that owns it.
type registration struct {
	d    *Driver
	s    *session
	path string
	id   string
	ttl  time.Duration

	mu       sync.Mutex
	owner    int64 // session ID that created the znode
	czxid    int64 // its creation: tells it from a later znode of the same path
	watchdog *time.Timer
	done     bool
}

// ours reports whether st is the znode this registration created.
func (r *registration) ours(st *zk.Stat) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return st != nil && st.EphemeralOwner == r.owner && st.Czxid == r.czxid
}

func (r *registration) ownerID() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.owner
}

// lost marks the registration replaced: its watchdog must not delete the
// znode of the registration that follows it.
func (r *registration) lost() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done = true
	if r.watchdog != nil {
		r.watchdog.Stop()
	}
}

// create writes the znode in the current session, replacing one left by
// another session (the last writer wins). The parents are created when
// missing: the root as a persistent znode, the service as a container.
// what names the operation in errors ("register ID").
func (r *registration) create(ctx context.Context, what string, val []byte) error {
	d := r.d
	for range 4 {
		conn := r.s.current()
		var st *zk.Stat
		err := d.call(ctx, what, func() error {
			_, err := conn.Create(r.path, val, zk.FlagEphemeral, d.acl)
			if errors.Is(err, zk.ErrNodeExists) { // replace it, atomically
				_, err = conn.Multi(
					&zk.DeleteRequest{Path: r.path, Version: -1},
					&zk.CreateRequest{Path: r.path, Data: val, Acl: d.acl, Flags: zk.FlagEphemeral})
			}
			if err != nil {
				return err
			}
			_, st, err = conn.Exists(r.path)
			return err
		})
		switch {
		case errors.Is(err, zk.ErrNoNode):
			if err := d.ensureParents(ctx, conn, r.path); err != nil {
				return err
			}
			continue
		case errors.Is(err, zk.ErrNodeExists), err == nil && st.EphemeralOwner == 0:
			continue // raced with another writer of the same ID
		case err != nil:
			return err
		}
		r.mu.Lock()
		r.owner, r.czxid = st.EphemeralOwner, st.Czxid
		r.mu.Unlock()
		return nil
	}
	return fmt.Errorf("zookeeper: %s: %w: znode %s kept changing under concurrent writers", what, driver.ErrUnavailable, r.path)
}

// ensureParents creates the root and the service znode.
func (d *Driver) ensureParents(ctx context.Context, conn *zk.Conn, p string) error {
	svc := p[:strings.LastIndexByte(p, '/')]
	var dirs []string
	for dir := d.root; ; {
		dirs = append([]string{dir}, dirs...)
		i := strings.LastIndexByte(dir, '/')
		if i <= 0 {
			break
		}
		dir = dir[:i]
	}
	return d.call(ctx, "create parents", func() error {
		for _, dir := range dirs {
			// Exists first: the server checks the parent's CREATE
			// permission before it reports NodeExists, and an operator
			// may have created the root under a parent we may not write.
			if ok, _, err := conn.Exists(dir); err != nil || ok {
				if err != nil {
					return err
				}
				continue
			}
			if _, err := conn.Create(dir, nil, 0, d.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				return err
			}
		}
		_, err := conn.CreateContainer(svc, nil, zk.FlagContainer, d.acl)
		if errors.Is(err, zk.ErrNodeExists) {
			return nil
		}
		return err
	})
}

// Heartbeat implements driver.Registration: it feeds the watchdog and
// checks that the znode is still there, in the session that created it.
func (r *registration) Heartbeat(ctx context.Context) error {
	r.mu.Lock()
	done := r.done
	if !done {
		r.watchdog.Reset(r.ttl)
	}
	r.mu.Unlock()
	err := r.check(ctx)
	if done && err == nil {
		err = fmt.Errorf("zookeeper: heartbeat %s: %w: no heartbeat for %v: deleted by the watchdog", r.id, driver.ErrNotFound, r.ttl)
	}
	if errors.Is(err, driver.ErrNotFound) || errors.Is(err, zk.ErrNoNode) {
		r.lost()
	}
	return err
}

// check reads the znode's stat. Its errors name the heartbeat.
func (r *registration) check(ctx context.Context) error {
	what := "heartbeat " + r.id
	owner := r.ownerID()
	if cur := r.s.id(); cur != 0 && cur != owner {
		return fmt.Errorf("zookeeper: %s: %w: session %#x expired (now %#x)", what, driver.ErrNotFound, owner, cur)
	}
	conn := r.s.current()
	var st *zk.Stat
	var ok bool
	err := r.d.call(ctx, what, func() error {
		var err error
		ok, st, err = conn.Exists(r.path)
		return err
	})
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("zookeeper: %s: %w: znode %s is gone", what, driver.ErrNotFound, r.path)
	case !r.ours(st):
		return fmt.Errorf("zookeeper: %s: %w: znode %s was written again by session %#x", what, driver.ErrNotFound, r.path, st.EphemeralOwner)
	}
	return nil
}

// Update implements driver.Registration: the znode's data is replaced
// while the session owns it, else the znode is created again.
func (r *registration) Update(ctx context.Context, inst driver.Instance) error {
	val, err := r.d.encode(inst)
	if err != nil {
		return err
	}
	conn := r.s.current()
	err = r.d.call(ctx, "update "+r.id, func() error {
		_, st, err := conn.Exists(r.path)
		if err != nil {
			return err
		}
		if !r.ours(st) || conn.SessionID() != st.EphemeralOwner {
			return zk.ErrNoNode
		}
		_, err = conn.Set(r.path, val, st.Version)
		return err
	})
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
		err = r.create(ctx, "update "+r.id, val)
	}
	return err
}

// Deregister implements driver.Registration: the znode is deleted if this
// registration's session still owns it.
func (r *registration) Deregister(ctx context.Context) error {
	r.mu.Lock()
	r.done = true
	if r.watchdog != nil {
		r.watchdog.Stop()
	}
	r.mu.Unlock()
	return r.deleteOwned(ctx)
}

// deleteOwned deletes the znode unless another session wrote it since.
func (r *registration) deleteOwned(ctx context.Context) error {
	conn := r.s.current()
	err := r.d.call(ctx, "deregister "+r.id, func() error {
		_, st, err := conn.Exists(r.path)
		if err != nil || !r.ours(st) {
			return err
		}
		return conn.Delete(r.path, st.Version)
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	return err
}

// expire runs when no Heartbeat came for a TTL: the owner stopped
// renewing while the process lives, so the znode goes as it would when
// the session expires. A later Heartbeat reports it gone.
func (r *registration) expire() {
	r.mu.Lock()
	done := r.done
	r.done = true
	r.mu.Unlock()
	if done || r.d.closed.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.d.opts.RequestTimeout)
	defer cancel()
	_ = r.deleteOwned(ctx)
}
