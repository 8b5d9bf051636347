package selector

import (
	"math"
	"testing"
)

func TestDecayApprox(t *testing.T) {
	for x := 0.0; x < 3; x += 1e-4 {
		if d := math.Abs(decay(x) - math.Exp(-x)); d > 3e-9 {
			t.Fatalf("x=%v err %v", x, d)
		}
	}
}
