package backoff

import (
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
