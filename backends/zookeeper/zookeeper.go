// Package zookeeper is Roster's ZooKeeper backend, on
// github.com/go-zookeeper/zk. It needs ZooKeeper 3.5 or newer. Import it
// for its side effect and open a registry by URL with registry.Open:
//
//	import _ "github.com/roster-go/roster/backends/zookeeper"
//
//	reg, err := registry.Open(ctx, "zk://10.0.0.1:2181,10.0.0.2:2181/roster")
//
// Give every host its port, or none for 2181. The path is the root znode,
// /roster by default. [New] builds a driver from [Options] instead, and
// [ParseURL] reads them from a URL.
//
// Each root is a namespace. No root may lie inside another, so segments
// below the first must be names no service can have. /apps/_roster works
// and /apps/roster is refused.
//
// User and password, when given, become digest credentials on every
// session. A URL with a user and no password reads password_file, else
// $ROSTER_ZOOKEEPER_PASSWORD ([EnvPassword]). With tls=true the driver
// talks to the servers' secureClientPort.
//
// Each registration is an ephemeral znode <root>/<service>/<instance-id>
// holding the instance as JSON. The driver keeps one session per distinct
// TTL, with the TTL as its timeout. So when a process dies, the server
// ends its sessions and deletes its znodes after the TTL. TTLs are whole
// seconds, at least 2s. The server clamps session timeouts to its
// minSessionTimeout and maxSessionTimeout. Set those so your TTLs fall
// inside.
//
// A watchdog deletes a registration's znode when no heartbeat came for a
// TTL. So a lease abandoned by a live process expires too.
//
// A watch uses one-shot ZooKeeper watches, each re-armed by the read that
// follows its event. It fails with registry.ErrUnavailable as soon as its
// session disconnects. The registry then reopens it, and it relists.
//
// docs/backends/zookeeper.md has every option, the ACLs, the guarantees
// and the measurements.
package zookeeper

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/go-zookeeper/zk"

	"github.com/roster-go/roster/registry/driver"
)

// Scheme is the URL scheme of this backend.
const Scheme = "zk"

// Defaults of Options.
const (
	defaultRoot           = "/roster"
	defaultSessionTimeout = 10 * time.Second
	defaultRequestTimeout = 5 * time.Second
)

// limits: TTLs are session timeouts, which the driver keeps in whole
// seconds so that the number of sessions stays small; below 2s the
// client's ping interval (a third of the timeout) leaves no margin for a
// loaded machine.
var limits = driver.Limits{MinTTL: 2 * time.Second, TTLGranularity: time.Second}

func init() {
	driver.Register(Scheme, openURL, publicOptions...)
}

// Options configure a Driver opened with New.
type Options struct {
	Servers        []string      // host:port of each server
	Root           string        // root znode, default /roster
	SessionTimeout time.Duration // of the reading session, default 10s
	RequestTimeout time.Duration // bound on every call, default 5s
	User, Password string        // digest credentials, optional
	TLS            *tls.Config   // nil: plain TCP
	// Layout is the form of the instance znodes: LayoutRoster (the
	// default) or LayoutCurator, Apache Curator's service discovery, as
	// Spring Cloud Zookeeper and Dubbo 3 write it (root default /services).
	Layout string
	// CuratorPayload is the payload class Curator records are written
	// with: PayloadSpring (the default) or PayloadMap.
	CuratorPayload string
}

// Driver is a driver.Driver on a ZooKeeper ensemble. Wrap it with
// registry.New, or get one through registry.Open with a zk:// URL.
type Driver struct {
	opts   Options
	root   string
	acl    []zk.ACL
	read   *session // List, Services, Watch
	closed atomic.Bool
	// ports finds a plain client sent to a TLS port (secureClientPort),
	// which closes every connection: the library would retry it forever.
	// (TLS to a plain port is found at New.)
	ports backend.PortCheck

	mu       sync.Mutex
	sessions map[time.Duration]*session // registrations' sessions, by TTL
}

// New returns a Driver. Sessions connect in the background: an unreachable
// ensemble shows as ErrUnavailable on the first calls, not here.
func New(opts Options) (*Driver, error) {
	if len(opts.Servers) == 0 {
		return nil, fmt.Errorf("zookeeper: %w: no servers", driver.ErrInvalid)
	}
	if err := checkLayout(&opts); err != nil {
		return nil, err
	}
	root := path.Clean(opts.Root)
	if root == "/" || root[0] != '/' {
		return nil, backend.Invalid("root", "%q: want an absolute znode path below /, such as /roster", opts.Root)
	}
	if err := checkNesting(root); err != nil {
		return nil, err
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = defaultSessionTimeout
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = defaultRequestTimeout
	}
	if opts.TLS != nil {
		if err := checkTLS(opts); err != nil {
			return nil, fmt.Errorf("zookeeper: connect: %w", err)
		}
	}
	d := &Driver{opts: opts, root: root, acl: zk.WorldACL(zk.PermAll), sessions: map[time.Duration]*session{}}
	if opts.User != "" {
		d.acl = append(zk.AuthACL(zk.PermAll), zk.WorldACL(zk.PermRead)...)
	}
	if opts.TLS == nil {
		d.ports.Addrs = opts.Servers
	}
	var err error
	if d.read, err = d.newSession(opts.SessionTimeout); err != nil {
		return nil, err
	}
	return d, nil
}

// checkNesting refuses a root that could lie inside another root's
// namespace. A driver reads and writes only <root>/<service>[/<id>], with
// service a valid service name; a root nested in another, such as /a/b
// in /a, would be tenant /a's service "b", which /a could list, register
// into and delete from. So every segment of a root below the first must
// be a name no service can have (one with an upper-case letter or a
// leading '_': /apps/_roster, /teams/Payments): then no root's znodes are
// ever another root's services, and roots never overlap.
func checkNesting(root string) error {
	segs := strings.Split(root[1:], "/")
	for i := 1; i < len(segs); i++ {
		if backend.ValidateService(segs[i]) != nil {
			continue
		}
		parent := "/" + strings.Join(segs[:i], "/")
		return backend.Invalid("root", "%s: its segment %q is a valid service name, so the root would be the "+
			"service %q of the root %s and share its namespace: use a root of one segment (%s-%s) or name "+
			"the deeper segments as no service can be named, with a leading '_' or an upper-case letter (%s/_%s)",
			root, segs[i], segs[i], parent, parent, segs[i], parent, segs[i])
	}
	return nil
}

// path returns the znode of an instance: <root>/<service>/<id>.
func (d *Driver) path(service, id string) string { return d.servicePath(service) + "/" + id }

func (d *Driver) servicePath(service string) string { return d.root + "/" + service }

// Limits implements driver.Driver: TTLs of at least 2s, in whole seconds.
func (d *Driver) Limits() driver.Limits { return limits }

// Local reports whether every server of the ensemble is on this host:
// then loopback addresses are served (see registry.AllowLoopback).
func (d *Driver) Local() bool { return backend.LocalHosts(d.opts.Servers...) }

// Close implements driver.Driver: it closes every session, which deletes
// the znodes still registered in them.
func (d *Driver) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.mu.Lock()
	all := append([]*session{d.read}, mapValues(d.sessions)...)
	d.sessions = nil
	d.mu.Unlock()
	for _, s := range all {
		s.close()
	}
	return nil
}

func mapValues[K comparable, V any](m map[K]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// sessionFor returns the registrations' session of ttl, opening it once.
func (d *Driver) sessionFor(ttl time.Duration) (*session, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sessions == nil {
		return nil, fmt.Errorf("zookeeper: %w", driver.ErrClosed)
	}
	if s, ok := d.sessions[ttl]; ok {
		return s, nil
	}
	s, err := d.newSession(sessionRequest(ttl))
	if err != nil {
		return nil, err
	}
	d.sessions[ttl] = s
	return s, nil
}

// call runs fn, a blocking client call, bounded by ctx and the request
// timeout. The client's calls take no context; one that outlives the bound
// finishes in the background when the client answers or fails it (it
// fails queued calls within about a second while no server is reachable).
func (d *Driver) call(ctx context.Context, what string, fn func() error) error {
	if err := d.ports.Known(); err != nil {
		return fmt.Errorf("zookeeper: %s: %w", what, err) // at once, not after another timeout
	}
	c, cancel := context.WithTimeout(ctx, d.opts.RequestTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return d.wrap(ctx, what, err)
	case <-c.Done():
		return d.wrap(ctx, what, c.Err())
	}
}

// wrap adds the operation to a client error. ctx is the call's: when it
// ended, Registry adds its error. An outage may be a port mix-up, which
// PortCheck diagnoses.
func (d *Driver) wrap(ctx context.Context, what string, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil || d.ErrorKind(err) != driver.ErrUnavailable:
		return fmt.Errorf("zookeeper: %s: %w", what, err)
	}
	if perr := d.ports.Diagnose(); perr != nil {
		return fmt.Errorf("zookeeper: %s: %w", what, perr) // perr names the address
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// The request timeout's: not the caller's deadline, so not wrapped.
		return fmt.Errorf("zookeeper: %s: no answer within %v", what, d.opts.RequestTimeout)
	}
	return fmt.Errorf("zookeeper: %s: %w", what, err)
}

// ErrorKind implements driver.Driver. A missing znode is ErrNotFound. A
// refused identity or input is ErrInvalid: a retry cannot succeed.
func (d *Driver) ErrorKind(err error) error {
	if errors.Is(err, zk.ErrNoNode) {
		return driver.ErrNotFound
	}
	for _, e := range []error{zk.ErrNoAuth, zk.ErrAuthFailed, zk.ErrBadArguments, zk.ErrInvalidACL,
		zk.ErrInvalidPath, zk.ErrNoChildrenForEphemerals, zk.ErrBadVersion} {
		if errors.Is(err, e) {
			return driver.ErrInvalid
		}
	}
	return driver.ErrUnavailable
}

func encode(in driver.Instance) ([]byte, error) {
	b, err := backend.Encode(in)
	if err != nil {
		return nil, fmt.Errorf("zookeeper: encode %s: %w: %v", in.ID, driver.ErrInvalid, err)
	}
	return b, nil
}

// List implements driver.Driver: the service znode's children, then each
// child's data.
func (d *Driver) List(ctx context.Context, service string) (driver.Snapshot, error) {
	snap := driver.Snapshot{Service: service, Instances: []driver.Instance{}}
	conn := d.read.current()
	var kids []string
	err := d.call(ctx, "list "+service, func() error {
		var st *zk.Stat
		var err error
		kids, st, err = conn.Children(d.servicePath(service))
		if err == nil {
			snap.Revision = uint64(st.Pzxid)
		}
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		snap.At = time.Now()
		return snap, nil
	}
	if err != nil {
		return driver.Snapshot{}, err
	}
	ins, rev, err := d.getAll(ctx, conn, service, kids)
	if err != nil {
		return driver.Snapshot{}, err
	}
	snap.Instances, snap.Revision = ins, max(snap.Revision, rev)
	snap.At = time.Now()
	return snap, nil
}

// listParallel is how many reads List keeps in flight: the client
// pipelines them on its one connection, so a large service costs a few
// round trips rather than one per instance.
const listParallel = 16

// getAll reads the instance znodes ids, listParallel at a time, and
// returns the instances that decode and the highest mzxid.
func (d *Driver) getAll(ctx context.Context, conn *zk.Conn, service string, ids []string) ([]driver.Instance, uint64, error) {
	got := make([]*driver.Instance, len(ids))
	mz := make([]int64, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for w := range min(listParallel, len(ids)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(ids); i += listParallel {
				var st *zk.Stat
				got[i], st, errs[i] = d.get(ctx, conn, service, ids[i])
				if errs[i] == nil {
					mz[i] = st.Mzxid
				} else if errors.Is(errs[i], zk.ErrNoNode) {
					errs[i] = nil // gone since the children were read
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, 0, err
		}
	}
	ins := make([]driver.Instance, 0, len(ids))
	var rev uint64
	for i, in := range got {
		rev = max(rev, uint64(mz[i]))
		if in != nil {
			ins = append(ins, *in)
		}
	}
	return ins, rev, nil
}

// get reads one instance znode; a value that does not decode is nil.
func (d *Driver) get(ctx context.Context, conn *zk.Conn, service, id string) (*driver.Instance, *zk.Stat, error) {
	var val []byte
	var st *zk.Stat
	err := d.call(ctx, "get "+service+"/"+id, func() error {
		var err error
		val, st, err = conn.Get(d.path(service, id))
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	if in, ok := d.decode(service, id, val); ok {
		return &in, st, nil
	}
	return nil, st, nil
}

// Services implements driver.Driver: the root's children that have
// children of their own.
func (d *Driver) Services(ctx context.Context) ([]string, error) {
	conn := d.read.current()
	var names []string
	err := d.call(ctx, "services", func() error {
		var err error
		names, _, err = conn.Children(d.root)
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, svc := range names {
		if backend.ValidateService(svc) != nil {
			continue
		}
		var st *zk.Stat
		err := d.call(ctx, "services", func() error {
			var err error
			_, st, err = conn.Exists(d.servicePath(svc))
			return err
		})
		if err != nil {
			return nil, err
		}
		if st != nil && st.NumChildren > 0 {
			out = append(out, svc)
		}
	}
	slices.Sort(out)
	return out, nil
}
