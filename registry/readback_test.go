package registry

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/registry/driver"
)

// quietChecked is a checked wrapper whose reporter counts and never
// logs: its last line is an hour ahead, so every report is suppressed.
func quietChecked(loopback bool) checked {
	rep := &reporter{log: slog.New(slog.NewTextHandler(io.Discard, nil)), last: time.Now().Add(time.Hour)}
	return checked{rep: rep, loopback: loopback}
}

// variant returns one of the forms the record id can take: good ones
// differing in fields, one not canonical, and bad ones of every kind.
func variant(id string, n int) driver.Instance {
	in := driver.Instance{ID: id, Service: "s", Address: "10.0.0.1:80", Weight: 1}
	switch n {
	case 1:
		in.Weight = 2
	case 2:
		in.Tags = []string{"canary"}
	case 3:
		in.Metadata = map[string]string{"k": "v"}
	case 4:
		in.Address = "H:1" // served as h:1
	case 5:
		in.Address = "127.0.0.1:80" // served only when loopback is allowed
	case 6:
		in.Endpoints = []driver.Endpoint{{Name: "grpc", Address: "[::1]:90"}}
	case 7:
		in.Address = "h:+80" // bad: port does not parse
	case 8:
		in.Service = "t" // bad: another service's record
	case 9:
		in.Weight = 70000 // bad: above MaxWeight
	case 10:
		in.Tags = []string{""} // bad: empty tag
	}
	return in
}

const variants = 11

// A watch stream that reuses the verdicts of unchanged records serves
// exactly what checking every record would, on random sequences of
// snapshots with records changed, unchanged, newly bad, healed, gone,
// repeated and out of order. It reports a bad record when it is new or
// changed, and a repeated ID every time.
func TestCheckedStreamMatchesFullCheck(t *testing.T) {
	for _, loopback := range []bool{false, true} {
		t.Run(fmt.Sprintf("loopback=%v", loopback), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			for seq := range 200 {
				full, inc := quietChecked(loopback), quietChecked(loopback)
				st := &checkedStream{c: inc, service: "s"}
				form := map[string]int{}
				last := map[string]driver.Instance{} // first record per ID last time
				for step := range 30 {
					var ins []driver.Instance
					for k := range 12 {
						id := fmt.Sprintf("i%02d", k)
						if rng.IntN(5) == 0 {
							continue // gone from this snapshot
						}
						if rng.IntN(3) == 0 {
							form[id] = rng.IntN(variants)
						}
						ins = append(ins, variant(id, form[id]))
						if rng.IntN(20) == 0 {
							ins = append(ins, variant(id, rng.IntN(variants)))
						}
					}
					if rng.IntN(4) == 0 {
						rng.Shuffle(len(ins), func(a, b int) { ins[a], ins[b] = ins[b], ins[a] })
					}
					s := Snapshot{Service: "s", Instances: ins, Revision: uint64(step)}
					before := inc.rep.suppressed
					want, got := full.filter("s", s), st.filter(s)
					if !got.SameInstances(want) || got.Revision != want.Revision || got.Service != want.Service {
						t.Fatalf("sequence %d step %d: served %+v, full check %+v", seq, step, got.Instances, want.Instances)
					}
					if n, w := inc.rep.suppressed-before, wantReports(sortedByID(ins), last, loopback); n != w {
						t.Fatalf("sequence %d step %d: %d reports, want %d", seq, step, n, w)
					}
				}
			}
		})
	}
}

// wantReports counts the reports expected of ins (sorted) after the
// snapshot whose first record per ID was last, and updates last.
func wantReports(ins []driver.Instance, last map[string]driver.Instance, loopback bool) int {
	n := 0
	now := map[string]driver.Instance{}
	for i, in := range ins {
		if i > 0 && in.ID == ins[i-1].ID {
			n++
			continue
		}
		now[in.ID] = in
		prev, seen := last[in.ID]
		if _, err := checkRecord("s", in, loopback); err != nil && (!seen || !prev.Equal(in)) {
			n++
		}
	}
	clear(last)
	for id, in := range now {
		last[id] = in
	}
	return n
}

// benchInstances returns n instances as a driver decodes them, with
// strings of their own, so that comparing two copies reads the bytes.
func benchInstances(n int) []driver.Instance {
	ins := make([]driver.Instance, n)
	for i := range ins {
		ins[i] = driver.Instance{
			ID:       strings.Clone(fmt.Sprintf("svc-10.0.%d.%03d-8080-%08x", i/250, i%250, i*7919)),
			Service:  strings.Clone("svc"),
			Address:  fmt.Sprintf("10.0.%d.%d:8080", i/250, i%250),
			Version:  strings.Clone("1.4.2"),
			Zone:     strings.Clone("zone-a"),
			Weight:   100,
			Tags:     []string{strings.Clone("canary"), strings.Clone("grpc")},
			Metadata: map[string]string{strings.Clone("team"): strings.Clone("search"), strings.Clone("build"): strings.Clone("abc123")},
		}
	}
	return ins
}

// BenchmarkCheckedStream1000 is the read-back check of one watch
// snapshot of 1,000 instances of which one changed since the previous
// snapshot: full checks every record (as before, and as List does),
// changed reuses the verdicts of the 999 unchanged ones. Two copies of
// the instances alternate, with strings of their own, as a driver that
// decodes every snapshot afresh hands them. record-equal and
// record-check are one record's Equal and one record's check.
func BenchmarkCheckedStream1000(b *testing.B) {
	const n = 1000
	copies := [2][]driver.Instance{benchInstances(n), benchInstances(n)}
	// snapshot i holds the weights after i changes: record i%n changes,
	// and the record changed by snapshot i-1 is brought up to date.
	weights := make([]uint32, n)
	snapshot := func(i int) Snapshot {
		cur, k := copies[i%2], i%n
		weights[k] = weights[k]%100 + 1
		cur[k].Weight = weights[k]
		p := (k + n - 1) % n
		cur[p].Weight = weights[p]
		return Snapshot{Service: "svc", Instances: cur}
	}
	reset := func() {
		for i := range weights {
			weights[i] = 100
			copies[0][i].Weight, copies[1][i].Weight = 100, 100
		}
	}
	c := quietChecked(false)
	b.Run("full", func(b *testing.B) {
		reset()
		for i := 0; b.Loop(); i++ {
			if s := c.filter("svc", snapshot(i)); len(s.Instances) != n {
				b.Fatalf("%d served, want %d", len(s.Instances), n)
			}
		}
	})
	b.Run("changed", func(b *testing.B) {
		reset()
		st := &checkedStream{c: c, service: "svc"}
		for i := 0; b.Loop(); i++ {
			if s := st.filter(snapshot(i)); len(s.Instances) != n {
				b.Fatalf("%d served, want %d", len(s.Instances), n)
			}
		}
	})
	x, y := copies[0][n/2], copies[1][n/2]
	b.Run("record-equal", func(b *testing.B) {
		for b.Loop() {
			if !x.Equal(y) {
				b.Fatal("copies differ")
			}
		}
	})
	b.Run("record-check", func(b *testing.B) {
		for b.Loop() {
			if _, err := checkRecord("svc", x, false); err != nil {
				b.Fatal(err)
			}
		}
	})
	if c.rep.suppressed != 0 {
		b.Fatalf("%d records skipped, want none", c.rep.suppressed)
	}
}
