package agent_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/agent"
	"github.com/roster-go/roster/registry"
)

// promBin returns a tool of Debian's prometheus package. Like chromium
// and nginx it is never skipped: scripts/test.sh installs it.
func promBin(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed: apt-get install -y prometheus (scripts/test.sh installs it): %v", name, err)
	}
	return p
}

// drive picks and reports n calls of api: one in twenty takes 200 ms
// and fails with a business error, the rest take 4 ms and succeed.
func drive(f *fixture, n int) {
	for i := range n {
		p := f.pick(pickAPI)
		if i%20 == 0 {
			f.report(p.Token, "business", 200)
		} else {
			f.report(p.Token, "success", 4)
		}
	}
}

// TestMetricsPassPromtool: promtool's linter accepts the agent's
// /metrics after calls and failures, and the text carries no
// otel_scope_* labels, and instance IDs only with InstanceMetrics.
func TestMetricsPassPromtool(t *testing.T) {
	promtool := promBin(t, "promtool")
	b := startRedis(t)
	for _, perInstance := range []bool{false, true} {
		t.Run(fmt.Sprint("InstanceMetrics=", perInstance), func(t *testing.T) {
			f := newFixture(t, b, agent.Config{InstanceMetrics: perInstance})
			registerZones(f)
			drive(f, 40)
			text := get(t, f.url+"/metrics")
			cmd := exec.Command(promtool, "check", "metrics")
			cmd.Stdin = strings.NewReader(text)
			if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
				t.Fatalf("promtool check metrics: %v\n%s", err, out)
			}
			for _, want := range []string{
				`roster_client_call_duration_seconds_bucket{roster_outcome="success",roster_service="api",le="0.005"}`,
				`roster_client_calls_total{roster_outcome="business_error",roster_service="api"} 2`,
				`roster_client_picks_total{roster_service="api",roster_zone="z1"} 20`,
				`roster_agent_instances{roster_ejected="false",roster_service="api",roster_zone="z2"} 1`,
			} {
				if !strings.Contains(text, want) {
					t.Errorf("/metrics lacks %s", want)
				}
			}
			if strings.Contains(text, "otel_scope_") {
				t.Error("/metrics has otel_scope_* labels")
			}
			perID := `roster_client_instance_picks_total{roster_instance_id="a",roster_service="api",roster_zone="z1"} 20`
			if has := strings.Contains(text, "roster_instance_id"); has != perInstance || perInstance && !strings.Contains(text, perID) {
				t.Errorf("with InstanceMetrics %v, /metrics has instance IDs: %v (want %s)", perInstance, has, perID)
			}
		})
	}
}

// TestPrometheusScrape: a real Prometheus server scrapes the agent every
// second, and its HTTP API answers a rate of calls by outcome and the
// median and 99th percentile of the call latency, each within the
// bucket the reported latencies fall in.
func TestPrometheusScrape(t *testing.T) {
	bin := promBin(t, "prometheus")
	f := newFixture(t, startRedis(t), agent.Config{})
	registerZones(f)
	api := startPrometheus(t, bin, strings.TrimPrefix(f.url, "http://"))

	// Calls go on while Prometheus scrapes, until it answers as wanted:
	// a rate needs two scrapes in its window.
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for {
		drive(f, 20)
		rates := query(t, api, `sum by (roster_outcome) (rate(roster_client_calls_total{roster_service="api"}[10s]))`)
		p50 := query(t, api, `histogram_quantile(0.5, sum by (le) (rate(roster_client_call_duration_seconds_bucket{roster_service="api"}[10s])))`)
		p99 := query(t, api, `histogram_quantile(0.99, sum by (le) (rate(roster_client_call_duration_seconds_bucket{roster_service="api"}[10s])))`)
		last = fmt.Sprintf("rates %v, p50 %v, p99 %v", rates, p50, p99)
		if rates["success"] > 0 && rates["business_error"] > 0 && len(p50) == 1 && len(p99) == 1 {
			// 4 ms calls: the median is in the bucket (2.5 ms, 5 ms]. 200 ms
			// calls are 5%: the 99th percentile is in (100 ms, 250 ms].
			if m := p50[""]; m <= 0.0025 || m > 0.005 {
				t.Errorf("median call latency %v s, want in (0.0025, 0.005]", m)
			}
			if m := p99[""]; m <= 0.1 || m > 0.25 {
				t.Errorf("99th percentile %v s, want in (0.1, 0.25]", m)
			}
			if r := rates["success"] / rates["business_error"]; r < 10 || r > 30 {
				t.Errorf("success/business_error rate ratio %.1f, want about 19", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus did not answer the queries in 60 s: %s", last)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Log(last)
	if n := query(t, api, `count({__name__=~"roster_.+", otel_scope_name!=""})`); len(n) != 0 {
		t.Errorf("series with otel_scope_name: %v", n)
	}
	if n := query(t, api, `count({__name__=~"roster_.+", roster_instance_id!=""})`); len(n) != 0 {
		t.Errorf("series by instance ID: %v", n)
	}
}

var pickAPI = agent.PickRequest{Service: "api", Strategy: "round_robin"}

// registerZones registers two instances of api, one in each of two zones,
// and waits for the agent to see them.
func registerZones(f *fixture) {
	f.register(registry.Instance{ID: "a", Service: "api", Zone: "z1", Address: "10.0.0.1:80"})
	f.register(registry.Instance{ID: "b", Service: "api", Zone: "z2", Address: "10.0.0.2:80"})
	f.waitInstances("api", 10*time.Second, has(2))
}

// startPrometheus runs a Prometheus server that scrapes target every
// second, with its data in a temporary directory, and returns the base
// URL of its HTTP API. Prometheus cannot listen on port 0, so it gets a
// port that was free a moment ago, and another if that one was taken.
func startPrometheus(t *testing.T, bin, target string) string {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "prometheus.yml")
	yml := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: roster\n    static_configs:\n      - targets: [%q]\n", target)
	if err := os.WriteFile(conf, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for try := range 3 {
		addr := freePort(t)
		var logs bytes.Buffer
		cmd := exec.Command(bin, "--config.file="+conf, "--storage.tsdb.path="+filepath.Join(dir, fmt.Sprint("data", try)),
			"--web.listen-address="+addr, "--log.level=warn")
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		base := "http://" + addr
		if err := waitReady(base, exited); err != nil {
			_ = cmd.Process.Kill()
			<-exited
			lastErr = fmt.Errorf("%w\n%s", err, logs.String())
			continue
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-exited
		})
		return base
	}
	t.Fatalf("prometheus did not start: %v", lastErr)
	return ""
}

// freePort returns a loopback address whose port was free just now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// waitReady waits until Prometheus answers its readiness probe, or exits.
func waitReady(base string, exited <-chan error) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("prometheus exited: %v", err)
		default:
		}
		if resp, err := http.Get(base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("prometheus not ready in 30 s")
}

// query runs an instant query through Prometheus's HTTP API and returns
// its vector by the one label the result varies by (or "").
func query(t *testing.T, base, q string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	if r.Status != "success" || r.Data.ResultType != "vector" {
		t.Fatalf("query %s: %s %s (%s)", q, r.Status, r.Error, r.Data.ResultType)
	}
	out := map[string]float64{}
	for _, s := range r.Data.Result {
		k := ""
		for _, v := range s.Metric {
			k = v
		}
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			t.Fatalf("query %s: value %v: %v", q, s.Value, err)
		}
		if !math.IsNaN(v) { // NaN: no data in the window yet
			out[k] = v
		}
	}
	return out
}

// TestCallMetricsByEndpoint: a call to an announced endpoint is labelled
// by its name; a name a one-port instance merely accepts is not, so
// clients cannot grow the label's values.
func TestCallMetricsByEndpoint(t *testing.T) {
	f := newFixture(t, startRedis(t), agent.Config{})
	f.register(registry.Instance{ID: "m", Service: "multi", Address: "10.0.0.3:80",
		Endpoints: []registry.Endpoint{{Name: "http", Address: "10.0.0.3:80"}, {Name: "grpc", Address: "10.0.0.3:90"}}})
	f.register(registry.Instance{ID: "o", Service: "one", Address: "10.0.0.4:80"})
	f.waitInstances("multi", 10*time.Second, has(1))
	f.waitInstances("one", 10*time.Second, has(1))
	for _, req := range []agent.PickRequest{{Service: "multi", Endpoint: "grpc"}, {Service: "one", Endpoint: "any-name"}} {
		p := f.pick(req)
		f.report(p.Token, "success", 1)
	}
	text := get(t, f.url+"/metrics")
	for _, want := range []string{
		`roster_client_calls_total{roster_endpoint="grpc",roster_outcome="success",roster_service="multi"} 1`,
		`roster_client_calls_total{roster_outcome="success",roster_service="one"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(text, "any-name") {
		t.Error("a name the client sent became a label value")
	}
}
