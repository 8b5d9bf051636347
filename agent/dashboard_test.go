package agent_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/roster-go/roster/agent"
	"github.com/roster-go/roster/registry"
)

// browser starts headless Chromium (Debian's chromium package; CI
// installs it) and returns a tab context.
func browser(t *testing.T) context.Context {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (scripts/test.sh installs it): %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1400, 420))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	return ctx
}

// appears waits (polling in the page) until the JavaScript expression is
// true and returns how long that took.
func appears(t *testing.T, ctx context.Context, what, expr string) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return time.Since(start)
}

func row(id string) string {
	return fmt.Sprintf(`document.querySelector('tr[data-id=%q]') !== null`, id)
}

// TestDashboardInChromium: the page lists the instances, shows an added
// and a removed instance within a second without a reload, renders
// hostile metadata as text, and shows the stale banner when the registry
// is killed. It saves a screenshot (to $ROSTER_SCREENSHOT_DIR if set).
func TestDashboardInChromium(t *testing.T) {
	b := startRedis(t)
	f := newFixture(t, b, agent.Config{})
	ctx := browser(t)
	hostile := `<img src=x onerror="window.__xss=1">`
	f.register(registry.Instance{ID: "a", Service: "api", Address: "10.0.0.1:80", Version: "v1.4.2", Zone: "hz-1", Weight: 100,
		Tags: []string{"canary"}, Metadata: map[string]string{"note": hostile}})
	leaseB := f.register(registry.Instance{ID: "b", Service: "api", Address: "10.0.0.2:80", Version: "v1.4.2", Zone: "hz-2", Weight: 200})
	f.waitInstances("api", 10*time.Second, has(2))
	for range 60 { // picks and latencies to show
		p := f.pick(agent.PickRequest{Service: "api", Strategy: "weighted_round_robin"})
		f.report(p.Token, "success", float64(3+len(p.Instance.ID)%2*4))
	}

	if err := chromedp.Do(ctx, chromedp.Navigate(f.url+"/")); err != nil {
		t.Fatal(err)
	}
	appears(t, ctx, "the instances", row("a")+" && "+row("b"))
	xss, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__xss === 1 || document.querySelector('td img') !== null`))
	if err != nil {
		t.Fatal(err)
	}
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('tr[data-id="a"]').textContent`))
	if err != nil || xss || !contains(text, hostile) {
		t.Errorf("hostile metadata: ran or not shown as text (row %q, err %v)", text, err)
	}

	f.register(registry.Instance{ID: "c", Service: "api", Address: "10.0.0.3:80", Zone: "hz-1", Weight: 100})
	if d := appears(t, ctx, "the added instance", row("c")); d > time.Second {
		t.Errorf("the added instance showed after %v", d)
	} else {
		t.Logf("added instance shown after %v", d)
	}
	if err := leaseB.Deregister(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := appears(t, ctx, "the removed instance", "!("+row("b")+")"); d > time.Second {
		t.Errorf("the removed instance went after %v", d)
	} else {
		t.Logf("removed instance gone after %v", d)
	}

	b.kill()
	d := appears(t, ctx, "the stale banner", `!document.getElementById('banner').hidden`)
	t.Logf("stale banner shown %v after the registry was killed", d)
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("ROSTER_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.WriteFile(filepath.Join(dir, "agent-dashboard.png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}
}
