package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Two backends at three sizes: one line per backend in each of the four
// panels, every point drawn, and a legend naming both.
func TestDraw(t *testing.T) {
	in := filepath.Join(t.TempDir(), "runs.jsonl")
	lines := []string{}
	for _, b := range []string{"redis", "etcd"} {
		for _, n := range []string{"10", "100", "1000"} {
			lines = append(lines, `{"backend":"`+b+`","instances":`+n+`,"register_per_sec":500,"client_cpu_percent":2.5,"deregister_to_watchers":{"p99_ms":12},"conns_total":9}`)
		}
	}
	// Another series at the same size: in the table, not on the curves.
	lines = append(lines, `{"backend":"redis","series":"one-service","instances":1000,"register_per_sec":90,"client_cpu_percent":9,"deregister_to_watchers":{"p99_ms":99},"conns_total":9}`)
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	runs, err := read(in)
	if err != nil || len(runs) != 7 {
		t.Fatalf("read = %d runs, %v", len(runs), err)
	}
	var b strings.Builder
	draw(&b, runs)
	svg := b.String()
	if n := strings.Count(svg, "<polyline"); n != 2*len(panels) {
		t.Errorf("%d lines, want %d", n, 2*len(panels))
	}
	if n := strings.Count(svg, "<circle"); n != 6*len(panels) {
		t.Errorf("%d points, want %d", n, 6*len(panels))
	}
	for _, want := range []string{">redis<", ">etcd<", "</svg>"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

func TestReadRejectsBadJSON(t *testing.T) {
	in := filepath.Join(t.TempDir(), "bad.jsonl")
	os.WriteFile(in, []byte("{not json\n"), 0o600)
	if _, err := read(in); err == nil {
		t.Fatal("read accepted a malformed line")
	}
}

func TestTable(t *testing.T) {
	var b strings.Builder
	flaps := 2.0
	table(&b, []run{{Backend: "redis", Instances: 10, Services: 1, RegPerSec: 700, HoldMS: 300000}, {Backend: "etcd", Instances: 10, Services: 1, Flaps: &flaps}})
	rows := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(rows) != 4 || !strings.HasPrefix(rows[2], "| redis | 10 | 1 | 300 |") {
		t.Fatalf("table:\n%s", b.String())
	}
	// Flaps: "–" where the run did not count them, else the count.
	if !strings.Contains(rows[2], "| 0 / – |") || !strings.Contains(rows[3], "| 0 / 2 |") {
		t.Errorf("unhealthy / flaps cells:\n%s", b.String())
	}
}
