package main

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	d := make([]time.Duration, 200)
	for i := range d {
		d[i] = time.Duration(i+1) * time.Millisecond
	}
	for _, c := range []struct {
		p    int
		want time.Duration
	}{{50, 100 * time.Millisecond}, {99, 198 * time.Millisecond}, {100, 200 * time.Millisecond}} {
		if got := pct(d, c.p); got != c.want {
			t.Errorf("p%d of 1..200 ms = %v, want %v", c.p, got, c.want)
		}
	}
	if got := pct(nil, 50); got != 0 {
		t.Errorf("p50 of nothing = %v", got)
	}
}

// A view records when each address left, and forgets it if it returns.
func TestViewGoneAt(t *testing.T) {
	v := newView()
	v.update([]string{"a", "b"})
	before := time.Now()
	v.update([]string{"a"})
	at, ok := v.gone("b")
	if !ok || at.Before(before) {
		t.Fatalf("b left at %v (%v), want after %v", at, ok, before)
	}
	if _, ok := v.gone("a"); ok {
		t.Fatal("a is still there but has a time it left")
	}
	v.update([]string{"a", "b"})
	if _, ok := v.gone("b"); ok {
		t.Fatal("b came back but still has a time it left")
	}
	if !v.wait(time.Second, func(s map[string]bool) bool { return len(s) == 2 }) {
		t.Fatal("wait on a condition that holds returned false")
	}
	if v.wait(10*time.Millisecond, func(s map[string]bool) bool { return len(s) == 3 }) {
		t.Fatal("wait on a condition that never holds returned true")
	}
	if n := len(v.since(before)); n != 2 {
		t.Fatalf("%d updates since before, want 2", n)
	}
}
