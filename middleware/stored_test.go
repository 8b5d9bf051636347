package middleware_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/policy"
	"github.com/roster-go/roster/registry"
)

// syncBuf is a log sink tests read while the client writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStoredPolicies: the client follows the policy stored for a
// service. One stored before NewClient applies from the first call;
// a change applies within 2 s; a bad record is ignored, logged once,
// and the last good policy kept; deleting it brings back the code's.
func TestStoredPolicies(t *testing.T) {
	logs := &syncBuf{}
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(logs, nil)))
	defer slog.SetDefault(prev)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newEnv(t)
	v1 := startSlow(t, e.writer, "api", 0, "v1")
	v2 := startSlow(t, e.writer, "api", 0, "v2")
	canary := func(pct float64) policy.Policy {
		return policy.Policy{Strategy: "round_robin", Split: []policy.SplitEntry{{Version: "v2", Percent: pct}}}
	}
	if _, err := policy.Put(ctx, e.writer, "api", canary(100)); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, e.reader, middleware.WithPolicy("api", policy.Policy{Strategy: "round_robin"}))
	// calls runs n calls and returns how many reached v2.
	calls := func(n int) int64 {
		before := v2.hits.Load()
		for range n {
			if err := c.Do(ctx, "api", get); err != nil {
				t.Fatal(err)
			}
		}
		return v2.hits.Load() - before
	}
	if got := calls(50); got != 50 {
		t.Fatalf("stored split v2=100%%: v2 took %d of the first 50 calls", got)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		start := time.Now()
		for !ok() {
			if time.Since(start) > 2*time.Second {
				t.Fatalf("%s: not followed within 2s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("%s: followed in %v", what, time.Since(start).Round(time.Millisecond))
	}
	if _, err := policy.Put(ctx, e.writer, "api", canary(0)); err != nil {
		t.Fatal(err)
	}
	waitFor("split v2=0%", func() bool { return calls(20) == 0 })
	if got, _ := c.Policy("api"); len(got.Split) != 1 || got.Split[0].Percent != 0 {
		t.Errorf("Policy = %+v, want the stored one", got)
	}

	rs, err := e.writer.Records()
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`{"split": [{"version": "v2", "percent": 500}]}`, `not json`} {
		if _, err := rs.Put(ctx, registry.Record{Key: policy.Key("api"), Value: []byte(bad)}); err != nil {
			t.Fatal(err)
		}
		waitFor("bad record logged", func() bool { return strings.Count(logs.String(), "stored policy rejected") >= 1 })
	}
	waitFor("second bad record logged", func() bool { return strings.Count(logs.String(), "stored policy rejected") == 2 })
	if got := calls(50); got != 0 {
		t.Errorf("after bad records v2 took %d of 50 calls, want 0 (the last good policy kept)", got)
	}
	if n := strings.Count(logs.String(), "stored policy rejected"); n != 2 {
		t.Errorf("%d log lines for 2 bad records, want one each:\n%s", n, logs)
	}

	if err := policy.Delete(ctx, e.writer, "api"); err != nil {
		t.Fatal(err)
	}
	waitFor("delete", func() bool { n := calls(20); return n > 0 && n < 20 })
	if got, _ := c.Policy("api"); len(got.Split) != 0 || got.Strategy != "round_robin" {
		t.Errorf("after delete Policy = %+v, want the code's", got)
	}
	if v1.hits.Load() == 0 {
		t.Error("v1 never called")
	}

	off := newClient(t, e.reader, middleware.WithStoredPolicies(false), middleware.WithPolicy("api", canary(100)))
	if _, err := policy.Put(ctx, e.writer, "api", canary(0)); err != nil {
		t.Fatal(err)
	}
	// The change has reached a client that follows (c): off had the
	// same chance to see it.
	waitFor("split v2=0% again", func() bool { return calls(20) == 0 })
	before := v2.hits.Load()
	for range 20 {
		if err := off.Do(ctx, "api", get); err != nil {
			t.Fatal(err)
		}
	}
	if got := v2.hits.Load() - before; got != 20 {
		t.Errorf("WithStoredPolicies(false) followed the stored policy: v2 took %d of 20", got)
	}
}
