package agent_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/roster-go/roster/agent"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

var update = flag.Bool("update", false, "write the console's screenshots into docs/img")

// screenshot saves the page as docs/img/name with -update, else in a
// temporary directory (so the step still runs).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if *update {
		dir = filepath.Join("..", "docs", "img")
	}
	if err := os.WriteFile(filepath.Join(dir, name), shot, 0o644); err != nil {
		t.Fatal(err)
	}
}

// js evaluates a JavaScript expression in the page.
func js[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// setInput types into a filter as a user does: the value, then an input
// event.
func setInput(t *testing.T, ctx context.Context, id, value string) {
	t.Helper()
	js[bool](t, ctx, fmt.Sprintf(`(() => { const e = document.getElementById(%q); e.value = %q; e.dispatchEvent(new Event("input")); return true })()`, id, value))
}

// click clicks the first element matching a CSS selector.
func click(t *testing.T, ctx context.Context, sel string) {
	t.Helper()
	if ok := js[bool](t, ctx, fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false; e.click(); return true })()`, sel)); !ok {
		t.Fatalf("nothing to click at %s", sel)
	}
}

// noSideScroll fails the test if the page scrolls sideways.
func noSideScroll(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	w := js[[]int](t, ctx, `[document.documentElement.scrollWidth, document.documentElement.clientWidth]`)
	if w[0] > w[1] {
		t.Errorf("%s: the page scrolls sideways: scrollWidth %d > clientWidth %d", what, w[0], w[1])
	} else {
		t.Logf("%s: scrollWidth %d ≤ clientWidth %d", what, w[0], w[1])
	}
}

func sectionRows(service string) string {
	return fmt.Sprintf(`[...document.querySelectorAll('section[data-service=%q] tbody tr')].map(r => r.dataset.id).join(",")`, service)
}

// outOfPicks picks until 60 picks in a row miss id (by chance, with
// three equal instances: (2/3)⁶⁰, 1 in 10¹⁰) and returns how long after
// start the first of them was: when id's traffic went to 0.
func outOfPicks(t *testing.T, f *fixture, id string, start time.Time) time.Duration {
	t.Helper()
	var first time.Time
	for run := 0; run < 60; {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%s still picked 10 s after it was drained", id)
		}
		at := time.Now()
		if p := f.pick(agent.PickRequest{Service: "api"}); p.Instance.ID == id {
			run = 0
			continue
		}
		if run == 0 {
			first = at
		}
		run++
	}
	return first.Sub(start)
}

// TestConsoleInChromium, on real Redis: the console lists the catalog,
// reads at 1,280 px and 375 px without sideways scrolling, filters by
// zone, tag, health and service, opens an instance, records a join and
// a leave, shows hostile metadata as text, drives drain, weight,
// maintenance, restore and deregister through its buttons (registry
// overrides), and tells the registry is down. With
// -update it saves its screenshots into docs/img.
func TestConsoleInChromium(t *testing.T) {
	srv := redistest.Start(t)
	b := backend{url: "redis://" + srv.Addr() + "/0?dial_timeout=300ms&read_timeout=500ms", kill: srv.Kill}
	f := newFixture(t, b, agent.Config{AllowActions: true, ProbeInterval: 200 * time.Millisecond})
	ctx := browser(t)
	long := strings.Repeat("x", 300)
	hostile := `<script>window.__xss=1</script><img src=x onerror="window.__xss=2">`
	f.register(registry.Instance{ID: "api-a", Service: "api", Address: "10.0.0.1:8080", Version: "v1.4.2", Zone: "hz-1", Weight: 100,
		Tags: []string{"canary"}, Metadata: map[string]string{"note": hostile, "build": long},
		Endpoints: []registry.Endpoint{{Name: "http", Address: "10.0.0.1:8080", Protocol: "http"}, {Name: "grpc", Address: "10.0.0.1:9090", Protocol: "grpc"}}})
	f.register(registry.Instance{ID: "api-b", Service: "api", Address: "10.0.0.2:8080", Version: "v1.5.0", Zone: "hz-2", Weight: 100})
	f.register(registry.Instance{ID: "web-1", Service: "web", Address: "10.0.1.1:80", Version: "2026.11", Zone: "hz-1", Weight: 100})
	f.register(registry.Instance{ID: "billing-1", Service: "billing", Address: "10.0.2.1:80", Zone: "hz-2", Weight: 50})
	var local registry.Instance
	if st := do(t, "POST", f.url+"/v1/register", agent.RegisterRequest{Instance: registry.Instance{ID: "api-local", Service: "api", Address: "127.0.0.1:8081", Zone: "hz-1", Weight: 100}, TTL: "5s"}, &local); st != http.StatusOK {
		t.Fatalf("register through the agent: %d", st)
	}
	f.waitInstances("api", 10*time.Second, has(3))
	for range 60 {
		p := f.pick(agent.PickRequest{Service: "api"})
		f.report(p.Token, "success", float64(2+len(p.Instance.ID)%3*3))
	}

	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900), chromedp.Navigate(f.url+"/")); err != nil {
		t.Fatal(err)
	}
	appears(t, ctx, "the catalog, with services nobody picked from",
		`document.querySelector('section[data-service="billing"] tr[data-id="billing-1"]') !== null && `+row("api-a")+" && "+row("api-local"))
	noSideScroll(t, ctx, "1280 px")
	screenshot(t, ctx, "console-fleet.png")

	if js[bool](t, ctx, `window.__xss !== undefined || document.querySelector('#services script, #services img') !== null`) {
		t.Error("hostile metadata ran or became markup")
	}
	if text := js[string](t, ctx, `document.querySelector('tr[data-id="api-a"]').textContent`); !strings.Contains(text, hostile) {
		t.Errorf("hostile metadata not shown as text: %q", text)
	}

	setInput(t, ctx, "f-zone", "hz-2")
	appears(t, ctx, "zone filter", sectionRows("api")+` === "api-b"`)
	setInput(t, ctx, "f-zone", "")
	setInput(t, ctx, "f-tag", "canary")
	appears(t, ctx, "tag filter", sectionRows("api")+` === "api-a" && `+sectionRows("web")+` === ""`)
	setInput(t, ctx, "f-tag", "")
	setInput(t, ctx, "f-version", "v1.5.0")
	appears(t, ctx, "version filter", sectionRows("api")+` === "api-b"`)
	setInput(t, ctx, "f-version", "")
	setInput(t, ctx, "f-service", "bill")
	appears(t, ctx, "service search", `[...document.querySelectorAll('section')].map(s => s.dataset.service).join() === "billing"`)
	setInput(t, ctx, "f-service", "")
	appears(t, ctx, "all services again", `document.querySelectorAll('section').length === 3`)

	click(t, ctx, `tr[data-id="api-a"]`)
	appears(t, ctx, "the instance view", `!document.getElementById('detail').hidden && document.getElementById('detail-body').textContent.includes("10.0.0.1:9090")`)
	detail := js[string](t, ctx, `document.getElementById('detail-body').textContent`)
	for _, want := range []string{hostile, long, "grpc", "v1.4.2", "canary", "Held by its own process", "picks"} {
		if !strings.Contains(detail, want) {
			t.Errorf("instance view lacks %.40q", want)
		}
	}
	if js[bool](t, ctx, `window.__xss !== undefined || document.querySelector('#detail script, #detail img') !== null`) {
		t.Error("hostile metadata ran or became markup in the instance view")
	}
	noSideScroll(t, ctx, "1280 px, instance view open")
	screenshot(t, ctx, "console-instance.png")
	click(t, ctx, "#close")

	lease := f.register(registry.Instance{ID: "api-c", Service: "api", Address: "10.0.0.3:8080", Zone: "hz-1", Weight: 100})
	appears(t, ctx, "the joined instance", row("api-c"))
	if err := lease.Deregister(context.Background()); err != nil {
		t.Fatal(err)
	}
	d := appears(t, ctx, "the join and the leave in the history",
		`[...document.querySelectorAll('section[data-service="api"] .history li')].map(l => l.dataset.kind + ":" + (l.querySelector('code') || {}).textContent).join() .startsWith("left:api-c,joined:api-c")`)
	t.Logf("leave in the history after %v", d)

	// Actions, through the page's buttons.
	weightIs := func(id string, w uint32) string {
		return fmt.Sprintf(`(() => { const td = [...document.querySelectorAll('tr[data-id=%q] td')].find(td => td.dataset.label === "weight"); return !!td && td.textContent === "%d" })()`, id, w)
	}
	notice := func(sub string) string {
		return fmt.Sprintf(`document.getElementById('notice').textContent.includes(%q)`, sub)
	}
	click(t, ctx, `tr[data-id="api-b"]`)
	appears(t, ctx, "api-b's view", `document.getElementById('detail').dataset.id === "api-b"`)
	click(t, ctx, `#detail button[data-action="drain"]`)
	start := time.Now()
	appears(t, ctx, "drain done", notice("drain api/api-b: drained"))
	if d := outOfPicks(t, f, "api-b", start); d > time.Second {
		t.Errorf("drained through the console: out of picks only %v after the click, want within a second", d)
	} else {
		t.Logf("drained through the console: out of picks %v after the click", d)
	}
	appears(t, ctx, "drained, still registered", weightIs("api-b", 0))
	appears(t, ctx, "the override in the instance view", `document.getElementById('detail-body').textContent.includes("roster agent console")`)
	screenshot(t, ctx, "console-actions.png")
	setInput(t, ctx, "weight-value", "7")
	click(t, ctx, `#detail button[data-action="weight"]`)
	appears(t, ctx, "weight set", weightIs("api-b", 7))
	click(t, ctx, `#detail button[data-action="maint"]`)
	appears(t, ctx, "in maintenance: out of the list, held below it",
		"!("+row("api-b")+`) && document.querySelector('section[data-service="api"] .held li[data-target="api-b"]') !== null`)
	click(t, ctx, `section[data-service="api"] .held li[data-target="api-b"] button[data-action="restore"]`)
	appears(t, ctx, "restored", weightIs("api-b", 100))
	click(t, ctx, "#close")

	click(t, ctx, `tr[data-id="api-local"]`)
	appears(t, ctx, "the local instance's view", `document.getElementById('detail-body').textContent.includes("this agent")`)
	click(t, ctx, `#detail button[data-action="deregister"]`)
	if js[bool](t, ctx, notice("deregister")) {
		t.Error("deregister ran on the first click, without confirmation")
	}
	click(t, ctx, `#detail button[data-action="deregister"]`)
	appears(t, ctx, "deregistered", "!("+row("api-local")+")")
	snap, err := f.writer.Lookup(context.Background(), "api")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := snap.Find("api-local"); ok {
		t.Error("api-local still in the registry after deregister")
	}
	click(t, ctx, "#close")

	if err := chromedp.Do(ctx, chromedp.EmulateViewport(375, 800, chromedp.EmulateMobile), chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	appears(t, ctx, "the catalog on a phone", row("api-a")+" && "+row("billing-1"))
	noSideScroll(t, ctx, "375 px")
	screenshot(t, ctx, "console-phone.png")
	click(t, ctx, `tr[data-id="api-a"]`)
	appears(t, ctx, "the instance view on a phone", `!document.getElementById('detail').hidden`)
	noSideScroll(t, ctx, "375 px, instance view open")
	click(t, ctx, "#close")

	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatal(err)
	}
	b.kill()
	d = appears(t, ctx, "the registry-down banner", `!document.getElementById('banner').hidden && document.getElementById('banner').textContent.includes("down since")`)
	t.Logf("registry-down banner %v after the kill", d)
	screenshot(t, ctx, "console-down.png")

	// Back up: the banner goes. (And the Redis client's redialer, which
	// a successful call means has ended, leaks no goroutine.)
	if err := srv.Restart(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	d = appears(t, ctx, "the banner gone once the registry is back", `document.getElementById('banner').hidden`)
	t.Logf("banner gone %v after the restart", d)
}

// TestConsoleActionsOffInChromium: without AllowActions the instance
// view offers no button and says how to enable them.
func TestConsoleActionsOffInChromium(t *testing.T) {
	f := newMemFixture(t, agent.Config{})
	f.register(registry.Instance{ID: "a", Service: "api", Address: "10.0.0.1:80"})
	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(f.url+"/")); err != nil {
		t.Fatal(err)
	}
	appears(t, ctx, "the instance", row("a"))
	click(t, ctx, `tr[data-id="a"]`)
	appears(t, ctx, "actions disabled", `document.getElementById('detail-body').textContent.includes("--allow-actions")`)
	if js[bool](t, ctx, `document.querySelector('#detail button[data-action]') !== null`) {
		t.Error("action buttons shown while actions are disabled")
	}
}

// TestConsoleEmptyInChromium: an empty registry says so, a search that
// matches nothing says so, and the first instance shows without reload.
func TestConsoleEmptyInChromium(t *testing.T) {
	f := newMemFixture(t, agent.Config{ProbeInterval: 50 * time.Millisecond})
	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(f.url+"/")); err != nil {
		t.Fatal(err)
	}
	appears(t, ctx, "the empty state", `document.getElementById('services').textContent === "The registry lists no service."`)
	f.register(registry.Instance{ID: "a", Service: "api", Address: "10.0.0.1:80"})
	appears(t, ctx, "the first instance", row("a"))
	setInput(t, ctx, "f-service", "nothing-like-it")
	appears(t, ctx, "no match", `document.getElementById('services').textContent === 'No service matches "nothing-like-it".'`)
}
