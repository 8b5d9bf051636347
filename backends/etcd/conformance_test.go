package etcd_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	_ "github.com/roster-go/roster/backends/etcd" // etcd:// and etcds://
	"github.com/roster-go/roster/backends/etcd/etcdtest"
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/registry"
)

// TestMain checks for leaked goroutines with no exceptions: every test
// closes its clients, then its servers.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// progress is the stall-detection interval the tests use: short enough
// that a silently stalled watcher goes stale well within StaleDetect, long
// enough that a busy 2-core machine under -race answers the probe within it.
const progress = "progress_interval=1s"

// harness runs the suite on one embedded etcd member.
type harness struct {
	c      *etcdtest.Cluster
	cli    *clientv3.Client // for DeleteExternally
	prefix string
}

func (h *harness) url() string { return h.c.URL(h.prefix, progress) }

func (h *harness) Open(ctx context.Context) (*registry.Registry, error) {
	return registry.Open(ctx, h.url(), registry.WithResyncInterval(5*time.Second))
}

func (h *harness) Config() conformance.Config {
	// Real etcd propagates in milliseconds (see docs/bench/etcd.md); the
	// bounds here leave room for a 2-core machine shared with other test
	// runs under -race, where a new client's first call can take a second.
	return conformance.Config{
		// 3s: the TTL floor is 2s, and one slow heartbeat round must not
		// lose the lease on a loaded machine.
		TTL: 3 * time.Second,
		// The server's expiry loop runs every 0.5s; the rest is headroom.
		ExpirySlack: 1500 * time.Millisecond,
		Propagation: 2 * time.Second,
		// 2×TTL, the default: a cut-off watcher is reported within about
		// 2×progress_interval, or at once when the connection drops.
		StaleDetect: 6 * time.Second,
		// The server runs inside this test binary, under the race detector,
		// beside the other packages' tests: there, 1,000 registrations at
		// once (2,000 Raft proposals) overrun the 5s request timeout.
		// Without -race it holds 1,000 (docs/reliability.md).
		ManyLeases: 300,
	}
}

func (h *harness) OpenLinked(ctx context.Context) (*registry.Registry, conformance.Link, error) {
	l, err := h.c.NewLink()
	if err != nil {
		return nil, nil, err
	}
	r, err := registry.Open(ctx, l.URL(h.prefix, progress), registry.WithResyncInterval(5*time.Second))
	if err != nil {
		l.Close()
		return nil, nil, err
	}
	return r, l, nil
}

func (h *harness) Restart(ctx context.Context, keepData bool) error {
	return h.c.Restart(ctx, keepData)
}

func (h *harness) Wipe(ctx context.Context) error { return h.c.Wipe(ctx) }

func (h *harness) DeleteExternally(ctx context.Context, in registry.Instance) error {
	_, err := h.cli.Delete(ctx, h.prefix+"/"+in.Service+"/"+in.ID)
	return err
}

// startCluster starts an embedded cluster that the test closes.
func startCluster(t testing.TB, cfg etcdtest.Config) *etcdtest.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg.Dir = t.TempDir()
	c, err := etcdtest.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

func TestConformance(t *testing.T) {
	c := startCluster(t, etcdtest.Config{})
	cli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close() // before the cluster's cleanup
	conformance.Run(t, &harness{c: c, cli: cli, prefix: "/roster-conformance"})
}
