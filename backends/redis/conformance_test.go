package redis_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	rredis "github.com/roster-go/roster/backends/redis"
	"github.com/roster-go/roster/backends/redis/redistest"
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/loopback"
	"github.com/roster-go/roster/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// harness runs the suite against one private redis-server.
type harness struct {
	srv   *redistest.Server
	query string // driver options, e.g. "layout=keys&poll=100ms"
	cfg   conformance.Config

	mu      sync.Mutex
	proxies []*loopback.Proxy
}

func (h *harness) url(addr string) string { return "redis://" + addr + "/0?" + h.query }

func (h *harness) Open(ctx context.Context) (*registry.Registry, error) {
	return registry.Open(ctx, h.url(h.srv.Addr()), registry.WithResyncInterval(time.Second))
}

func (h *harness) Config() conformance.Config { return h.cfg }

// OpenLinked puts a TCP proxy between the registry and the server: the
// proxy is the partition.
func (h *harness) OpenLinked(ctx context.Context) (*registry.Registry, conformance.Link, error) {
	p, err := loopback.NewProxy(h.srv.Addr())
	if err != nil {
		return nil, nil, err
	}
	h.mu.Lock()
	h.proxies = append(h.proxies, p)
	h.mu.Unlock()
	r, err := registry.Open(ctx, h.url(p.Addr()), registry.WithResyncInterval(time.Second))
	if err != nil {
		return nil, nil, err
	}
	return r, p, nil
}

func (h *harness) closeProxies() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.proxies {
		_ = p.Close()
	}
	h.proxies = nil
}

func (h *harness) Restart(ctx context.Context, keep bool) error { return h.srv.Restart(ctx, keep) }

func (h *harness) Wipe(ctx context.Context) error { return h.srv.FlushAll(ctx) }

// DeleteExternally removes the instance's key as an operator would: DEL
// on the record, nothing else.
func (h *harness) DeleteExternally(ctx context.Context, in registry.Instance) error {
	c := h.srv.Client()
	defer c.Close()
	if !strings.Contains(h.query, "layout=keys") {
		return c.Del(ctx, "roster:{"+in.Service+"}:i:"+in.ID).Err()
	}
	keys, err := c.Keys(ctx, "service:"+in.Service+":*").Result()
	if err != nil {
		return err
	}
	for _, k := range keys {
		v, _ := c.Get(ctx, k).Result()
		if strings.Contains(v, "roster_id="+in.ID+",") || strings.Contains(v, "roster_id="+in.ID+`"`) {
			return c.Del(ctx, k).Err()
		}
	}
	return fmt.Errorf("no key holds %s", in.ID)
}

func runConformance(t *testing.T, query string, cfg conformance.Config, args ...string) {
	h := &harness{srv: redistest.Start(t, args...), query: query, cfg: cfg}
	t.Cleanup(h.closeProxies)
	conformance.Run(t, h)
}

// Timing bounds: the backend's own bound (one sweep or poll interval) plus
// a margin for a CI machine whose 2 cores are shared and slowed by -race.
// Typical figures are far lower (docs/bench/redis.md).

func TestConformanceHash(t *testing.T) {
	t.Parallel()
	runConformance(t, "layout=hash&sweep=200ms&quiet=2s", conformance.Config{
		TTL: time.Second, ExpirySlack: 200*time.Millisecond + 500*time.Millisecond, Propagation: time.Second,
	})
}

// The keys layout must work with keyspace notifications off (the default
// server configuration): polling alone.
func TestConformanceKeys(t *testing.T) {
	t.Parallel()
	runConformance(t, "layout=keys&poll=100ms&notify=off", conformance.Config{
		TTL: time.Second, ExpirySlack: 100*time.Millisecond + 900*time.Millisecond, Propagation: time.Second,
	})
}

var _ = rredis.LayoutHash
