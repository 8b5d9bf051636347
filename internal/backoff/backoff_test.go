package backoff

import (
	"math"
	"testing"
	"time"
)

func TestDelayBounds(t *testing.T) {
	p := Policy{Base: 100 * time.Millisecond, Max: 2 * time.Second}
	for attempt := 0; attempt < 50; attempt++ {
		want := p.Base << min(attempt, 20)
		if want > p.Max || want <= 0 {
			want = p.Max
		}
		for i := 0; i < 100; i++ {
			d := p.Delay(attempt)
			if d < want/2 || d > want {
				t.Fatalf("attempt %d: delay %v outside [%v, %v]", attempt, d, want/2, want)
			}
		}
	}
}

func TestDelayZeroValue(t *testing.T) {
	var p Policy
	if d := p.Delay(0); d < 50*time.Millisecond || d > 100*time.Millisecond {
		t.Fatalf("zero policy first delay %v, want within [50ms, 100ms]", d)
	}
	if d := p.Delay(1000); d < 5*time.Second || d > 10*time.Second {
		t.Fatalf("zero policy capped delay %v, want within [5s, 10s]", d)
	}
}

func TestJitter(t *testing.T) {
	d := time.Second
	lo, hi := d, time.Duration(0)
	for i := 0; i < 1000; i++ {
		j := Jitter(d, 0.2)
		if j < 800*time.Millisecond || j > d {
			t.Fatalf("jitter %v outside [800ms, 1s]", j)
		}
		lo, hi = min(lo, j), max(hi, j)
	}
	if hi-lo < 50*time.Millisecond {
		t.Fatalf("jitter spread %v: not random", hi-lo)
	}
	if Jitter(d, 0) != d {
		t.Fatal("zero fraction must not change the duration")
	}
}

// TestNoOverflow: any Duration a user can pass, up to math.MaxInt64, gives
// a delay within [0, max] at every attempt, never a panic (rand.N panics
// on a non-positive bound, which a wrapped doubling used to produce).
func TestNoOverflow(t *testing.T) {
	huge := []time.Duration{math.MaxInt64, math.MaxInt64 / 2, math.MaxInt64/2 + 1, 1 << 62, time.Hour}
	for _, max := range huge {
		p := Policy{Base: 200 * time.Millisecond, Max: max}
		for attempt := 0; attempt < 200; attempt++ {
			if d := p.Delay(attempt); d < 0 || d > max {
				t.Fatalf("Policy{200ms, %v}.Delay(%d) = %v, want within [0, %v]", max, attempt, d, max)
			}
		}
		for _, base := range huge {
			if d := Exp(base, 70, max); d <= 0 || d > max {
				t.Fatalf("Exp(%v, 70, %v) = %v", base, max, d)
			}
		}
		if d := Jitter(max, 1); d < 0 || d > max {
			t.Fatalf("Jitter(%v, 1) = %v", max, d)
		}
	}
}

func TestSaturatingArithmetic(t *testing.T) {
	cases := []struct {
		got, want time.Duration
	}{
		{Mul(time.Second, 3), 3 * time.Second},
		{Mul(1<<62, 3), math.MaxInt64},
		{Mul(math.MaxInt64, 2), math.MaxInt64},
		{Mul(-time.Second, 2), 0},
		{Mul(time.Second, -2), 0},
		{Add(time.Second, time.Second), 2 * time.Second},
		{Add(math.MaxInt64, time.Nanosecond), math.MaxInt64},
		{Exp(time.Second, 3, time.Minute), 8 * time.Second},
		{Exp(time.Second, 100, time.Minute), time.Minute},
		{Exp(time.Second, -1, time.Minute), time.Second},
	}
	for i, c := range cases {
		if c.got != c.want {
			t.Errorf("case %d: got %v, want %v", i, c.got, c.want)
		}
	}
}
