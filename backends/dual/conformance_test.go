package dual_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/roster-go/roster/backends/etcd/etcdtest"
	_ "github.com/roster-go/roster/backends/redis" // redis:// for the new side
	"github.com/roster-go/roster/backends/redis/redistest"
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/loopback"
	"github.com/roster-go/roster/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pair runs the suite on dual:// over a real etcd (old) and a real Redis
// (new): every fault hook acts on both servers, so a check sees the whole
// registry fail, restart or lose data, as it would with one backend.
type pair struct {
	etcd   *etcdtest.Cluster
	redis  *redistest.Server
	redisH conformance.Harness // for its Wipe and DeleteExternally

	mu      sync.Mutex
	proxies []*loopback.Proxy // the Redis side's links, closed with the test
}

const (
	etcdPrefix  = "/roster-dual"
	etcdOptions = "progress_interval=1s"
	redisQuery  = "sweep=200ms&quiet=2s"
)

func newPair(t *testing.T) *pair {
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

func (p *pair) open(ctx context.Context, etcdURL, redisAddr string) (*registry.Registry, error) {
	return registry.Open(ctx, dualURL(etcdURL, "redis://"+redisAddr+"/0?"+redisQuery, "old"),
		registry.WithResyncInterval(5*time.Second))
}

func (p *pair) Open(ctx context.Context) (*registry.Registry, error) {
	return p.open(ctx, p.etcd.URL(etcdPrefix, etcdOptions), p.redis.Addr())
}

// Config: the etcd harness's bounds, the larger of the two on every count,
// but for ManyLeases.
func (p *pair) Config() conformance.Config {
	return conformance.Config{TTL: 3 * time.Second, ExpirySlack: 1500 * time.Millisecond,
		Propagation: 2 * time.Second, StaleDetect: 6 * time.Second,
		// Every lease is two registrations and two heartbeats, on two
		// servers, one of them inside this race-instrumented process.
		ManyLeases: 150}
}

// OpenLinked cuts both sides' connections at once: a client partitioned
// from its whole registry.
func (p *pair) OpenLinked(ctx context.Context) (*registry.Registry, conformance.Link, error) {
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
	r, err := p.open(ctx, el.URL(etcdPrefix, etcdOptions), rp.Addr())
	if err != nil {
		el.Close()
		return nil, nil, err
	}
	return r, links{el, rp}, nil
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

// OpenTenant implements conformance.Tenants: the tenant's own namespace on
// both sides, an etcd prefix and a Redis key prefix. A dual registry's
// namespace is the pair: two tenants are apart only if they differ on both
// sides, since reads are the union of the two.
func (p *pair) OpenTenant(ctx context.Context, tenant string) (*registry.Registry, error) {
	oldURL := p.etcd.URL(etcdPrefix+"-"+tenant, etcdOptions)
	newURL := "redis://" + p.redis.Addr() + "/0?" + redisQuery + "&prefix=dual-" + tenant
	return registry.Open(ctx, dualURL(oldURL, newURL, "old"), registry.WithResyncInterval(5*time.Second))
}

// TenantsShareNames is true: each pair of prefixes is a namespace of its
// own.
func (p *pair) TenantsShareNames() bool { return true }

func TestConformance(t *testing.T) {
	conformance.Run(t, newPair(t))
}
