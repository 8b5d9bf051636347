package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/servers/consultest"
	"github.com/roster-go/roster/internal/servers/kubetest"
	"github.com/roster-go/roster/internal/servers/natstest"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/internal/servers/zktest"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// actionBackends are the registries the action commands are tested on:
// each registering backend whose driver keeps records (the others skip).
// Each makes its registry URL when its subtest runs, so a server starts
// only for the subtest that uses it and stops when that subtest ends.
func actionBackends() map[string]func(t *testing.T) string {
	return map[string]func(t *testing.T) string{
		"mem":   func(*testing.T) string { return "mem://cli-actions" },
		"etcd":  func(*testing.T) string { return cluster.URL("/cli-actions") },
		"redis": func(t *testing.T) string { return "redis://" + redistest.Start(t).Addr() + "/0?prefix=cli-actions" },
		"consul": func(t *testing.T) string {
			return consultest.Start(t).URL("wait=5s")
		},
		"zk": func(t *testing.T) string { return zktest.Start(t).URL("/cli-actions", "session_timeout=3s") },
		"zk-curator": func(t *testing.T) string {
			return zktest.Start(t).URL("/cli-actions", "session_timeout=3s&layout=curator")
		},
		"k8s": func(t *testing.T) string {
			srv, err := kubetest.Start(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Close() })
			u, err := srv.URL(srv.Addr(), "default", "sweep_interval=1s", "request_timeout=2s")
			if err != nil {
				t.Fatal(err)
			}
			return u
		},
		"nats": func(t *testing.T) string { return natstest.Start(t).URL("bucket=cli-actions") },
	}
}

// TestActionCommands drives drain, weight, maint, restore, deregister and
// overrides through the CLI code path against each backend: a reader
// watching the service sees each action within a second, and a zombie
// deregistered is gone from the backend itself.
func TestActionCommands(t *testing.T) {
	for name, url := range actionBackends() {
		t.Run(name, func(t *testing.T) { testActionCommands(t, url(t)) })
	}
}

func testActionCommands(t *testing.T, url string) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	owner, err := registry.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	if _, err := owner.Records(); errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("every backend of this test keeps records: %v", err)
	}
	reader, err := registry.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	ttl := max(owner.Limits().MinTTL, time.Second)
	live, err := owner.Register(ctx, registry.Instance{Service: "acted", Address: "127.0.0.1:7001", Weight: 10}, registry.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	zombie, err := owner.Register(ctx, registry.Instance{Service: "acted", Address: "127.0.0.1:7002", Weight: 10}, registry.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	zombie.Abandon() // its record stays for an hour, with no owner
	lid, zid := live.Instance().ID, zombie.Instance().ID
	t.Cleanup(func() {
		for _, id := range []string{lid, zid} {
			_, _, _ = execute(context.Background(), "restore", "acted", id, "--registry", url)
		}
	})
	w, err := reader.Watch(ctx, "acted")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	want := func(what string, ok func(registry.Snapshot) bool) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		for {
			s, err := w.Next(wctx)
			if wctx.Err() != nil {
				t.Fatalf("a reader did not see %s within 1s", what)
			}
			if err == nil && ok(s) {
				return
			}
		}
	}
	weightIs := func(id string, n uint32) func(registry.Snapshot) bool {
		return func(s registry.Snapshot) bool { in, ok := s.Find(id); return ok && in.Weight == n }
	}
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, err := execute(ctx, append(args, "--registry", url)...)
		if err != nil {
			t.Fatalf("roster %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	want("both instances", func(s registry.Snapshot) bool { return len(s.Instances) == 2 })

	if out := cli("drain", "acted", lid, "--reason", "disk full", "--by", "ops@test"); !strings.Contains(out, "drain until") {
		t.Fatalf("drain printed %q", out)
	}
	want("the drain", weightIs(lid, 0))
	cli("weight", "acted", lid, "3")
	want("weight 3", weightIs(lid, 3))
	cli("maint", "acted", lid)
	want("the maintenance", func(s registry.Snapshot) bool { _, ok := s.Find(lid); return !ok && len(s.Instances) == 1 })

	var ovs []registry.Override
	if err := json.Unmarshal([]byte(cli("overrides", "acted", "--json")), &ovs); err != nil || len(ovs) != 1 || !ovs[0].Maintenance || ovs[0].ID != lid {
		t.Fatalf("overrides --json = %+v, %v; want the maintenance of %s", ovs, err, lid)
	}
	if table := cli("overrides"); !strings.Contains(table, lid) || !strings.Contains(table, "maintenance") {
		t.Fatalf("overrides printed %q", table)
	}
	cli("restore", "acted", lid)
	want("the instance back at its own weight", weightIs(lid, 10))

	if out := cli("deregister", "acted", zid, "--reason", "zombie"); !strings.Contains(out, "deregistered") {
		t.Fatalf("deregister printed %q", out)
	}
	if _, errOut, _ := execute(ctx, "maint", "acted", zid, "--registry", url); !strings.Contains(errOut, "no instance") {
		t.Fatalf("maint of a deregistered zombie warned %q; want that no such instance is listed", errOut)
	}
	if _, errOut, _ := execute(ctx, "drain", "acted", lid, "--registry", url); strings.Contains(errOut, "no instance") {
		t.Fatalf("drain of a live instance warned %q", errOut)
	}
	want("the zombie gone", func(s registry.Snapshot) bool { _, ok := s.Find(zid); return !ok })
	var drv driver.Driver
	reader.As(&drv)
	raw, err := drv.List(ctx, "acted")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range raw.Instances {
		if in.ID == zid {
			t.Fatalf("the zombie's record is still in the backend: %+v", raw.Instances)
		}
	}
}

// TestActionCommandsRefuseBadInput: bad input fails with the field named,
// before anything is written.
func TestActionCommandsRefuseBadInput(t *testing.T) {
	_, url := memRegistry(t, "cli-actions-bad")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"weight", "api", "a", "lots"}, "WEIGHT"},
		{[]string{"weight", "api", "a", "70000"}, "WEIGHT"},
		{[]string{"drain", "Bad", "a"}, "service"},
		{[]string{"drain", "api", "a/b"}, "invalid id"},
		{[]string{"maint", "api", "a", "--reason", "x\x1by"}, "invalid reason"},
		{[]string{"drain", "api"}, "accepts 2 arg"},
	} {
		_, _, err := execute(t.Context(), append(tc.args, "--registry", url)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("roster %q = %v, want an error with %q", tc.args, err, tc.want)
		}
	}
	out, _, err := execute(t.Context(), "overrides", "--json", "--registry", url)
	if err != nil || strings.TrimSpace(out) != "[]" {
		t.Fatalf("overrides after bad input = %q, %v; want []", out, err)
	}
}
