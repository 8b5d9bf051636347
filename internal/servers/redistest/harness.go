package redistest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	rredis "github.com/roster-go/roster/backends/redis"
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/backend"
	"github.com/roster-go/roster/internal/loopback"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// Harness returns the conformance harness of s: registries open
// redis://<addr>/0?<query>, where query holds driver options (such as
// "layout=keys&poll=100ms"), and cfg declares the timings. It has every
// fault hook: partitions (TCP proxies), restarts, wipes (FLUSHALL) and
// external deletes (DEL of the instance's key).
func (s *Server) Harness(t testing.TB, query string, cfg conformance.Config) conformance.Harness {
	h := newHarness(t, "redis://"+s.Addr()+"/0?"+query, cfg, s.Client)
	return &restartable{h, s.Restart}
}

// Harness returns the conformance harness of the cluster, as Server.Harness
// does; its registries are given every node as a seed, and a restart
// restarts every node and waits for the cluster to be whole again.
func (c *Cluster) Harness(t testing.TB, query string, cfg conformance.Config) conformance.Harness {
	h := newHarness(t, "redis+cluster://"+strings.Join(c.Addrs(), ",")+"?"+query, cfg,
		func() redis.UniversalClient { return c.Client() })
	return &restartable{h, c.Restart}
}

// Harness returns the conformance harness of the failover group, as
// Server.Harness does, but without restarts: Sentinel answers a master
// that goes away by promoting the replica, so a restart in place is not
// what happens to this deployment. It declares the restart checks in
// cfg.Skip; test a failover instead (Kill the Master).
func (f *Failover) Harness(t testing.TB, query string, cfg conformance.Config) conformance.Harness {
	cfg.Skip = maps.Clone(cfg.Skip)
	if cfg.Skip == nil {
		cfg.Skip = map[string]string{}
	}
	for _, c := range []string{"RestartKeepingData", "RestartLosingData"} {
		cfg.Skip[c] = "a Sentinel deployment does not restart its master in place: Sentinel fails over to the replica"
	}
	return newHarness(t, "redis+sentinel://"+f.Sentinel.Addr()+"/0?master="+f.Name+"&"+query, cfg,
		func() redis.UniversalClient {
			return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: f.Name, SentinelAddrs: []string{f.Sentinel.Addr()},
				SentinelPassword: f.Sentinel.pass})
		})
}

// harness serves every topology: the URL says which, admin returns a
// client for the fault hooks.
type harness struct {
	url   string
	cfg   conformance.Config
	admin func() redis.UniversalClient

	mu    sync.Mutex
	links []*link
}

func newHarness[C redis.UniversalClient](t testing.TB, rawURL string, cfg conformance.Config, admin func() C) *harness {
	if cfg.ResyncInterval == 0 {
		cfg.ResyncInterval = time.Second
	}
	h := &harness{url: rawURL, cfg: cfg, admin: func() redis.UniversalClient { return admin() }}
	t.Cleanup(h.close)
	return h
}

type restartable struct {
	*harness
	restart func(ctx context.Context, keepData bool) error
}

func (h *restartable) Restart(ctx context.Context, keepData bool) error {
	return h.restart(ctx, keepData)
}

func (h *harness) MakeDriver(ctx context.Context) (driver.Driver, error) {
	return backend.OpenURL(ctx, h.url)
}

// URL is the harness's URL: the suite opens its observers with it.
func (h *harness) URL() string { return h.url }

func (h *harness) Config() conformance.Config { return h.cfg }

// MakeTenantDriver makes a driver whose keys start with the prefix
// tenant: the key prefix is the Redis backend's namespace.
func (h *harness) MakeTenantDriver(ctx context.Context, tenant string) (driver.Driver, error) {
	u, err := url.Parse(h.url)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("prefix", tenant)
	u.RawQuery = q.Encode()
	return backend.OpenURL(ctx, u.String())
}

// TenantsShareNames is true: each prefix is a namespace of its own.
func (h *harness) TenantsShareNames() bool { return true }

// MakeLinkedDriver makes a driver whose every connection (to a server, a
// cluster node or a Sentinel, whichever address the client learns) goes
// through a TCP proxy of its own: cutting the proxies is the partition.
func (h *harness) MakeLinkedDriver(context.Context) (driver.Driver, conformance.Link, error) {
	u, err := url.Parse(h.url)
	if err != nil {
		return nil, nil, err
	}
	copts, o, err := rredis.ParseURL(u)
	if err != nil {
		return nil, nil, err
	}
	l := &link{connected: true, proxies: map[string]*loopback.Proxy{}}
	h.mu.Lock()
	h.links = append(h.links, l)
	h.mu.Unlock()
	copts.Dialer = l.dial
	d, err := rredis.New(copts, o)
	if err != nil {
		return nil, nil, err
	}
	return d, l, nil
}

func (h *harness) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.links {
		l.close()
	}
	h.links = nil
}

func (h *harness) Wipe(ctx context.Context) error {
	c := h.admin()
	defer c.Close()
	return forEachMaster(ctx, c, func(ctx context.Context, m *redis.Client) error { return m.FlushAll(ctx).Err() })
}

// DeleteExternally removes the instance's key as an operator would: DEL
// on the record, nothing else.
func (h *harness) DeleteExternally(ctx context.Context, in registry.Instance) error {
	u, err := url.Parse(h.url)
	if err != nil {
		return err
	}
	_, o, err := rredis.ParseURL(u)
	if err != nil {
		return err
	}
	c := h.admin()
	defer c.Close()
	if o.Layout == rredis.LayoutHash {
		return c.Del(ctx, o.Prefix+":{"+in.Service+"}:i:"+in.ID).Err()
	}
	found := false
	err = forEachMaster(ctx, c, func(ctx context.Context, m *redis.Client) error {
		keys, err := m.Keys(ctx, o.Prefix+":"+in.Service+":*").Result()
		for _, k := range keys {
			v, _ := m.Get(ctx, k).Result()
			if strings.Contains(v, "roster_id="+in.ID+",") || strings.Contains(v, "roster_id="+in.ID+`"`) {
				found = true
				return m.Del(ctx, k).Err()
			}
		}
		return err
	})
	if err == nil && !found {
		err = fmt.Errorf("redistest: no key holds %s", in.ID)
	}
	return err
}

// forEachMaster runs fn on every master of c: the cluster's, or c itself.
func forEachMaster(ctx context.Context, c redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, fn)
	}
	return fn(ctx, c.(*redis.Client))
}

// link is one registry's connections: one proxy per address it dials.
type link struct {
	mu        sync.Mutex
	connected bool
	closed    bool
	proxies   map[string]*loopback.Proxy
}

func (l *link) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	l.mu.Lock()
	p, ok := l.proxies[addr]
	if l.closed {
		l.mu.Unlock()
		return nil, net.ErrClosed
	}
	if !ok {
		var err error
		if p, err = loopback.NewProxy(addr); err != nil {
			l.mu.Unlock()
			return nil, err
		}
		_ = p.SetConnected(ctx, l.connected)
		l.proxies[addr] = p
	}
	l.mu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, network, p.Addr())
}

// SetConnected cuts (false) or restores (true) every connection of the
// registry, present and future.
func (l *link) SetConnected(ctx context.Context, connected bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.connected = connected
	for _, p := range l.proxies {
		_ = p.SetConnected(ctx, connected)
	}
	return nil
}

func (l *link) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for _, p := range l.proxies {
		_ = p.Close()
	}
}

// WriteForeign writes in as a script following the keys layout's article
// would: SET of the article's JSON under the address's key, with no
// expiry. The hash layout keys records by ID: errors.ErrUnsupported.
func (h *harness) WriteForeign(ctx context.Context, in registry.Instance) (func(context.Context) error, error) {
	u, err := url.Parse(h.url)
	if err != nil {
		return nil, err
	}
	_, o, err := rredis.ParseURL(u)
	if err != nil {
		return nil, err
	}
	if o.Layout == rredis.LayoutHash {
		return nil, errors.ErrUnsupported
	}
	key := o.Prefix + ":" + in.Service + ":" + in.Address
	val := fmt.Sprintf(`{"addr":%q,"version":"","weight":"%d","metadata":"roster_id=%s"}`, in.Address, in.Weight, in.ID)
	c := h.admin()
	defer c.Close()
	if err := c.Set(ctx, key, val, 0).Err(); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		c := h.admin()
		defer c.Close()
		return c.Del(ctx, key).Err()
	}, nil
}
