package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/policy"
	"github.com/roster-go/roster/registry"
)

// TestPolicyCommands: roster policy set (flags and --file), get, ls and
// rm on a registry, with bad input rejected before anything is written.
func TestPolicyCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg, url := memRegistry(t, "policy-cli")
	run := func(args ...string) (string, string, error) {
		return execute(ctx, append([]string{"--registry", url, "policy"}, args...)...)
	}
	if _, _, err := run("set", "user-svc", "--split", "v2=5%"); err != nil {
		t.Fatal(err)
	}
	s, err := policy.Get(ctx, reg, "user-svc")
	if err != nil || len(s.Policy.Split) != 1 || s.Policy.Split[0].Version != "v2" || s.Policy.Split[0].Percent != 5 {
		t.Fatalf("after set --split v2=5%%: %+v, %v", s, err)
	}
	// A flag changes its field only.
	if _, _, err := run("set", "user-svc", "--strategy", "consistent_hash", "--hash-key", "X-User"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run("set", "user-svc", "--split", "v1=50%,v2=50%"); err != nil {
		t.Fatal(err)
	}
	out, _, err := run("get", "user-svc")
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse([]byte(out))
	if err != nil || p.Strategy != "consistent_hash" || p.HashKey != "X-User" || len(p.Split) != 2 || p.Split[1].Percent != 50 {
		t.Fatalf("get printed %s (%v), want every field set so far", out, err)
	}
	// Invalid input: an error naming the field, nothing written.
	before, _ := policy.Get(ctx, reg, "user-svc")
	for _, args := range [][]string{
		{"--split", "v1=60%,v2=50%"},
		{"--split", "v2"},
		{"--strategy", "fastest"},
		{"--timeout", "-1s"},
	} {
		_, _, err := run(append([]string{"set", "user-svc"}, args...)...)
		if err == nil {
			t.Errorf("set %v succeeded", args)
		}
		var fe *policy.FieldError
		if strings.HasPrefix(args[0], "--split") && args[1] != "v2" && !errors.As(err, &fe) {
			t.Errorf("set %v = %v, want a FieldError", args, err)
		}
		if now, _ := policy.Get(ctx, reg, "user-svc"); now.Version != before.Version {
			t.Errorf("set %v wrote the policy", args)
		}
	}
	file := filepath.Join(t.TempDir(), "p.json")
	os.WriteFile(file, []byte(`{"strategy": "round_robin", "timeout": "2s"}`), 0o644)
	if _, _, err := run("set", "search", "--file", file); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(file, []byte(`{"strategy": "round_robin", "timout": "2s"}`), 0o644)
	if _, _, err := run("set", "search", "--file", file); err == nil || !strings.Contains(err.Error(), "timout") {
		t.Errorf("set --file with an unknown field = %v, want it named", err)
	}
	rs, _ := reg.Records()
	rs.Put(ctx, registry.Record{Key: policy.Key("broken"), Value: []byte("{")})
	ls, _, err := run("ls")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"user-svc", "search", `"timeout":"2s"`, "broken", "invalid"} {
		if !strings.Contains(ls, want) {
			t.Errorf("ls does not show %q:\n%s", want, ls)
		}
	}
	// A record that is no policy is replaced by set's flags.
	if _, _, err := run("set", "broken", "--strategy", "random"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run("rm", "user-svc"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run("get", "user-svc"); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("get after rm = %v, want ErrNotFound", err)
	}
}
