package redis_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

// One process watching 1,000 services holds a handful of connections (the
// change logs are read by a few shared XREADs, 1,024 logs each), and a
// change of any of them — the first, the last, one added while the reads
// were blocked — reaches its watcher.
func TestHashManyWatchesFewConnections(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	rdb := srv.Client()
	defer rdb.Close()
	const services = 1000
	r := open(t, "redis://"+srv.Addr()+"?client_name=writer")
	obs := open(t, "redis://"+srv.Addr()+"?client_name=watcher&sweep=1s")
	ws := make([]*registry.Watcher, services)
	for i := range ws {
		w, err := obs.Watch(ctx, fmt.Sprintf("many-%04d", i))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if _, err := w.Next(ctx); err != nil {
			t.Fatal(err)
		}
		ws[i] = w
	}
	for _, i := range []int{0, services / 2, services - 1} {
		l, err := r.Register(ctx, registry.Instance{Service: fmt.Sprintf("many-%04d", i), Address: "10.0.0.1:80"}, registry.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if s, err := ws[i].Next(ctx); err != nil || len(s.Instances) != 1 {
			t.Fatalf("watcher %d after register: %v, %v", i, s.Instances, err)
		}
		if err := l.Deregister(ctx); err != nil {
			t.Fatal(err)
		}
		if s, err := ws[i].Next(ctx); err != nil || len(s.Instances) != 0 {
			t.Fatalf("watcher %d after deregister: %v, %v", i, s.Instances, err)
		}
	}
	n := 0
	for _, name := range clientNames(ctx, t, rdb) {
		if name == "watcher" {
			n++
		}
	}
	// One shared read, the two connections of relists and sweeps, the
	// main client's for the registry's periodic resyncs, and the two of
	// the Registry's one watch of overrides (its subscription and its
	// polls): a constant, whatever the number of services.
	t.Logf("%d connections for %d watched services", n, services)
	if n > 6 || n == 0 {
		t.Fatalf("%d connections for %d watched services", n, services)
	}
}
