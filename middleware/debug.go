package middleware

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/roster-go/roster/internal/dashboard"
	"github.com/roster-go/roster/registry"
)

// clientState is what a Client sees, service by service: the JSON form of
// its debug page (Client.DebugHandler), and what roster agent's dashboard
// renders.
type clientState struct {
	Services []serviceState `json:"services"`
}

// serviceState is a Client's view of one service.
type serviceState struct {
	Service    string          `json:"service"`
	Revision   uint64          `json:"revision"`
	Stale      bool            `json:"stale"`
	StaleSince time.Time       `json:"stale_since,omitzero"`
	At         time.Time       `json:"at,omitzero"` // when the snapshot was read from the backend
	Instances  []instanceState `json:"instances"`
}

// instanceState is one instance as a Client sees it.
type instanceState struct {
	registry.Instance
	Quarantined bool `json:"quarantined"`
}

// state returns the services the client follows, sorted by name, each
// with its current snapshot and which instances the quarantine holds out.
func (c *Client) state() clientState {
	c.mu.Lock()
	svcs := make([]*service, 0, len(c.services))
	for _, s := range c.services {
		svcs = append(svcs, s)
	}
	c.mu.Unlock()
	slices.SortFunc(svcs, func(a, b *service) int { return cmp.Compare(a.name, b.name) })
	st := clientState{Services: make([]serviceState, 0, len(svcs))}
	for _, s := range svcs {
		st.Services = append(st.Services, c.stateOf(s))
	}
	return st
}

func (c *Client) stateOf(s *service) serviceState {
	snap := s.sel.Snapshot()
	ss := serviceState{Service: s.name, Revision: snap.Revision, Stale: snap.Stale, At: snap.At,
		Instances: make([]instanceState, 0, len(snap.Instances))}
	if at := s.staleAt.Load(); at != 0 {
		ss.Stale, ss.StaleSince = true, monoTime(at)
	}
	ejected := c.q.Ejected(s.name)
	for _, in := range snap.Instances {
		ss.Instances = append(ss.Instances, instanceState{Instance: in, Quarantined: slices.Contains(ejected, in.ID)})
	}
	return ss
}

// DebugHandler returns an http.Handler that shows the client's state, as
// gRPC's channelz does. For ?format=json or "Accept: application/json"
// it answers JSON: {"services": [...]}, each service with its revision,
// stale flag and instances, each instance with "quarantined". Else it
// serves roster agent's dashboard page, refreshed every second. Mount it on an admin port, not a public one: it
// lists every instance the client knows.
func (c *Client) DebugHandler() http.Handler {
	page := dashboard.Handler("roster client", "?format=json", "")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("format") != "json" && r.Header.Get("Accept") != "application/json" {
			page.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(c.state())
	})
}
