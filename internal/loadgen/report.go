package loadgen

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/internal/tcpcount"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// Report is what a run measured. Durations are milliseconds; a count
// that could not be measured is -1.
type Report struct {
	Instances int      `json:"instances"`
	Services  int      `json:"services"`
	Processes int      `json:"processes"`
	Watchers  int      `json:"watchers"`
	TTL       Duration `json:"ttl"`
	Server    string   `json:"server,omitempty"` // what the server says it is, where it says

	RegisterMS     float64 `json:"register_ms"`
	RegisterPerSec float64 `json:"register_per_sec"`

	WatchOpenMS                float64 `json:"watch_open_ms"`     // until every watcher has every service
	WatchConvergeMS            float64 `json:"watch_converge_ms"` // from the first registration until every watcher has every instance
	HeapPerWatchedServiceBytes int64   `json:"heap_per_watched_service_bytes"`

	HoldMS               float64 `json:"hold_ms"`
	ClientCPUPercent     float64 `json:"client_cpu_percent"`      // of one core, whole process
	ServerCommandsPerSec float64 `json:"server_commands_per_sec"` // Redis only; 0 elsewhere
	UnhealthyLeases      int     `json:"unhealthy_leases"`        // at the end of the hold
	// Flaps counts, during the hold, leases that left the healthy state
	// and instances that left a watcher's view (none is deregistered then).
	Flaps int `json:"flaps"`

	Lookup     Latency `json:"lookup"`
	Deregister Latency `json:"deregister_to_watchers"`
	Crash      Latency `json:"crash_to_watchers"`

	ConnsRegistering int `json:"conns_registering"` // opened by the P registering processes
	ConnsWatching    int `json:"conns_watching"`    // opened by the W watching processes
	ConnsTotal       int `json:"conns_total"`

	serverBase int
}

// Latency summarizes timed operations.
type Latency struct {
	Count int     `json:"count"`
	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
}

// Duration prints as Go duration text in JSON ("10s").
type Duration time.Duration

func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

func summarize(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(p float64) float64 { return ms(s[min(len(s)-1, int(p*float64(len(s))))]) }
	return Latency{Count: len(s), P50MS: at(0.50), P99MS: at(0.99), MaxMS: ms(s[len(s)-1])}
}

// WriteTable prints the report for people.
func (r Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	lat := func(l Latency) string {
		return fmt.Sprintf("p50 %.1fms  p99 %.1fms  max %.1fms  (n=%d)", l.P50MS, l.P99MS, l.MaxMS, l.Count)
	}
	rows := [][2]string{
		{"instances / services", fmt.Sprintf("%d / %d (from %d processes, watched by %d)", r.Instances, r.Services, r.Processes, r.Watchers)},
		{"registration", fmt.Sprintf("%.0f/s (%.0fms for all)", r.RegisterPerSec, r.RegisterMS)},
		{"watches opened", fmt.Sprintf("%.0fms (first snapshot of every service at every watcher)", r.WatchOpenMS)},
		{"registered → watchers", fmt.Sprintf("%.0fms (from the first registration until every watcher has every instance)", r.WatchConvergeMS)},
		{"heartbeat client CPU", fmt.Sprintf("%.1f%% of one core over %.0fs (TTL %v)", r.ClientCPUPercent, r.HoldMS/1000, time.Duration(r.TTL))},
		{"server commands", perSec(r.ServerCommandsPerSec)},
		{"unhealthy leases", strconv.Itoa(r.UnhealthyLeases)},
		{"flaps during the hold", strconv.Itoa(r.Flaps)},
		{"lookup", lat(r.Lookup)},
		{"deregister → watchers", lat(r.Deregister)},
		{"crash → watchers", lat(r.Crash)},
		{"heap per watched service", fmt.Sprintf("%d B", r.HeapPerWatchedServiceBytes)},
		{"connections", fmt.Sprintf("%s registering, %s watching, %s in all", conns(r.ConnsRegistering), conns(r.ConnsWatching), conns(r.ConnsTotal))},
	}
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
	}
	return tw.Flush()
}

func perSec(v float64) string {
	if v == 0 {
		return "not exposed by this backend"
	}
	return fmt.Sprintf("%.0f/s", v)
}

func conns(n int) string {
	if n < 0 {
		return "?"
	}
	return strconv.Itoa(n)
}

// cpuTime is the process's user + system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisClient returns the Redis client under r, if r is on Redis.
func redisClient(r *registry.Registry) goredis.UniversalClient {
	var d driver.Driver
	if !r.As(&d) {
		return nil
	}
	if c, ok := d.(interface {
		Client() goredis.UniversalClient
	}); ok {
		return c.Client()
	}
	return nil
}

// serverStats names the server, where the backend says.
func serverStats(ctx context.Context, r *registry.Registry) string {
	c := redisClient(r)
	if c == nil {
		return ""
	}
	v := infoField(ctx, c, "server", "redis_version")
	if v == "" {
		return ""
	}
	return "redis " + v
}

// serverCommands is Redis's total_commands_processed, or -1.
func serverCommands(ctx context.Context, r *registry.Registry) int64 {
	c := redisClient(r)
	if c == nil {
		return -1
	}
	n, err := strconv.ParseInt(infoField(ctx, c, "stats", "total_commands_processed"), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

func infoField(ctx context.Context, c goredis.UniversalClient, section, field string) string {
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// defaultPorts are the servers' ports when a URL names none.
var defaultPorts = map[string]string{"redis": "6379", "rediss": "6379", "etcd": "2379", "etcds": "2379", "consul": "8500", "consuls": "8501"}

// delta is after - before, or -1 when either is unknown.
func delta(after, before int) int {
	if after < 0 || before < 0 {
		return -1
	}
	return after - before
}

// serverConns counts this machine's established TCP connections to the
// ports of the servers in rawURL, or -1.
func serverConns(rawURL string) int {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return -1
	}
	var ports []int
	for _, h := range strings.Split(u.Host, ",") {
		_, p, err := net.SplitHostPort(h)
		if err != nil {
			p = defaultPorts[strings.SplitN(u.Scheme, "+", 2)[0]]
		}
		if n, err := strconv.Atoi(p); err == nil {
			ports = append(ports, n)
		}
	}
	if len(ports) == 0 {
		return -1 // in-process, or not a host:port
	}
	n, err := tcpcount.Established(ports...)
	if err != nil {
		return -1
	}
	return n
}
