package selector

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/roster-go/roster/registry"
)

var sizes = []int{10, 100, 1000}

// benchWeights gives instance i weight 50 + 10×(i mod 10): unequal, so
// weighted strategies do real work.
func benchSnap(n int) (s snapT) {
	w := make([]uint32, n)
	for i := range w {
		w[i] = uint32(50 + 10*(i%10))
	}
	return snap(n, w...)
}

type snapT = registry.Snapshot

func newBench(b *testing.B, st Strategy, n int) *Selector {
	s := mustNew(b, WithStrategy(st))
	s.Update(benchSnap(n))
	return s
}

// keys are precomputed so that key generation is not measured.
var keys = func() []string {
	k := make([]string, 1024)
	for i := range k {
		k[i] = fmt.Sprint("user-", i)
	}
	return k
}()

func BenchmarkPick(b *testing.B) {
	ctx := context.Background()
	for _, st := range Strategies() {
		for _, n := range append(sizes, 10000) {
			b.Run(fmt.Sprintf("%s/n=%d", st, n), func(b *testing.B) {
				s := newBench(b, st, n)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					_, done, err := s.Pick(ctx, PickOptions{Key: keys[i&1023]})
					if err != nil {
						b.Fatal(err)
					}
					done.Done(nil, time.Millisecond)
					i++
				}
			})
		}
	}
}

// BenchmarkPickEndpoint picks the "grpc" endpoint of instances that
// announce http and grpc: BenchmarkPick's n=100, through the name's
// cached picker.
func BenchmarkPickEndpoint(b *testing.B) {
	ctx := context.Background()
	for _, st := range Strategies() {
		b.Run(fmt.Sprintf("%s/n=100", st), func(b *testing.B) {
			s := mustNew(b, WithStrategy(st))
			snap := benchSnap(100)
			for i := range snap.Instances {
				in := &snap.Instances[i]
				in.Endpoints = []registry.Endpoint{{Name: "http", Address: in.Address}, {Name: "grpc", Address: "10.9.0.1:90"}}
			}
			s.Update(snap)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_, done, err := s.Pick(ctx, PickOptions{Key: keys[i&1023], Endpoint: "grpc"})
				if err != nil {
					b.Fatal(err)
				}
				done.Done(nil, time.Millisecond)
				i++
			}
		})
	}
}

func BenchmarkPickParallel(b *testing.B) {
	ctx := context.Background()
	for _, st := range Strategies() {
		for _, n := range sizes {
			b.Run(fmt.Sprintf("%s/n=%d", st, n), func(b *testing.B) {
				s := newBench(b, st, n)
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						_, done, err := s.Pick(ctx, PickOptions{Key: keys[i&1023]})
						if err != nil {
							b.Fatal(err)
						}
						done.Done(nil, time.Millisecond)
						i++
					}
				})
			})
		}
	}
}

// BenchmarkUpdate measures a snapshot rebuild where one instance of n is
// replaced (the common change), alternating between two snapshots; the
// bytes per op are the memory of one snapshot's picker.
func BenchmarkUpdate(b *testing.B) {
	for _, st := range Strategies() {
		for _, n := range append(sizes, 10000) {
			b.Run(fmt.Sprintf("%s/n=%d", st, n), func(b *testing.B) {
				s := newBench(b, st, n)
				a, c := benchSnap(n), benchSnap(n+1)
				c.Instances = c.Instances[1:]
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if i&1 == 0 {
						s.Update(c)
					} else {
						s.Update(a)
					}
					i++
				}
			})
		}
	}
}

// BenchmarkFirstBuild measures a selector's first build of a 10,000
// instance snapshot: no state, no ring points to reuse.
func BenchmarkFirstBuild(b *testing.B) {
	sn := benchSnap(10000)
	for _, st := range Strategies() {
		b.Run(fmt.Sprintf("%s/n=10000", st), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s := mustNew(b, WithStrategy(st))
				s.Update(sn)
			}
		})
	}
}

// BenchmarkPickFinish is a pick and its Done.Finish: the whole cost a
// caller of p2c_ewma pays, the latency measurement included.
func BenchmarkPickFinish(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("p2c_ewma/n=%d", n), func(b *testing.B) {
			s := newBench(b, P2CEWMA, n)
			b.ReportAllocs()
			for b.Loop() {
				_, done, err := s.Pick(ctx, PickOptions{})
				if err != nil {
					b.Fatal(err)
				}
				done.Finish(nil)
			}
		})
	}
}

// BenchmarkPickLocality: a pick across locality tiers (WithLocality),
// 100 instances, a quarter local, one of the local ones ejected.
func BenchmarkPickLocality(b *testing.B) {
	ctx := context.Background()
	for _, st := range []Strategy{RoundRobin, P2CEWMA, ConsistentHash} {
		b.Run(string(st), func(b *testing.B) {
			s := mustNew(b, WithStrategy(st), WithLocality("a"))
			s.Update(zoned(100, 25))
			s.SetUsable("i0000", false)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_, done, err := s.Pick(ctx, PickOptions{Key: keys[i&1023]})
				if err != nil {
					b.Fatal(err)
				}
				done.Done(nil, time.Millisecond)
				i++
			}
		})
	}
}

// BenchmarkPickReconfigured compares, in one run, picks from a selector
// built with its options ("new") and from one given the same options by
// Reconfigure ("reconfigured"), plain and with a 5 % canary split: what a
// per-service policy changed live costs a pick (docs/benchmarks.md).
func BenchmarkPickReconfigured(b *testing.B) {
	ctx := context.Background()
	sn := benchSnap(100)
	for i := range 5 {
		sn.Instances[i].Version = "v2"
	}
	split := WithSplit(Split{Route: Route{Version: "v2"}, Percent: 5})
	for _, st := range []Strategy{RoundRobin, P2CEWMA, ConsistentHash} {
		for _, tc := range []struct {
			name string
			opts []Option
		}{{"plain", []Option{WithStrategy(st)}}, {"split", []Option{WithStrategy(st), split}}} {
			for _, how := range []string{"new", "reconfigured"} {
				b.Run(fmt.Sprintf("%s/%s/%s", st, tc.name, how), func(b *testing.B) {
					s := mustNew(b, tc.opts...)
					if how == "reconfigured" {
						s = mustNew(b, WithStrategy(Random))
					}
					s.Update(sn)
					if how == "reconfigured" {
						if err := s.Reconfigure(tc.opts...); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportAllocs()
					i := 0
					for b.Loop() {
						_, done, err := s.Pick(ctx, PickOptions{Key: keys[i&1023]})
						if err != nil {
							b.Fatal(err)
						}
						done.Done(nil, time.Millisecond)
						i++
					}
				})
			}
		}
	}
}

// BenchmarkPickRegion: a pick across three locality tiers (WithLocality,
// WithRegion), 99 instances, a third in each zone; a third of zone a is
// ejected, so the zone keeps 93% of the picks and its region takes the
// rest.
func BenchmarkPickRegion(b *testing.B) {
	ctx := context.Background()
	sn := snap(99)
	for i := range sn.Instances {
		sn.Instances[i].Zone, sn.Instances[i].Region = [...]string{"a", "b", "c"}[i%3], [...]string{"r1", "r1", "r2"}[i%3]
	}
	for _, st := range []Strategy{RoundRobin, P2CEWMA, ConsistentHash} {
		b.Run(string(st), func(b *testing.B) {
			s := mustNew(b, WithStrategy(st), WithLocality("a"), WithRegion("r1"))
			s.Update(sn)
			for i := 0; i < 33*3; i += 3 * 3 { // every third instance of zone a
				s.SetUsable(sn.Instances[i].ID, false)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_, done, err := s.Pick(ctx, PickOptions{Key: keys[i&1023]})
				if err != nil {
					b.Fatal(err)
				}
				done.Done(nil, time.Millisecond)
				i++
			}
		})
	}
}
