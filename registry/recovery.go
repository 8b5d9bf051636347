package registry

import (
	"slices"
	"time"

	"github.com/roster-go/roster/internal/backend"
)

// DefaultRecoveryWindow is how long a watch keeps serving the instances it
// served before a backend fault while their leases write themselves back:
// long enough for leases of TTL up to 30s (a heartbeat every 10s) to notice
// and re-register, short enough that an instance that really died during
// the fault is not offered for long.
const DefaultRecoveryWindow = 15 * time.Second

// recovery is the part of a watch cache that rides out a backend coming
// back empty. A backend restarted without its data, wiped, or reached
// again after an outage, answers at first without the instances whose
// leases have not yet written themselves again; those instances have not
// gone. So when the cache comes back from a failure, or sees the backend's
// revision go back, it holds the instances it served until each reappears
// or the window ends, whichever is first. Instances in the backend's
// answer always win over held ones (new fields, new instances); only
// absences are held back. Guarded by the entry's mutex.
type recovery struct {
	held  []Instance  // served before the fault, sorted by ID; nil when not recovering
	last  Snapshot    // the backend's own latest state, unmerged
	timer *time.Timer // ends the window
}

// begin starts a window over served unless one is running, window is not
// positive or there is nothing to hold; it returns how many instances are
// held. end is called when the window runs out.
func (h *recovery) begin(served []Instance, window time.Duration, end func()) int {
	if h.held != nil || window <= 0 || len(served) == 0 {
		return 0
	}
	h.held = served // snapshots are immutable: sharing is safe
	h.timer = time.AfterFunc(window, end)
	return len(served)
}

// merge returns s plus the held instances it lacks, and whether it added
// any. It does not change h.
func (h *recovery) merge(s Snapshot) (Snapshot, bool) {
	var missing []Instance
	for _, in := range h.held {
		if _, ok := s.Find(in.ID); !ok {
			missing = append(missing, in)
		}
	}
	if len(missing) == 0 {
		return s, false
	}
	s.Instances = slices.Concat(s.Instances, missing)
	backend.SortInstances(s.Instances)
	return s, true
}

// apply records the backend's state s and returns what to serve: s with
// the held instances it lacks. Once s has them all the window closes.
func (h *recovery) apply(s Snapshot) Snapshot {
	h.last = s
	merged, added := h.merge(s)
	if !added {
		h.end()
	}
	return merged
}

// end closes the window; it reports whether one was open.
func (h *recovery) end() bool {
	if h.held == nil {
		return false
	}
	h.timer.Stop()
	h.held, h.timer = nil, nil
	return true
}
