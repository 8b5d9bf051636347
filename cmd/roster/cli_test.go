package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// execute runs the real cobra command tree in this process and returns
// its stdout, stderr and error. A mem://name registry opened by the test
// is the one the command sees.
func execute(ctx context.Context, args ...string) (string, string, error) {
	root := newRoot()
	var stdout, stderr syncBuffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return stdout.String(), stderr.String(), err
}

// memRegistry opens a mem://name registry of this process, shared with
// the commands that execute runs, with instances registered in it.
func memRegistry(t *testing.T, name string, ins ...registry.Instance) (*registry.Registry, string) {
	t.Helper()
	url := "mem://" + name
	reg, err := registry.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	for _, in := range ins {
		if _, err := reg.Register(context.Background(), in); err != nil {
			t.Fatal(err)
		}
	}
	return reg, url
}

// TestFlagLimits: every numeric, duration and enum flag out of its range
// fails before anything runs, with an error naming the flag and the range.
// Register cases carry a CMD that would leave a file behind: it must not.
func TestFlagLimits(t *testing.T) {
	_, mem := memRegistry(t, "flag-limits", registry.Instance{Service: "web", Address: "127.0.0.1:9000"})
	_, etcd := openReg(t, "/cli-flags")
	marker := filepath.Join(t.TempDir(), "started")
	reg := func(url string, flags ...string) []string {
		args := append([]string{"register", "--registry", url, "--service", "flagged", "--addr", "127.0.0.1:9100"}, flags...)
		return append(args, "--", "sh", "-c", "touch "+marker)
	}
	for _, tc := range []struct {
		args []string
		want []string // all in the error
	}{
		{[]string{"pick", "web", "--registry", mem, "--count", "0"}, []string{`"--count"`, "from 1 to 1000000"}},
		{[]string{"pick", "web", "--registry", mem, "--count", "-3"}, []string{`"--count"`, "from 1 to 1000000"}},
		{[]string{"pick", "web", "--registry", mem, "--count", "1000001"}, []string{`"--count"`, "from 1 to 1000000"}},
		{[]string{"pick", "web", "--registry", mem, "--count", "many"}, []string{`"--count"`, "whole number"}},
		{[]string{"pick", "web", "--registry", mem, "--strategy", "fastest"}, []string{"unknown strategy"}},
		{[]string{"demo", "--registry", mem, "--duration", "0s"}, []string{`"--duration"`, "from 1s to 24h"}},
		{[]string{"demo", "--registry", mem, "--duration", "-5s"}, []string{`"--duration"`, "from 1s to 24h"}},
		{[]string{"demo", "--registry", mem, "--duration", "25h"}, []string{`"--duration"`, "from 1s to 24h"}},
		{[]string{"demo", "--registry", mem, "--duration", "10"}, []string{`"--duration"`, "not a duration"}},
		{[]string{"demo", "--registry", mem, "--workers", "0"}, []string{`"--workers"`, "from 1 to 256"}},
		{[]string{"demo", "--registry", mem, "--workers", "-1"}, []string{`"--workers"`, "from 1 to 256"}},
		{[]string{"demo", "--registry", mem, "--workers", "257"}, []string{`"--workers"`, "from 1 to 256"}},
		{[]string{"demo", "--registry", mem, "--strategy", "fastest"}, []string{"unknown strategy"}},
		{reg(mem, "--ttl", "0s"), []string{`"--ttl"`, "from 10ms to 24h"}},
		{reg(mem, "--ttl", "-1s"), []string{`"--ttl"`, "from 10ms to 24h"}},
		{reg(mem, "--ttl", "48h"), []string{`"--ttl"`, "from 10ms to 24h"}},
		{reg(etcd, "--ttl", "1s"), []string{"--ttl", "below this backend's minimum of 2s"}},
		{reg(mem, "--check-interval", "0s"), []string{`"--check-interval"`, "from 10ms to 1h"}},
		{reg(mem, "--drain", "-1s"), []string{`"--drain"`, "from 0s to 1h"}},
		{reg(mem, "--weight", "-1"), []string{`"--weight"`}},
		{reg(mem, "--check-http", "localhost:8080/healthz"), []string{"--check-http", "http:// or https://"}},
		{reg(mem, "--check-http", "ftp://127.0.0.1/healthz"), []string{"--check-http", "http:// or https://"}},
		{reg(mem, "--meta", "novalue"), []string{"--meta", "key=value"}},
		{[]string{"conformance", mem, "--ttl", "-1s"}, []string{`"--ttl"`, "from 0s to 30s"}},
		{[]string{"conformance", mem, "--ttl", "5ms"}, []string{"--ttl", "below this backend's minimum of 10ms"}},
		{[]string{"conformance", etcd, "--ttl", "1s"}, []string{"--ttl", "below this backend's minimum of 2s"}},
		{[]string{"conformance", mem, "--expiry-slack", "0s"}, []string{`"--expiry-slack"`, "from 10ms to 1h"}},
		{[]string{"conformance", mem, "--propagation", "-2s"}, []string{`"--propagation"`, "from 10ms to 1h"}},
		{[]string{"conformance", mem, "--run", "("}, []string{"--run"}},
		{[]string{"dev", "--temp", "--listen", "127.0.0.1:70000"}, []string{"70000", "0 to 65535"}},
		{[]string{"ls", "a", "b", "--registry", mem}, []string{"accepts at most 1 arg"}},
		{[]string{"bench", mem, "--instances", "0"}, []string{`"--instances"`, "from 1 to 1000000"}},
		{[]string{"bench", mem, "--instances", "-5"}, []string{`"--instances"`, "from 1 to 1000000"}},
		{[]string{"bench", mem, "--instances", "1000000000"}, []string{`"--instances"`, "from 1 to 1000000"}},
		{[]string{"bench", mem, "--services", "0"}, []string{`"--services"`, "from 1 to 1000000"}},
		{[]string{"bench", mem, "--services", "20", "--instances", "10"}, []string{"services (20) must not exceed instances (10)"}},
		{[]string{"bench", mem, "--processes", "0"}, []string{`"--processes"`, "from 1 to 1000"}},
		{[]string{"bench", mem, "--processes", "100000"}, []string{`"--processes"`, "from 1 to 1000"}},
		{[]string{"bench", mem, "--watchers", "-1"}, []string{`"--watchers"`, "from 1 to 1000"}},
		{[]string{"bench", mem, "--workers", "0"}, []string{`"--workers"`, "from 1 to 256"}},
		{[]string{"bench", mem, "--probes", "0"}, []string{`"--probes"`, "from 1 to 10000"}},
		{[]string{"bench", mem, "--probes", "99999999"}, []string{`"--probes"`, "from 1 to 10000"}},
		{[]string{"bench", mem, "--ttl", "0s"}, []string{`"--ttl"`, "from 10ms to 24h"}},
		{[]string{"bench", mem, "--ttl", "-1s"}, []string{`"--ttl"`, "from 10ms to 24h"}},
		{[]string{"bench", mem, "--hold", "0s"}, []string{`"--hold"`, "from 1s to 1h"}},
		{[]string{"bench", mem, "--hold", "1000h"}, []string{`"--hold"`, "from 1s to 1h"}},
		{[]string{"agent", "--registry", mem, "--token-ttl", "0s"}, []string{`"--token-ttl"`, "from 100ms to 1h"}},
		{[]string{"agent", "--registry", mem, "--token-ttl", "-1m"}, []string{`"--token-ttl"`, "from 100ms to 1h"}},
		{[]string{"agent", "--registry", mem, "--token-ttl", "9999h"}, []string{`"--token-ttl"`, "from 100ms to 1h"}},
		{[]string{"agent", "--registry", mem, "--max-staleness", "500ms"}, []string{`"--max-staleness"`, "0 (no bound) or from 1s to 168h"}},
		{[]string{"agent", "--registry", mem, "--max-staleness", "-1s"}, []string{`"--max-staleness"`, "0 (no bound) or from 1s to 168h"}},
		{[]string{"agent", "--registry", mem, "--max-staleness", "10000h"}, []string{`"--max-staleness"`, "0 (no bound) or from 1s to 168h"}},
		{[]string{"agent", "--registry", mem, "--debounce", "0s"}, []string{`"--debounce"`, "from 1ms to 1m"}},
		{[]string{"agent", "--registry", mem, "--debounce", "1h"}, []string{`"--debounce"`, "from 1ms to 1m"}},
		{[]string{"agent", "--registry", mem, "--debounce", "soon"}, []string{`"--debounce"`, "not a duration"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			out, _, err := execute(ctx, tc.args...)
			if err == nil {
				t.Fatalf("accepted; stdout:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if out != "" {
				t.Errorf("printed results although the input was rejected:\n%s", out)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("CMD ran although the input was rejected")
			}
		})
	}
	// Nothing was registered by the rejected register commands.
	for _, url := range []string{mem, etcd} {
		r, err := registry.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		if s, err := r.Lookup(context.Background(), "flagged"); err != nil || len(s.Instances) != 0 {
			t.Errorf("%s: rejected registrations left %v (%v)", url, s.Instances, err)
		}
		r.Close()
	}
}

// TestFlagLimitsAcceptTheBounds: the ends of each range are accepted.
func TestFlagLimitsAcceptTheBounds(t *testing.T) {
	_, mem := memRegistry(t, "flag-bounds", registry.Instance{Service: "web", Address: "127.0.0.1:9000"})
	for _, args := range [][]string{
		{"pick", "web", "--registry", mem, "--count", "1"},
		{"pick", "web", "--registry", mem, "--count", "1000000"},
		{"bench", mem, "--instances", "1", "--services", "1", "--processes", "1", "--watchers", "1", "--workers", "1",
			"--probes", "1", "--ttl", "10ms", "--hold", "1s"},
		{"conformance", mem, "--ttl", "10ms", "--expiry-slack", "10ms", "--propagation", "1h", "--run", "^RoundTripEveryField$"},
	} {
		if out, errOut, err := execute(context.Background(), args...); err != nil {
			t.Errorf("%v: %v\n%s%s", args, err, out, errOut)
		}
	}
}

// TestConformanceMem: mem:// gives each registry a private server, so the
// suite's clients would not see each other; the command shares one.
func TestConformanceMem(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, errOut, err := execute(ctx, "conformance", "mem://", "--run",
		"^(RoundTripEveryField|ServicesListed|WatchAddUpdateRemove|LookupFromWatchCache|WatchSharedByWatchers|ExternalDeleteReregisters)$")
	if err != nil {
		t.Fatalf("conformance mem://: %v\n%s%s", err, out, errOut)
	}
	for _, want := range []string{"5 passed, 0 failed, 1 not run", "note: mem:// is a server inside this roster process"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestMemRegistryWarns: what roster registers or lists on mem:// no other
// process can see; it says so on stderr.
func TestMemRegistryWarns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, args := range [][]string{
		{"register", "--registry", "mem://", "--service", "lonely", "--addr", "127.0.0.1:9200", "--drain", "0s", "--", "true"},
		{"register", "--registry", "mem://named", "--service", "lonely", "--addr", "127.0.0.1:9200", "--drain", "0s", "--", "true"},
		{"ls", "--registry", "mem://"},
	} {
		_, errOut, err := execute(ctx, args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if !strings.Contains(errOut, "warning:") || !strings.Contains(errOut, "no other process can see it") {
			t.Errorf("%v: no warning on stderr:\n%s", args, errOut)
		}
	}
	_, errOut, _ := execute(ctx, "ls", "--registry", cluster.URL("/cli-nowarn"))
	if strings.Contains(errOut, "warning") {
		t.Errorf("warning for a networked registry:\n%s", errOut)
	}
}

// TestJSONStyle: every --json output uses lower-case snake_case keys, and
// durations only as numbers of milliseconds (keys ending in _ms).
func TestJSONStyle(t *testing.T) {
	_, mem := memRegistry(t, "json-style",
		registry.Instance{ID: "web-0", Service: "web", Address: "127.0.0.1:9000", Version: "1.0", Zone: "a", Tags: []string{"x"},
			Metadata: map[string]string{"Owner-Team": "core"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	outputs := map[string]string{}
	for name, args := range map[string][]string{
		"ls":          {"ls", "--json", "--registry", mem},
		"ls SERVICE":  {"ls", "web", "--json", "--registry", mem},
		"pick":        {"pick", "web", "--json", "--count", "3", "--registry", mem},
		"conformance": {"conformance", mem, "--json", "--run", "^(RoundTripEveryField|ExternalDeleteReregisters)$"},
	} {
		out, errOut, err := execute(ctx, args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, errOut)
		}
		outputs[name] = out
	}
	outputs["watch"] = firstWatchLine(t, mem)
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	for name, out := range outputs {
		var v any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Errorf("%s: not JSON: %v\n%s", name, err, out)
			continue
		}
		keys := jsonKeys(v, "")
		if len(keys) == 0 {
			t.Errorf("%s: no keys in %s", name, out)
		}
		for _, k := range keys {
			if !snake.MatchString(k) {
				t.Errorf("%s: key %q is not snake_case:\n%s", name, k, out)
			}
			if strings.Contains(k, "duration") && !strings.HasSuffix(k, "_ms") {
				t.Errorf("%s: duration key %q has no unit suffix _ms:\n%s", name, k, out)
			}
		}
	}
	var rows []resultJSON
	if err := json.Unmarshal([]byte(outputs["conformance"]), &rows); err != nil || len(rows) != 2 ||
		rows[0].Result != "pass" || rows[1].Result != "not_run" || rows[1].Reason == "" || rows[0].DurationMS <= 0 {
		t.Errorf("conformance --json: %+v %v\n%s", rows, err, outputs["conformance"])
	}
}

// firstWatchLine runs watch --json until its first line.
func firstWatchLine(t *testing.T, url string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := newRoot()
	var out syncBuffer
	root.SetOut(&out)
	root.SetErr(&bytes.Buffer{})
	root.SetArgs([]string{"watch", "web", "--json", "--registry", url})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "\n") {
		if time.Now().After(deadline) {
			t.Fatal("watch --json printed nothing")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("watch: %v", err)
	}
	line, _, _ := strings.Cut(out.String(), "\n")
	return line
}

// jsonKeys lists the object keys in v, but not those under "metadata",
// which are the registrant's data.
func jsonKeys(v any, parent string) []string {
	var keys []string
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if parent != "metadata" {
				keys = append(keys, k)
			}
			keys = append(keys, jsonKeys(e, k)...)
		}
	case []any:
		for _, e := range v {
			keys = append(keys, jsonKeys(e, parent)...)
		}
	}
	return keys
}

// TestMessagesPluralAndSignalNames: counts agree with their noun, and
// signals are named as people know them.
func TestMessagesPluralAndSignalNames(t *testing.T) {
	one := registry.Snapshot{Revision: 3, Instances: []registry.Instance{{ID: "a", Address: "127.0.0.1:1"}}}
	if got := describeChange(nil, one, nil); !strings.Contains(got, "rev 3  1 instance  +a") {
		t.Errorf("watch line %q", got)
	}
	if got := describeChange(&one, registry.Snapshot{Revision: 4}, nil); !strings.Contains(got, "rev 4  0 instances  -a") {
		t.Errorf("watch line %q", got)
	}
	for n, want := range map[int]string{0: "0 retries", 1: "1 retry", 2: "2 retries"} {
		if got := plural(n, "retry"); got != want {
			t.Errorf("plural(%d, retry) = %q, want %q", n, got, want)
		}
	}
	// The sidecar's drain message is checked end to end with SIGINT in
	// TestSidecarSecondSignalCutsTheDrain.
	if got := signalName(syscall.SIGTERM); got != "SIGTERM" {
		t.Errorf("signalName(SIGTERM) = %q", got)
	}
}

// TestUntrustedStringsEscaped: instances with control characters in every
// field (as a record written past Roster's validation can hold) never put
// a raw control character in a human-readable table or line.
func TestUntrustedStringsEscaped(t *testing.T) {
	evil := registry.Instance{
		ID: "x\nforged-row 6.6.6.6:1", Service: "web", Address: "127.0.0.1:1\x1b[2J", Version: "1\r2", Zone: "\u202ez",
		Weight: 1, Tags: []string{"t,u", "\x00"}, Metadata: map[string]string{"k": "v\nID ADDRESS", "a=b": "c,d"},
		Endpoints: []registry.Endpoint{{Name: "h\nforged", Address: "1.2.3.4:5,x=6.6.6.6:1"}, {Name: "g", Address: "a:1", Protocol: "p/q\x1b[2J"}},
	}
	var tbl bytes.Buffer
	printInstances(&tbl, []registry.Instance{evil})
	changed := evil
	changed.Version, changed.Tags = "v\x1b]0;title\x07", []string{"\n"}
	changed.Endpoints = []registry.Endpoint{{Name: "\x1b[1m", Address: "\r"}}
	prev := registry.Snapshot{Instances: []registry.Instance{evil}}
	for out, lines := range map[string]int{
		tbl.String(): 2, // the header and one row
		describeChange(nil, registry.Snapshot{Instances: []registry.Instance{evil}}, nil):              1,
		describeChange(&prev, registry.Snapshot{Instances: []registry.Instance{changed}}, nil):         1,
		describeChange(&prev, registry.Snapshot{Stale: true}, errors.New("read x\x1b[31m")):            1,
		describeChange(&prev, registry.Snapshot{Instances: []registry.Instance{{ID: "\x1b[1m"}}}, nil): 1,
	} {
		assertNoControls(t, strings.TrimSuffix(out, "\n"), lines)
	}
	for _, want := range []string{`"x\nforged-row 6.6.6.6:1"`, `"127.0.0.1:1\x1b[2J"`, `"1\r2"`, `"\u202ez"`, `"t,u"`, `"\x00"`, `k="v\nID ADDRESS"`, `"a=b"="c,d"`,
		`"h\nforged"="1.2.3.4:5,x=6.6.6.6:1",g=a:1/"p/q\x1b[2J"`} {
		if !strings.Contains(tbl.String(), want) {
			t.Errorf("table lacks %s:\n%s", want, tbl.String())
		}
	}
	if got := escapeControls("bad\nrow\x1b[2J\u202e ok é"); got != `bad\nrow\x1b[2J\u202e ok é` {
		t.Errorf("escapeControls = %q", got)
	}
	// The demo's events name an instance it did not start by its ID.
	if got := nameOf(map[string]string{"a": "alpha"}, "x\x1b[2J"); got != `instance "x\x1b[2J"` {
		t.Errorf("nameOf a foreign instance = %s", got)
	}
	if got := quote(`"quoted"`); got != `"\"quoted\""` {
		t.Errorf("quote of a quoted-looking string = %s", got)
	}
}

// assertNoControls fails if out holds a control or format character other
// than the newlines ending its lines (want lines lines).
func assertNoControls(t *testing.T, out string, lines int) {
	t.Helper()
	for _, r := range strings.ReplaceAll(out, "\n", "") {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u202e' {
			t.Errorf("raw control character %q in output:\n%q", r, out)
			return
		}
	}
	if got := strings.Count(out, "\n") + 1; got != lines {
		t.Errorf("%d lines, want %d (a forged row?):\n%s", got, lines, out)
	}
}

// TestUntrustedRecordFromRedis: a record written straight into Redis by
// someone other than Roster, with control characters in its fields, is
// shown escaped (or not at all) by ls, pick and watch: no forged row, no
// terminal escape.
func TestUntrustedRecordFromRedis(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr() + "/0?prefix=cli-evil"
	reg, err := registry.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := reg.Register(ctx, registry.Instance{ID: "evil-1", Service: "web", Address: "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	// Rewrite the record as the hash layout stores it, past validation.
	key := "cli-evil:{web}:i:evil-1"
	forged := `{"id":"evil-1","service":"web","address":"127.0.0.1:1","weight":100,"version":"1\u001b[2J","zone":"\u202ez",` +
		`"tags":["t\nu"],"metadata":{"note":"x\nevil-2  6.6.6.6:1  9.9  z  100  -  -","bell":"\u0007\u0000"}}`
	if err := srv.Client().SetArgs(ctx, key, forged, goredis.SetArgs{KeepTTL: true, Mode: "XX"}).Err(); err != nil {
		t.Fatalf("rewrite %s: %v", key, err)
	}
	// And a service whose name no registration could have.
	far := float64(time.Now().Add(time.Hour).UnixMilli())
	evilSvc := "evil\x1b[2J\nsvc"
	for key, member := range map[string]string{"cli-evil:services": evilSvc, "cli-evil:{" + evilSvc + "}:idx": "evil-2"} {
		if err := srv.Client().ZAdd(ctx, key, goredis.Z{Score: far, Member: member}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// The registry's read-back check skips both (the escaping of every
	// output is the second line of defence, unit-tested above): ls lists
	// neither the forged service nor the forged row, pick finds nothing to
	// pick, and no output carries a raw control character.
	for _, tc := range []struct {
		args    []string
		lines   int
		wantErr bool
	}{
		{[]string{"ls", "--registry", url}, 2, false},
		{[]string{"ls", "web", "--registry", url}, 1, false},
		{[]string{"pick", "web", "--registry", url}, 0, true},
	} {
		out, errOut, err := execute(ctx, tc.args...)
		if (err != nil) != tc.wantErr {
			t.Fatalf("%v: error %v, want error %v\n%s", tc.args, err, tc.wantErr, errOut)
		}
		if err != nil {
			assertNoControls(t, err.Error(), 1)
			continue
		}
		assertNoControls(t, strings.TrimSuffix(out, "\n"), tc.lines)
		assertNoControls(t, strings.TrimSuffix(errOut, "\n"), strings.Count(strings.TrimSuffix(errOut, "\n"), "\n")+1)
		if strings.Contains(out, "evil") {
			t.Errorf("%v shows a forged record:\n%s", tc.args, out)
		}
	}
}

// TestDemoRetriesOnlyGrow: the demo's status lines count the retries of
// finished calls only, so the figure never goes down, and the summary
// agrees with the last line (it can only have grown since). It runs on
// mem://, which the demo shares between its instances and its client.
func TestDemoRetriesOnlyGrow(t *testing.T) {
	defer func(d time.Duration) { plainStatusEvery = d }(plainStatusEvery)
	plainStatusEvery = 20 * time.Millisecond
	var out syncBuffer
	// On "mem://", which the demo must share between its instances and
	// its client; no call may fail.
	if err := runDemo(context.Background(), &out, "mem://", 3*time.Second, selector.RoundRobin, 8, false); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	status := regexp.MustCompile(`(?m)^\s*[0-9.]+s  calls (\d+)  failed \d+  retries (\d+)  `)
	var lastCalls, lastRetries, lines int
	for _, m := range status.FindAllStringSubmatch(out.String(), -1) {
		calls, _ := strconv.Atoi(m[1])
		retries, _ := strconv.Atoi(m[2])
		if calls < lastCalls || retries < lastRetries {
			t.Errorf("status went down: calls %d → %d, retries %d → %d", lastCalls, calls, lastRetries, retries)
		}
		lastCalls, lastRetries = calls, retries
		lines++
	}
	if lines < 10 {
		t.Fatalf("%d status lines:\n%s", lines, out.String())
	}
	summary := regexp.MustCompile(`(?m)^(\d+) calls?, \d+ failed, (\d+) retr(?:y|ies) on another instance$`).FindStringSubmatch(out.String())
	if summary == nil {
		t.Fatalf("no summary line:\n%s", out.String())
	}
	calls, _ := strconv.Atoi(summary[1])
	retries, _ := strconv.Atoi(summary[2])
	if calls < lastCalls || retries < lastRetries {
		t.Errorf("summary (%d calls, %d retries) is below the last status line (%d calls, %d retries)", calls, retries, lastCalls, lastRetries)
	}
	t.Logf("%d status lines; summary %d calls, %d retries", lines, calls, retries)
}
