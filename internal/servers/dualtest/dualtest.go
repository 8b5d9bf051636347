// Package dualtest is the conformance harness of the dual backend. Its
// old side is a real etcd, its new side a real Redis:
//
//	conformance.Run(t, dualtest.NewHarness(t))
//
// Every fault hook acts on both servers. A check so sees the whole
// registry fail, restart or lose data, as with one backend.
package dualtest

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"testing"
	"time"

	_ "github.com/roster-go/roster/backends/dual" // dual:// for the harness
	_ "github.com/roster-go/roster/backends/etcd" // etcd:// for the old side
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/backend"
	"github.com/roster-go/roster/internal/loopback"
	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/internal/servers/redistest" // registers redis://
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

const (
	etcdPrefix  = "/roster-dual"
	etcdOptions = "progress_interval=1s"
	redisQuery  = "sweep=200ms&quiet=2s"
)

// NewHarness starts an etcd server and a Redis server, closed when t
// ends, and returns the harness of dual:// over them, with every fault
// hook (Partitioner, Restarter, Wiper, ExternalDeleter) and Tenants.
func NewHarness(t testing.TB) conformance.Harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := etcdtest.Start(ctx, etcdtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	s := redistest.Start(t)
	p := &pair{etcd: cl, redis: s, redisH: s.Harness(t, redisQuery, conformance.Config{})}
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, rp := range p.proxies {
			rp.Close()
		}
	})
	return p
}

type pair struct {
	etcd   *etcdtest.Cluster
	redis  *redistest.Server
	redisH conformance.Harness // for its Wipe and DeleteExternally

	mu      sync.Mutex
	proxies []*loopback.Proxy // the Redis side's links, closed with the test
}

// dualURL is the dual:// URL over two sides, reading the old side first.
func dualURL(oldURL, newURL string) string {
	return "dual://?" + url.Values{"old": {oldURL}, "new": {newURL}, "prefer": {"old"}}.Encode()
}

func (p *pair) urlOn(etcdURL, redisAddr string) string {
	return dualURL(etcdURL, "redis://"+redisAddr+"/0?"+redisQuery)
}

// URL is the dual:// URL of the harness's registries.
func (p *pair) URL() string { return p.urlOn(p.etcd.URL(etcdPrefix, etcdOptions), p.redis.Addr()) }

func (p *pair) MakeDriver(ctx context.Context) (driver.Driver, error) {
	return backend.OpenURL(ctx, p.URL())
}

// Config: the etcd harness's bounds, the larger of the two on every count,
// but for ManyLeases.
func (p *pair) Config() conformance.Config {
	return conformance.Config{TTL: 3 * time.Second, ExpirySlack: 1500 * time.Millisecond,
		Propagation: 2 * time.Second, StaleDetect: 6 * time.Second, ResyncInterval: 5 * time.Second,
		// Every lease is two registrations and two heartbeats, on two
		// servers, one of them inside this race-instrumented process.
		ManyLeases: 150}
}

// MakeLinkedDriver cuts both sides' connections at once: a client
// partitioned from its whole registry.
func (p *pair) MakeLinkedDriver(ctx context.Context) (driver.Driver, conformance.Link, error) {
	el, err := p.etcd.NewLink()
	if err != nil {
		return nil, nil, err
	}
	rp, err := loopback.NewProxy(p.redis.Addr())
	if err != nil {
		el.Close()
		return nil, nil, err
	}
	p.mu.Lock()
	p.proxies = append(p.proxies, rp)
	p.mu.Unlock()
	d, err := backend.OpenURL(ctx, p.urlOn(el.URL(etcdPrefix, etcdOptions), rp.Addr()))
	if err != nil {
		el.Close()
		return nil, nil, err
	}
	return d, links{el, rp}, nil
}

type links struct {
	etcd  *etcdtest.Link
	redis *loopback.Proxy
}

func (l links) SetConnected(ctx context.Context, ok bool) error {
	return errors.Join(l.etcd.SetConnected(ctx, ok), l.redis.SetConnected(ctx, ok))
}

func (p *pair) Restart(ctx context.Context, keepData bool) error {
	return errors.Join(p.etcd.Restart(ctx, keepData), p.redis.Restart(ctx, keepData))
}

func (p *pair) Wipe(ctx context.Context) error {
	return errors.Join(p.etcd.Wipe(ctx), p.redisH.(conformance.Wiper).Wipe(ctx))
}

func (p *pair) DeleteExternally(ctx context.Context, in registry.Instance) error {
	cli, err := p.etcd.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	_, err = cli.Delete(ctx, etcdPrefix+"/"+in.Service+"/"+in.ID)
	return errors.Join(err, p.redisH.(conformance.ExternalDeleter).DeleteExternally(ctx, in))
}

// MakeTenantDriver implements conformance.Tenants: the tenant's own
// namespace on both sides, an etcd prefix and a Redis key prefix. A dual
// registry's namespace is the pair: two tenants are apart only if they
// differ on both sides, since reads are the union of the two.
func (p *pair) MakeTenantDriver(ctx context.Context, tenant string) (driver.Driver, error) {
	oldURL := p.etcd.URL(etcdPrefix+"-"+tenant, etcdOptions)
	newURL := "redis://" + p.redis.Addr() + "/0?" + redisQuery + "&prefix=dual-" + tenant
	return backend.OpenURL(ctx, dualURL(oldURL, newURL))
}

// TenantsShareNames is true: each pair of prefixes is a namespace of its
// own.
func (p *pair) TenantsShareNames() bool { return true }
