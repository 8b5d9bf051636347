package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

// confServices returns the conformance services reg lists.
func confServices(t *testing.T, reg *registry.Registry) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	all, err := reg.Services(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range all {
		if strings.HasPrefix(n, "conf-") {
			out = append(out, n)
		}
	}
	return out
}

// A conformance run SIGKILLed during TTLEdges (a CI timeout, the OOM
// killer) leaves nothing listed once MaxRecordTTL has passed. Before the
// bound, the run registered TTLs of up to 292 years there.
func TestConformanceKilledLeavesNothing(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr() + "/0?prefix=killed"
	reg, err := registry.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	cmd := exec.Command(binary, "conformance", url, "--run", "^TTLEdges$")
	cmd.Env = append(os.Environ(), "ROSTER_REGISTRY=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	deadline := time.Now().Add(time.Minute)
	for !hasSuffix(confServices(t, reg), "-ttl-edge") {
		if time.Now().After(deadline) {
			t.Fatalf("no ttl-edge service listed within a minute; roster said:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed := time.Now()
	// The hash layout's sweep runs each second: one more for it.
	bound := conformance.MaxRecordTTL + 2*time.Second
	for {
		left := confServices(t, reg)
		if len(left) == 0 {
			t.Logf("nothing listed %v after the kill", time.Since(killed).Round(time.Millisecond))
			return
		}
		if time.Since(killed) > bound {
			t.Fatalf("%v after a SIGKILL, still listed: %v", bound, left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func hasSuffix(names []string, suffix string) bool {
	for _, n := range names {
		if strings.HasSuffix(n, suffix) {
			return true
		}
	}
	return false
}

// A new run removes what killed runs left: the records of a run older
// than two minutes whose marker is gone, and those of versions without
// markers. It keeps those of a run whose marker is listed, and of a run
// too young to judge.
func TestConformanceRemovesLeftovers(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr() + "/0?prefix=leftover"
	reg, err := registry.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	old := strconv.FormatInt(time.Now().Add(-10*time.Minute).Unix(), 36)
	young := strconv.FormatInt(time.Now().Unix(), 36)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	put := func(svc string, ttl time.Duration, abandon bool) {
		l, err := reg.Register(ctx, registry.Instance{Service: svc, Address: "127.0.0.1:7001"}, registry.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		if abandon {
			l.Abandon() // as a SIGKILL leaves it
		}
	}
	gone := []string{"conf-0badc0de-ttl-edge", "conf-" + old + "-abcdef-123456-lim"}
	kept := []string{"conf-" + old + "-fedcba-654321-lim", "conf-" + young + "-aaaaaa-111111-lim"}
	put("conf-"+old+"-fedcba-run", 3*time.Second, false) // a live run's marker
	for _, svc := range append(append([]string{}, gone...), kept...) {
		put(svc, time.Hour, true)
	}
	stdout, stderr, code := run(t, 2*time.Minute, "conformance", url, "--run", "^UnknownServiceIsEmpty$")
	if code != 0 || !strings.Contains(stdout, "note: removed what earlier killed runs left in 2 services") {
		t.Fatalf("conformance exited %d, want 0 and a note on 2 services\n%s%s", code, stdout, stderr)
	}
	for _, svc := range gone {
		if snap, err := reg.Lookup(ctx, svc); err != nil || len(snap.Instances) != 0 {
			t.Errorf("%s: %d instances (err %v) after a new run, want none", svc, len(snap.Instances), err)
		}
	}
	for _, svc := range kept {
		if snap, err := reg.Lookup(ctx, svc); err != nil || len(snap.Instances) != 1 {
			t.Errorf("%s: %d instances (err %v) after a new run, want its 1 kept", svc, len(snap.Instances), err)
		}
	}
}
