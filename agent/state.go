package agent

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/roster-go/roster/registry"
)

// agentState is what the dashboard shows (GET /v1/state, and each server-sent
// event of GET /v1/events). Its shape extends middleware.ClientState, so
// the same page renders a Go client's debug handler.
type agentState struct {
	Registry string         `json:"registry"`
	Strategy string         `json:"strategy"`
	Stale    bool           `json:"stale"` // some service is served from a stale list: the registry fails
	Tokens   int            `json:"tokens"`
	Services []serviceState `json:"services"`
}

// serviceState is one followed service on the dashboard.
type serviceState struct {
	Service    string          `json:"service"`
	Index      uint64          `json:"index"`
	Revision   uint64          `json:"revision"`
	Stale      bool            `json:"stale"`
	StaleSince time.Time       `json:"stale_since,omitzero"`
	At         time.Time       `json:"at"`
	Instances  []instanceState `json:"instances"`
}

// instanceState is one instance on the dashboard.
type instanceState struct {
	registry.Instance
	Quarantined bool          `json:"quarantined"`
	Stats       instanceStats `json:"stats"`
	Lease       *leaseInfo    `json:"lease,omitempty"` // on the console, for the agent's own registrations
	// Override is the operator's override of the instance, on the console.
	Override *registry.Override `json:"override,omitempty"`
}

// state returns the agent's state, services sorted by name.
func (a *Agent) state() agentState {
	views := a.followed()
	slices.SortFunc(views, func(x, y *view) int { return cmp.Compare(x.name, y.name) })
	st := agentState{Registry: a.reg.String(), Strategy: string(a.cfg.Strategy), Tokens: a.tokens.len(),
		Services: make([]serviceState, 0, len(views))}
	for _, v := range views {
		cur, _ := v.current()
		st.Stale = st.Stale || cur.Stale
		st.Services = append(st.Services, a.serviceState(v, cur))
	}
	return st
}

// serviceState returns a followed service's state: its list cur, with
// each instance's quarantine and figures.
func (a *Agent) serviceState(v *view, cur instanceList) serviceState {
	ss := serviceState{Service: cur.Service, Index: cur.Index, Revision: cur.Revision, Stale: cur.Stale,
		StaleSince: v.staleSince(), At: cur.At, Instances: make([]instanceState, 0, len(cur.Instances))}
	ejected := a.quarantined(cur.Service)
	for _, in := range cur.Instances {
		ss.Instances = append(ss.Instances, instanceState{Instance: in, Quarantined: ejected[in.ID], Stats: a.stats.snapshot(cur.Service, in.ID)})
	}
	return ss
}

// quarantined returns the instances of service that some strategy's
// quarantine holds out.
func (a *Agent) quarantined(service string) map[string]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]bool{}
	for _, q := range a.quarantines {
		for _, id := range q.Ejected(service) {
			out[id] = true
		}
	}
	return out
}

func (a *Agent) handleState(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, a.state())
}

// changed is called by a view on each change of its service.
func (a *Agent) changed(service string) {
	a.mu.Lock()
	v := a.views[service]
	a.mu.Unlock()
	if v != nil {
		cur, _ := v.current()
		if cur.Stale {
			a.health.observe(errStaleList(service))
		} else {
			a.health.observe(nil)
		}
		a.history.update(service, cur)
		a.stats.prune(service, func(id string) bool { _, ok := registry.Snapshot{Instances: cur.Instances}.Find(id); return ok })
	}
	a.events.notify()
}

// Event stream pacing: a change is pushed at most every eventMinGap,
// and the state at least every eventMaxGap (picks and latencies move
// without a registry change).
const (
	eventMinGap = 100 * time.Millisecond
	eventMaxGap = time.Second
)

func (a *Agent) handleEvents(w http.ResponseWriter, r *http.Request) {
	a.stream(w, r, func() any { return a.state() })
}

// stream sends the state as a server-sent event on each change, paced
// as above, until the client or the agent goes.
func (a *Agent) stream(w http.ResponseWriter, r *http.Request, state func() any) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	tick := time.NewTicker(eventMaxGap)
	defer tick.Stop()
	for {
		ch := a.events.wait()
		b, _ := json.Marshal(state())
		a.extendDeadlines(w, 0)
		if _, err := w.Write([]byte("data: " + string(b) + "\n\n")); err != nil {
			return
		}
		fl.Flush()
		select {
		case <-ch:
		case <-tick.C:
		case <-r.Context().Done():
			return
		case <-a.ctx.Done():
			return
		}
		select { // coalesce a burst of changes
		case <-time.After(eventMinGap):
		case <-r.Context().Done():
			return
		}
	}
}

// broadcast wakes every waiter on each notify.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func newBroadcast() *broadcast { return &broadcast{ch: make(chan struct{})} }

func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

func (b *broadcast) notify() {
	b.mu.Lock()
	close(b.ch)
	b.ch = make(chan struct{})
	b.mu.Unlock()
}

func (b *broadcast) close() { b.notify() }
