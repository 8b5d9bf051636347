package main

import (
	"os"
	"path/filepath"
)

// One report line of "roster bench", read and printed as a row of the
// Markdown table that -md adds to the SVG.
func Example() {
	dir, err := os.MkdirTemp("", "plot-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	in := filepath.Join(dir, "scale.jsonl")
	report := `{"backend":"etcd","instances":1000,"services":10,"hold_ms":10000,"flaps":0,"load":1.5,"register_per_sec":850,` +
		`"client_cpu_percent":3.2,"lookup":{"p50_ms":0.4,"p99_ms":1.2},` +
		`"deregister_to_watchers":{"p50_ms":5,"p99_ms":12,"max_ms":30},"crash_to_watchers":{"p50_ms":3100,"max_ms":3400},` +
		`"heap_per_watched_service_bytes":4096,"conns_watching":1,"conns_total":2}` + "\n"
	if err := os.WriteFile(in, []byte(report), 0o600); err != nil {
		panic(err)
	}
	runs, err := read(in)
	if err != nil {
		panic(err)
	}
	table(os.Stdout, runs)
	// Output:
	// | backend | N | S | hold s | load | reg/s | heartbeat CPU | server cmd/s | unhealthy / flaps | lookup p50/p99 ms | deregister → watchers p50/p99/max ms | crash → watchers p50/max s | heap/watched svc | conns watching / all |
	// |---|---|---|---|---|---|---|---|---|---|---|---|---|---|
	// | etcd | 1000 | 10 | 10 | 1.5 | 850 | 3.2% | – | 0 / 0 | 0.40 / 1.20 | 5.0 / 12.0 / 30.0 | 3.1 / 3.4 | 4.0 KiB | 1 / 2 |
}
