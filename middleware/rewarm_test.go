package middleware_test

import (
	"context"
	"testing"
	"time"

	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/selector"
)

// TestReadmittedInstanceSlowStarts: an instance the quarantine readmits
// gets its traffic back gradually (the selector's slow start, restarted
// by the readmission), not its full share at once.
func TestReadmittedInstanceSlowStarts(t *testing.T) {
	for _, slow := range []bool{true, false} {
		e := newEnv(t)
		startBackend(t, e.writer, "api", 100)
		bad := startBackend(t, e.writer, "api", 100)
		bad.status.Store(503)
		q := middleware.NewQuarantine(middleware.QuarantineConfig{ConsecutiveFailures: 3, BaseEjection: 50 * time.Millisecond, MaxEjectedPercent: 50})
		opts := []selector.Option{selector.WithStrategy(selector.RoundRobin)} // the default slow start
		if !slow {
			opts = append(opts, selector.WithSlowStart(selector.SlowStart{}))
		}
		c := newClient(t, e.reader, middleware.WithQuarantine(q), middleware.WithSelector(opts...))
		if errs := load(c, "api", 1, 100, nil); len(errs) > 0 {
			t.Fatal(errs[0])
		}
		if len(q.Ejected("api")) != 1 {
			t.Fatalf("ejected %v, want the failing instance", q.Ejected("api"))
		}
		bad.status.Store(200)
		deadline := time.Now().Add(10 * time.Second)
		for len(q.Ejected("api")) > 0 {
			if time.Now().After(deadline) {
				t.Fatal("the recovered instance was not readmitted")
			}
			if err := c.Do(context.Background(), "api", get); err != nil {
				t.Fatal(err)
			}
		}
		hits := bad.hits.Load()
		const calls = 1000
		for range calls {
			if err := c.Do(context.Background(), "api", get); err != nil {
				t.Fatal(err)
			}
		}
		share := float64(bad.hits.Load()-hits) / calls
		t.Logf("slow start %v: the readmitted instance got %.3f of the next %d calls", slow, share, calls)
		// Round robin over two: 0.5 without a ramp; with one, 0.1–0.2 of
		// its weight in the first seconds of a 30 s ramp (≈0.09–0.17).
		if slow && share > 0.3 || !slow && share < 0.4 {
			t.Errorf("slow start %v: readmitted instance got %.3f of the calls", slow, share)
		}
	}
}
