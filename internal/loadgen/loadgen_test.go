package loadgen_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	_ "github.com/roster-go/roster/backends/consul"
	_ "github.com/roster-go/roster/backends/etcd"
	_ "github.com/roster-go/roster/backends/memory"
	_ "github.com/roster-go/roster/backends/redis"
	"github.com/roster-go/roster/internal/loadgen"
	"github.com/roster-go/roster/internal/servers/consultest"
	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

func small(url string) loadgen.Config {
	return loadgen.Config{URL: url, Instances: 24, Services: 6, Processes: 3, Watchers: 2, Workers: 8,
		TTL: 3 * time.Second, Hold: time.Second, Probes: 10}
}

// check runs a small bench against url and checks that every figure was
// measured and that the run left nothing behind.
func check(t *testing.T, url string, network bool) loadgen.Report {
	t.Helper()
	var steps []string
	c := small(url)
	c.Progress = func(s string) { steps = append(steps, s) }
	rep, err := loadgen.Run(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", rep)
	if rep.RegisterPerSec <= 0 || rep.Lookup.Count != 10 || rep.Deregister.Count != 10 || rep.Crash.Count != 1 {
		t.Errorf("figures missing: %+v", rep)
	}
	if rep.Crash.MaxMS < 1000 { // an abandoned lease lives until its TTL runs out
		t.Errorf("crash reached the watchers in %.0fms, before a TTL could run out", rep.Crash.MaxMS)
	}
	if rep.UnhealthyLeases != 0 || rep.Flaps != 0 {
		t.Errorf("%d leases unhealthy while held, %d flaps", rep.UnhealthyLeases, rep.Flaps)
	}
	if network && (rep.ConnsRegistering <= 0 || rep.ConnsWatching <= 0) {
		t.Errorf("connections not counted: %d registering, %d watching", rep.ConnsRegistering, rep.ConnsWatching)
	}
	if !network && rep.ConnsTotal != -1 {
		t.Errorf("connections of an in-process backend = %d, want -1 (unknown)", rep.ConnsTotal)
	}
	if got := strings.Join(steps, " "); got != "open watch register hold lookup deregister crash" {
		t.Errorf("progress steps %q", got)
	}
	r, err := registry.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	svcs, err := r.Services(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs {
		if strings.HasPrefix(s, "bench-") {
			if sn, _ := r.Lookup(t.Context(), s); len(sn.Instances) > 0 {
				t.Errorf("service %s left behind with %d instances", s, len(sn.Instances))
			}
		}
	}
	return rep
}

func TestRedis(t *testing.T) {
	srv := redistest.Start(t)
	rep := check(t, "redis://"+srv.Addr(), true)
	if rep.ServerCommandsPerSec <= 0 || !strings.HasPrefix(rep.Server, "redis ") {
		t.Errorf("Redis server figures missing: %q, %v commands/s", rep.Server, rep.ServerCommandsPerSec)
	}
}

func TestConsul(t *testing.T) { check(t, consultest.Start(t).URL(""), true) }

func TestEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := etcdtest.Start(ctx, etcdtest.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	check(t, "etcd://"+strings.TrimPrefix(c.Endpoints()[0], "http://"), true)
}

func TestMemory(t *testing.T) { check(t, "mem://loadgen", false) }

func TestValidate(t *testing.T) {
	for name, mod := range map[string]func(*loadgen.Config){
		"instances": func(c *loadgen.Config) { c.Instances = 0 },
		"services":  func(c *loadgen.Config) { c.Services = -1 },
		"processes": func(c *loadgen.Config) { c.Processes = 0 },
		"watchers":  func(c *loadgen.Config) { c.Watchers = 0 },
		"workers":   func(c *loadgen.Config) { c.Workers = 0 },
		"probes":    func(c *loadgen.Config) { c.Probes = 0 },
		"ttl":       func(c *loadgen.Config) { c.TTL = 0 },
		"hold":      func(c *loadgen.Config) { c.Hold = -time.Second },
		"exceed":    func(c *loadgen.Config) { c.Services = 100 },
	} {
		c := small("mem://")
		mod(&c)
		_, err := loadgen.Run(t.Context(), c)
		if !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("%s: Run = %v, want ErrInvalid", name, err)
			continue
		}
		field := name
		if name == "exceed" {
			field = "services"
		}
		if !strings.Contains(err.Error(), field) {
			t.Errorf("%s: error %q does not name the field", name, err)
		}
	}
}
