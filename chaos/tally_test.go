package chaos

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// tally sums the faults' phases by backend and fault, for the table a run
// ends with (the figures of docs/reliability.md).
type tally struct {
	mu   sync.Mutex
	rows map[[2]string]*tallyRow // backend, fault
}

type tallyRow struct {
	runs          int
	calls, failed int64
	recoveries    []time.Duration
}

func (ta *tally) add(backend, fault string, p *phase) {
	calls, failed := p.total()
	ta.mu.Lock()
	defer ta.mu.Unlock()
	if ta.rows == nil {
		ta.rows = map[[2]string]*tallyRow{}
	}
	r := ta.rows[[2]string{backend, fault}]
	if r == nil {
		r = &tallyRow{}
		ta.rows[[2]string{backend, fault}] = r
	}
	r.runs++
	r.calls += calls
	r.failed += failed
	if p.recovery >= 0 {
		r.recoveries = append(r.recoveries, p.recovery)
	}
}

// table formats the rows in the order of backends and faults.
func (ta *tally) table() string {
	var keys [][2]string
	for _, be := range backends {
		for _, f := range be.faultsOf() {
			keys = append(keys, [2]string{be.name, f.name})
		}
	}
	return ta.tableOf(keys)
}

// tableOf formats the rows of keys (backend, fault) that ran, in order.
func (ta *tally) tableOf(keys [][2]string) string {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%-11s %-16s %4s %8s %6s  %s\n", "backend", "fault", "runs", "calls", "failed", "recovery min / median / max")
	for _, k := range keys {
		r := ta.rows[k]
		if r == nil {
			continue
		}
		rec := "-"
		if n := len(r.recoveries); n > 0 {
			s := slices.Clone(r.recoveries)
			slices.Sort(s)
			rec = fmt.Sprintf("%.2fs / %.2fs / %.2fs", s[0].Seconds(), s[n/2].Seconds(), s[n-1].Seconds())
		}
		fmt.Fprintf(&b, "%-11s %-16s %4d %8d %6d  %s\n", k[0], k[1], r.runs, r.calls, r.failed, rec)
	}
	return b.String()
}
