package backend

import (
	"log/slog"
	"sync"

	"github.com/roster-go/roster/registry/driver"
)

// Standing is how far a backend vouches for a record it read. It decides
// between records that claim one instance ID, so that a neighbour's
// record under a key or node name that sorts first cannot hide the real
// instance.
type Standing uint8

const (
	// Own marks a record written in Roster's own layout, not by another
	// tool of the keyspace.
	Own Standing = 1 << iota
	// Live marks a record the backend proves live: a key with a TTL, an
	// owned lease, a passing TTL check on a live node, an ephemeral node.
	// It outranks Own: a live record is one that its writer keeps alive.
	Live
)

// Candidate is one record read for an instance ID, with its standing.
type Candidate struct {
	driver.Instance
	Standing Standing
}

// Resolve returns one instance per ID of cands, in their order: the
// candidate of the highest standing. Between equals the first wins (the
// driver's order: a backend whose records cannot be told apart). Either
// way a conflict between records that differ is logged once, naming the
// service, the ID and both addresses: never silently.
func Resolve(service string, cands []Candidate) []driver.Instance {
	out := make([]driver.Instance, 0, len(cands))
	best := make(map[string]int, len(cands)) // ID → index in out
	standing := make([]Standing, 0, len(cands))
	for _, c := range cands {
		i, dup := best[c.ID]
		if !dup {
			best[c.ID] = len(out)
			out = append(out, c.Instance)
			standing = append(standing, c.Standing)
			continue
		}
		served, other := out[i], c.Instance
		if c.Standing > standing[i] {
			served, other = other, served
			out[i], standing[i] = c.Instance, c.Standing
		}
		if !served.Equal(other) {
			conflicts.report(service, served, other)
		}
	}
	return out
}

// maxConflicts bounds the conflicts remembered as reported; past it the
// set starts again, so a conflict that lasts is logged again, rarely.
const maxConflicts = 4096

// conflicts remembers which conflicts were logged, so that each is
// logged once, not on every read.
var conflicts conflictLog

type conflictLog struct {
	mu   sync.Mutex
	seen map[[4]string]bool
}

func (l *conflictLog) report(service string, served, ignored driver.Instance) {
	k := [4]string{service, served.ID, served.Address, ignored.Address}
	l.mu.Lock()
	if l.seen[k] {
		l.mu.Unlock()
		return
	}
	if l.seen == nil || len(l.seen) >= maxConflicts {
		l.seen = map[[4]string]bool{}
	}
	l.seen[k] = true
	l.mu.Unlock()
	slog.Warn("roster: two records claim one instance ID; serving one",
		"service", service, "id", served.ID, "served", served.Address, "ignored", ignored.Address)
}
