package etcd_test

import (
	"context"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/roster-go/roster/internal/servers/etcdtest"
)

// TestMain checks for leaked goroutines with no exceptions: every test
// closes its clients, then its servers.
func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) != "" {
		os.Exit(serveForBench())
	}
	goleak.VerifyTestMain(m)
}

// progress is the stall-detection interval the tests use: short enough
// that a silently stalled watcher goes stale well within the tests'
// bounds, long enough that a busy 2-core machine under -race answers the
// probe within it.
const progress = "progress_interval=1s"

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
