// Command plot draws the cost curves of "roster bench" runs as an SVG:
//
//	go run ./tools/plot -in docs/bench/scale.jsonl -out docs/scale.svg
//
// It reads the JSON reports, one per line. scripts/scale-bench.sh writes
// them, each with a "backend" field added. It plots a few figures against
// the number of instances, one line per backend, on log–log axes.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"slices"
	"strings"
)

// run is the part of a report the plot reads.
type run struct {
	Backend    string   `json:"backend"`
	Series     string   `json:"series"` // "" or "curve": drawn; other series are in the table only
	HoldMS     float64  `json:"hold_ms"`
	Flaps      *float64 `json:"flaps"` // nil: not counted by that run's roster bench
	Load       float64  `json:"load"`
	Instances  float64  `json:"instances"`
	Services   float64  `json:"services"`
	RegPerSec  float64  `json:"register_per_sec"`
	CPU        float64  `json:"client_cpu_percent"`
	Commands   float64  `json:"server_commands_per_sec"`
	Unhealthy  float64  `json:"unhealthy_leases"`
	Deregister latency  `json:"deregister_to_watchers"`
	Crash      latency  `json:"crash_to_watchers"`
	Lookup     latency  `json:"lookup"`
	Heap       float64  `json:"heap_per_watched_service_bytes"`
	ConnsW     float64  `json:"conns_watching"`
	Conns      float64  `json:"conns_total"`
}

type latency struct {
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// panel is one chart: a figure of each run against its instances.
type panel struct {
	title string
	value func(run) float64
}

var panels = []panel{
	{"registrations / s", func(r run) float64 { return r.RegPerSec }},
	{"heartbeat CPU, % of a core", func(r run) float64 { return r.CPU }},
	{"deregister → watchers p99, ms", func(r run) float64 { return r.Deregister.P99 }},
	{"connections to the server", func(r run) float64 { return r.Conns }},
}

var colors = map[string]string{"redis": "#d62728", "etcd": "#1f77b4", "consul": "#e377c2", "mem": "#2ca02c"}

func main() {
	in := flag.String("in", "docs/bench/scale.jsonl", "JSON reports, one per line")
	out := flag.String("out", "docs/scale.svg", "SVG to write")
	md := flag.Bool("md", false, "print a Markdown table of the runs to stdout too")
	flag.Parse()
	runs, err := read(*in)
	if err != nil {
		log.Fatal(err)
	}
	if *md {
		table(os.Stdout, runs)
	}
	f, err := os.Create(*out)
	if err != nil {
		log.Fatal(err)
	}
	draw(f, runs)
	if err := f.Close(); err != nil {
		log.Fatal(err)
	}
}

func read(path string) ([]run, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var runs []run
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var r run
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		runs = append(runs, r)
	}
	return runs, sc.Err()
}

const (
	pw, ph = 360, 240 // panel size
	margin = 50
)

// draw writes the panels side by side, two per row.
func draw(w io.Writer, runs []run) {
	width, height := 2*(pw+margin)+margin, 2*(ph+margin)+margin+30
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for i, p := range panels {
		x0, y0 := margin+(i%2)*(pw+margin), margin+(i/2)*(ph+margin)
		drawPanel(w, p, runs, float64(x0), float64(y0))
	}
	legend(w, runs, margin, height-20)
	fmt.Fprintln(w, "</svg>")
}

func drawPanel(w io.Writer, p panel, runs []run, x0, y0 float64) {
	xs, ys := axisRange(runs, func(r run) float64 { return r.Instances }), axisRange(runs, p.value)
	px := func(v float64) float64 { return x0 + pw*frac(v, xs) }
	py := func(v float64) float64 { return y0 + ph - ph*frac(v, ys) }
	fmt.Fprintf(w, `<rect x="%.0f" y="%.0f" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", x0, y0, pw, ph)
	fmt.Fprintf(w, `<text x="%.0f" y="%.0f" font-size="13">%s</text>`+"\n", x0, y0-8, p.title)
	for d := xs[0]; d <= xs[1]; d *= 10 {
		fmt.Fprintf(w, `<text x="%.0f" y="%.0f" text-anchor="middle">%s</text>`+"\n", px(d), y0+ph+14, label(d))
	}
	for d := ys[0]; d <= ys[1]; d *= 10 {
		fmt.Fprintf(w, `<line x1="%.0f" x2="%.0f" y1="%.0f" y2="%.0f" stroke="#eee"/>`+"\n", x0, x0+pw, py(d), py(d))
		fmt.Fprintf(w, `<text x="%.0f" y="%.0f" text-anchor="end">%s</text>`+"\n", x0-4, py(d)+4, label(d))
	}
	for _, b := range backends(runs) {
		var pts []string
		for _, r := range runs {
			if v := p.value(r); r.Backend == b && v > 0 && r.onCurve() {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(r.Instances), py(v)))
				fmt.Fprintf(w, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(r.Instances), py(v), color(b))
			}
		}
		fmt.Fprintf(w, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), color(b))
	}
	fmt.Fprintf(w, `<text x="%.0f" y="%.0f" text-anchor="middle">instances</text>`+"\n", x0+pw/2, y0+ph+28)
}

// onCurve reports whether r belongs to the cost curves (N = 10 … 10,000
// with S = N/10): the other series (one service, long holds) would draw a
// second point at the same N.
func (r run) onCurve() bool { return r.Series == "" || r.Series == "curve" }

// axisRange is the decades covering the positive values of f.
func axisRange(runs []run, f func(run) float64) [2]float64 {
	lo, hi := math.Inf(1), 0.0
	for _, r := range runs {
		if v := f(r); v > 0 {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if hi == 0 {
		return [2]float64{1, 10}
	}
	lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	if hi <= lo {
		hi = lo * 10
	}
	return [2]float64{lo, hi}
}

// frac places v on a log axis, 0 to 1.
func frac(v float64, r [2]float64) float64 {
	return (math.Log10(v) - math.Log10(r[0])) / (math.Log10(r[1]) - math.Log10(r[0]))
}

func label(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%gk", v/1000)
	}
	return fmt.Sprintf("%g", v)
}

func backends(runs []run) []string {
	var out []string
	for _, r := range runs {
		if !slices.Contains(out, r.Backend) {
			out = append(out, r.Backend)
		}
	}
	return out
}

func color(b string) string {
	if c, ok := colors[b]; ok {
		return c
	}
	return "#555"
}

func legend(w io.Writer, runs []run, x, y int) {
	for i, b := range backends(runs) {
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", x+i*90, y-10, color(b), x+i*90+16, y, b)
	}
}

// table prints the runs as a Markdown table.
func table(w io.Writer, runs []run) {
	fmt.Fprintln(w, "| backend | N | S | hold s | load | reg/s | heartbeat CPU | server cmd/s | unhealthy / flaps | lookup p50/p99 ms | deregister → watchers p50/p99/max ms | crash → watchers p50/max s | heap/watched svc | conns watching / all |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range runs {
		cmds, flaps := "–", "–"
		if r.Commands > 0 {
			cmds = fmt.Sprintf("%.0f", r.Commands)
		}
		if r.Flaps != nil {
			flaps = fmt.Sprintf("%g", *r.Flaps)
		}
		fmt.Fprintf(w, "| %s | %g | %g | %.0f | %.1f | %.0f | %.1f%% | %s | %g / %s | %.2f / %.2f | %.1f / %.1f / %.1f | %.1f / %.1f | %.1f KiB | %g / %g |\n",
			r.Backend, r.Instances, r.Services, r.HoldMS/1000, r.Load, r.RegPerSec, r.CPU, cmds, r.Unhealthy, flaps,
			r.Lookup.P50, r.Lookup.P99, r.Deregister.P50, r.Deregister.P99, r.Deregister.Max,
			r.Crash.P50/1000, r.Crash.Max/1000, r.Heap/1024, r.ConnsW, r.Conns)
	}
}
