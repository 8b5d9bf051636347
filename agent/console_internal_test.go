package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/roster-go/roster/registry"
)

// TestHistoryBoundedNewestFirst: a service's history keeps its last 200
// changes, newest first, and names what changed.
func TestHistoryBoundedNewestFirst(t *testing.T) {
	h := newHistory()
	list := func(idx uint64, in ...registry.Instance) instanceList {
		return instanceList{Service: "api", Index: idx, Instances: in}
	}
	a := registry.Instance{ID: "a", Service: "api", Address: "10.0.0.1:80", Weight: 100}
	h.update("api", list(1, a))
	b := registry.Instance{ID: "b", Service: "api", Address: "10.0.0.2:80", Weight: 100}
	h.update("api", list(2, a, b))
	h.update("api", list(3, b))
	got := h.changes("api")
	want := []string{"left a", "joined b", "listed "}
	if len(got) != len(want) {
		t.Fatalf("history %+v, want %v", got, want)
	}
	for i, w := range want {
		if s := got[i].Kind + " " + got[i].ID; s != w {
			t.Errorf("change %d: %q, want %q", i, s, w)
		}
	}
	for i := range 300 {
		b.Weight = uint32(i + 1)
		h.update("api", list(uint64(4+i), b))
	}
	got = h.changes("api")
	if len(got) != historyLen {
		t.Fatalf("%d changes kept, want %d", len(got), historyLen)
	}
	if got[0].Kind != "weight" || got[0].Detail != "299 → 300" || got[historyLen-1].Detail != fmt.Sprintf("%d → %d", 100, 101) {
		t.Errorf("newest %+v, oldest %+v", got[0], got[historyLen-1])
	}
	h.update("api", instanceList{Service: "api", Index: 400, Stale: true, Instances: []registry.Instance{}})
	if got := h.changes("api"); got[0].Kind != "stale" || len(got) != historyLen {
		t.Errorf("stale list: newest %+v (%d kept); nothing left while the list is stale", got[0], len(got))
	}
	h.quarantine("api", map[string]bool{"b": true})
	h.quarantine("api", map[string]bool{"b": true})
	h.quarantine("api", map[string]bool{})
	if got := h.changes("api"); got[0].Kind+" "+got[0].ID != "readmitted b" || got[1].Kind+" "+got[1].ID != "quarantined b" || got[2].Kind != "stale" {
		t.Errorf("quarantine: newest %+v, want readmitted b, quarantined b once, then stale", got[:3])
	}
	h.forget("api")
	if got := h.changes("api"); len(got) != 0 {
		t.Errorf("forgotten service: %d changes", len(got))
	}
}

// TestHealthTransitions: one log line per transition; errors that say
// nothing of the backend (a listing dns+srv cannot do, a closed
// registry) change nothing.
func TestHealthTransitions(t *testing.T) {
	var buf strings.Builder
	h := &health{log: slog.New(slog.NewTextHandler(&buf, nil)), name: "registry(test)"}
	down := fmt.Errorf("%w: connection refused", registry.ErrUnavailable)
	for _, err := range []error{nil, nil, down, down, fmt.Errorf("%w: dns+srv cannot list services", registry.ErrInvalid),
		registry.ErrClosed, down, nil, errors.ErrUnsupported, nil} {
		h.observe(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "registry up") || !strings.Contains(lines[1], "registry down") ||
		!strings.Contains(lines[1], "connection refused") || !strings.Contains(lines[2], "down_for=") {
		t.Errorf("log:\n%s\nwant up, down, up again", buf.String())
	}
	if s := h.state(); !s.Known || !s.Up || s.Error != "" {
		t.Errorf("state %+v, want up", s)
	}
}
