package middleware

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/roster-go/roster/registry"
)

// failTimes reports n failures of an instance of zone.
func failTimes(q *Quarantine, id, zone string, n, total int) {
	for range n {
		q.reportIn("svc", id, zone, "", Retryable, total)
	}
}

// TestZoneEjectionCap: over the 10% cap, a zone failing on its own is
// ejected whole while the other zone is healthy and half the service
// stays admitted; a failure it cannot place keeps the cap.
func TestZoneEjectionCap(t *testing.T) {
	cases := []struct {
		name  string
		zones []string // of i0..; the first nFail fail
		nFail int
		want  int // ejected
	}{
		{"zone of two among four", []string{"a", "a", "b", "b"}, 2, 2},
		{"zone of three among four", []string{"a", "a", "a", "b"}, 3, 2},
		{"one zone only", []string{"a", "a", "a", "a"}, 2, 1},
		{"zones unknown", []string{"", "", "", ""}, 2, 1},
		{"failures in two zones", []string{"a", "b", "a", "b"}, 2, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := NewQuarantine(QuarantineConfig{})
			total := len(c.zones)
			for i := c.nFail; i < total; i++ {
				q.reportIn("svc", fmt.Sprint("i", i), c.zones[i], "", Success, total)
			}
			for i := range c.nFail {
				failTimes(q, fmt.Sprint("i", i), c.zones[i], 5, total)
			}
			if got := q.Ejected("svc"); len(got) != c.want {
				t.Fatalf("ejected %v, want %d instances", got, c.want)
			}
		})
	}
	// The other zone failing too: it is not healthy, the cap holds.
	q := NewQuarantine(QuarantineConfig{})
	failTimes(q, "b0", "b", 1, 4)
	failTimes(q, "b1", "b", 1, 4)
	failTimes(q, "a0", "a", 5, 4)
	failTimes(q, "a1", "a", 5, 4)
	if got := q.Ejected("svc"); len(got) != 1 {
		t.Fatalf("ejected %v with zone b failing too, want one instance", got)
	}
}

// TestUsableFollowsEjection: the selectors hear that an ejected instance
// is unusable, usable again when its ejection ends (so its probe can be
// picked), and at readmission.
func TestUsableFollowsEjection(t *testing.T) {
	q := NewQuarantine(QuarantineConfig{BaseEjection: 20 * time.Millisecond})
	events := make(chan bool, 8)
	q.onUsable = func(_, id string, usable bool) { events <- usable }
	failTimes(q, "a0", "a", 5, 4)
	if u := <-events; u {
		t.Fatal("ejection reported the instance usable")
	}
	select { // the ejection's timer, 20-22 ms later
	case u := <-events:
		if !u {
			t.Fatal("the end of the ejection reported the instance unusable")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the end of the ejection was not reported")
	}
	q.reportIn("svc", "a0", "a", "", Success, 4)
	if u := <-events; !u {
		t.Fatal("readmission reported the instance unusable")
	}
}

// TestThrottleIgnoresContainedFailures: calls failing on instances the
// quarantine has ejected do not throttle the calls that follow.
func TestThrottleIgnoresContainedFailures(t *testing.T) {
	th := newThrottle(ThrottleConfig{})
	q := NewQuarantine(QuarantineConfig{ConsecutiveFailures: 1, MaxEjectedPercent: 100, PanicThreshold: -1})
	bad := errors.New("boom")
	h := th.middleware()(q.Middleware()(func(ctx context.Context, req *Request) error {
		req.Instance, req.Picked = registry.Instance{ID: "a0", Zone: "a"}, true
		return bad
	}))
	req := &Request{}
	for range 200 {
		req.reset()
		req.Service, req.Start, req.Total = "svc", time.Now(), 4
		if err := h(context.Background(), req); !errors.Is(err, bad) {
			t.Fatalf("call failed with %v, want the call's error (not throttled)", err)
		}
	}
	if !slices.Contains(q.Ejected("svc"), "a0") {
		t.Fatal("a0 not ejected")
	}
	if p := th.rejectProbability("svc", time.Now()); p != 0 {
		t.Fatalf("reject probability %v after failures the quarantine contained, want 0", p)
	}
}

// TestRegionEjectionCap: a whole region failing on its own is ejected
// over the cap when another region is healthy; without regions only its
// first zone is.
func TestRegionEjectionCap(t *testing.T) {
	zones := []string{"a", "a", "b", "b", "c", "c", "c", "c"}
	for _, c := range []struct {
		name    string
		regions []string
		want    int
	}{
		{"regions known", []string{"r1", "r1", "r1", "r1", "r2", "r2", "r2", "r2"}, 4},
		{"regions unknown", make([]string, 8), 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := NewQuarantine(QuarantineConfig{})
			for i := 4; i < 8; i++ {
				q.reportIn("svc", fmt.Sprint("i", i), zones[i], c.regions[i], Success, 8)
			}
			for i := range 4 {
				for range 5 {
					q.reportIn("svc", fmt.Sprint("i", i), zones[i], c.regions[i], Retryable, 8)
				}
			}
			if got := q.Ejected("svc"); len(got) != c.want {
				t.Fatalf("ejected %v, want %d instances", got, c.want)
			}
		})
	}
}
