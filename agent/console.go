package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/roster-go/roster/registry"
)

// The console: the whole catalog of the registry, a page of it followed
// live, each service's recent changes and the registry's health. It is
// the page at / (GET /v1/console for its state, /v1/console/events for
// the same as server-sent events).

// Bounds of the console.
const (
	historyLen      = 200 // changes kept per service
	defaultPageSize = 20  // services per console page
	maxPageSize     = 100
	catalogMaxAge   = time.Second // the console refreshes an older catalog
)

// health tracks whether the registry answers, and logs each transition
// once: a flapping backend gives one line per change, not one per call.
type health struct {
	log  *slog.Logger
	name string

	mu      sync.Mutex
	known   bool
	up      bool
	since   time.Time
	lastErr string
}

// healthState is the registry's health on the console.
type healthState struct {
	Known bool      `json:"known"` // false until the registry first answered or failed
	Up    bool      `json:"up"`
	Since time.Time `json:"since,omitzero"`
	Error string    `json:"error,omitempty"` // the last failure, while down
}

// observe records the outcome of a call to the registry. A closed
// registry, a call its caller gave up on, or a call the backend cannot
// serve (dns+srv lists no services) says nothing of the backend's health.
func (h *health) observe(err error) {
	if errors.Is(err, registry.ErrClosed) || errors.Is(err, context.Canceled) ||
		errors.Is(err, registry.ErrInvalid) || errors.Is(err, errors.ErrUnsupported) {
		return
	}
	up := err == nil
	now := time.Now()
	h.mu.Lock()
	changed := !h.known || h.up != up
	was, since := h.known, h.since
	if !up {
		h.lastErr = err.Error()
	}
	if changed {
		h.known, h.up, h.since = true, up, now
	}
	h.mu.Unlock()
	if !changed {
		return
	}
	switch {
	case up && was:
		h.log.Info("registry up", "registry", h.name, "down_for", now.Sub(since).Round(time.Millisecond))
	case up:
		h.log.Info("registry up", "registry", h.name)
	default:
		h.log.Warn("registry down", "registry", h.name, "error", err)
	}
}

func (h *health) state() healthState {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := healthState{Known: h.known, Up: h.up, Since: h.since}
	if h.known && !h.up {
		s.Error = h.lastErr
	}
	return s
}

// errStaleList is what a view's stale snapshot tells of the registry.
func errStaleList(service string) error {
	return fmt.Errorf("%w: the watch of %s serves its last good list", registry.ErrUnavailable, service)
}

// probe refreshes the catalog every Config.ProbeInterval until ctx ends:
// the console's list, and the registry's health when no service is
// followed.
func (a *Agent) probe(ctx context.Context) {
	tick := time.NewTicker(a.cfg.ProbeInterval)
	defer tick.Stop()
	for {
		a.refreshCatalog(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// refreshCatalog asks the registry for its services and keeps the answer.
func (a *Agent) refreshCatalog(ctx context.Context) {
	names, err := a.reg.Services(ctx)
	a.health.observe(err)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.svcErr = err.Error()
		return
	}
	changed := !slices.Equal(a.svcList, names)
	a.svcList, a.svcAt, a.svcErr = names, time.Now(), ""
	if ovs, err := a.reg.Overrides(ctx, ""); err == nil || errors.Is(err, errors.ErrUnsupported) {
		changed = changed || !slices.EqualFunc(a.overrides, ovs, sameOverride)
		a.overrides = ovs
	}
	if changed {
		a.events.notify()
	}
}

// catalog returns the last known service list, when it was read and why
// the last refresh failed, if it did. It refreshes the list first if it
// is older than maxAge.
func (a *Agent) catalog(ctx context.Context, maxAge time.Duration) ([]string, time.Time, string) {
	a.mu.Lock()
	at := a.svcAt
	a.mu.Unlock()
	if time.Since(at) > maxAge {
		a.refreshCatalog(ctx)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.svcList, a.svcAt, a.svcErr
}

// change is one entry of a service's history on the console.
type change struct {
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"` // listed, joined, left, weight, changed, stale, fresh, quarantined, readmitted
	ID     string    `json:"id,omitempty"`
	Detail string    `json:"detail,omitempty"`
}

// history keeps the last historyLen changes of each followed service,
// found by comparing each snapshot with the one before.
type history struct {
	mu sync.Mutex
	by map[string]*serviceHistory
}

type serviceHistory struct {
	ring    [historyLen]change
	n       int // changes so far (ring is full once n ≥ historyLen)
	prev    map[string]registry.Instance
	ejected map[string]bool // by this host's quarantine, when last looked at
	seen    bool
	stale   bool
}

func newHistory() *history { return &history{by: map[string]*serviceHistory{}} }

func (h *serviceHistory) add(c change) {
	h.ring[h.n%historyLen] = c
	h.n++
}

// update compares a service's new list with its last one and records
// the differences.
func (h *history) update(service string, cur instanceList) {
	if cur.Index == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	sh := h.by[service]
	if sh == nil {
		sh = &serviceHistory{}
		h.by[service] = sh
	}
	now := time.Now()
	next := make(map[string]registry.Instance, len(cur.Instances))
	for _, in := range cur.Instances {
		next[in.ID] = in
	}
	if cur.Stale != sh.stale {
		kind, detail := "fresh", "the registry answers again"
		if cur.Stale {
			kind, detail = "stale", "the registry fails: last good list kept"
		}
		sh.add(change{At: now, Kind: kind, Detail: detail})
		sh.stale = cur.Stale
	}
	if !sh.seen {
		sh.seen = true
		sh.prev = next
		sh.add(change{At: now, Kind: "listed", Detail: strconv.Itoa(len(next)) + " instances when the agent began to follow"})
		return
	}
	if cur.Stale {
		return // a stale list is the last good one: nothing joined or left
	}
	for _, in := range cur.Instances {
		old, ok := sh.prev[in.ID]
		switch {
		case !ok:
			sh.add(change{At: now, Kind: "joined", ID: in.ID, Detail: in.Address})
		case old.Weight != in.Weight:
			sh.add(change{At: now, Kind: "weight", ID: in.ID, Detail: fmt.Sprintf("%d → %d", old.Weight, in.Weight)})
		case !sameInstance(old, in):
			sh.add(change{At: now, Kind: "changed", ID: in.ID, Detail: "address, version, zone, tags, metadata or endpoints"})
		}
	}
	for _, id := range sortedKeys(sh.prev) {
		if _, ok := next[id]; !ok {
			sh.add(change{At: now, Kind: "left", ID: id, Detail: sh.prev[id].Address})
		}
	}
	sh.prev = next
}

func sameInstance(x, y registry.Instance) bool {
	if x.Address != y.Address || x.Version != y.Version || x.Zone != y.Zone || !slices.Equal(x.Tags, y.Tags) ||
		!slices.Equal(x.Endpoints, y.Endpoints) || len(x.Metadata) != len(y.Metadata) {
		return false
	}
	for k, v := range x.Metadata {
		if w, ok := y.Metadata[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// quarantine records the instances of service that entered or left the
// quarantine of this host's clients since it was last called. The
// quarantine tells no one when it ejects, so the console calls it on
// each look: the times are those of the console's updates.
func (h *history) quarantine(service string, ejected map[string]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	sh := h.by[service]
	if sh == nil || !sh.seen {
		return
	}
	now := time.Now()
	for _, id := range sortedKeys(ejected) {
		if !sh.ejected[id] {
			sh.add(change{At: now, Kind: "quarantined", ID: id, Detail: "ejected by this host's clients after failures"})
		}
	}
	for _, id := range sortedKeys(sh.ejected) {
		if !ejected[id] {
			sh.add(change{At: now, Kind: "readmitted", ID: id, Detail: "back from quarantine"})
		}
	}
	sh.ejected = ejected
}

// changes returns a service's history, newest first.
func (h *history) changes(service string) []change {
	h.mu.Lock()
	defer h.mu.Unlock()
	sh := h.by[service]
	if sh == nil {
		return []change{}
	}
	n := min(sh.n, historyLen)
	out := make([]change, 0, n)
	for i := range n {
		out = append(out, sh.ring[(sh.n-1-i)%historyLen])
	}
	return out
}

// forget drops the history of a service the agent stopped following.
func (h *history) forget(service string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.by, service)
}

// consoleState is the answer of GET /v1/console. Its services extend
// those of agentState, so the page renders both.
type consoleState struct {
	Registry string           `json:"registry"`
	Strategy string           `json:"strategy"`
	Tokens   int              `json:"tokens"`
	Stale    bool             `json:"stale"` // some service on the page is served from a stale list
	Health   healthState      `json:"health"`
	Actions  bool             `json:"actions"` // Config.AllowActions
	Catalog  catalogPage      `json:"catalog"`
	Services []consoleService `json:"services"`
}

// catalogPage is the page of the registry's catalog the console shows.
type catalogPage struct {
	Known bool      `json:"known"` // false until the registry first listed its services
	At    time.Time `json:"at,omitzero"`
	Error string    `json:"error,omitempty"` // why the last listing failed
	Query string    `json:"query"`
	Total int       `json:"total"` // services matching the query
	Page  int       `json:"page"`  // from 1
	Pages int       `json:"pages"`
	Size  int       `json:"size"`
}

// consoleService is a service on the console: as on the dashboard, with
// its history, and Loading until its first list is in.
type consoleService struct {
	serviceState
	Loading bool     `json:"loading"`
	Error   string   `json:"error,omitempty"` // why it is not followed
	History []change `json:"history"`
	// Held are the overrides that match no instance of the list: those
	// holding instances out of it (maintenance, deregistered).
	Held []registry.Override `json:"held,omitempty"`
}

// leaseInfo is the lease of an instance this agent registered.
type leaseInfo struct {
	TTL       string `json:"ttl"`
	Heartbeat string `json:"heartbeat"`
	State     string `json:"state"`
	Error     string `json:"error,omitempty"`
}

// consoleQuery is the query of GET /v1/console.
type consoleQuery struct {
	q          string
	page, size int
}

func parseConsoleQuery(r *http.Request) (consoleQuery, error) {
	v := r.URL.Query()
	cq := consoleQuery{q: strings.ToLower(strings.TrimSpace(v.Get("q"))), page: 1, size: defaultPageSize}
	if len(cq.q) > 200 {
		return cq, fmt.Errorf("%w: q is longer than 200 bytes", registry.ErrInvalid)
	}
	for _, p := range []struct {
		name string
		dst  *int
		max  int
	}{{"page", &cq.page, 1 << 20}, {"size", &cq.size, maxPageSize}} {
		s := v.Get(p.name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > p.max {
			return cq, fmt.Errorf("%w: %s %q is not an integer from 1 to %d", registry.ErrInvalid, p.name, s, p.max)
		}
		*p.dst = n
	}
	return cq, nil
}

// console returns the console's state for a query: the matching page of
// the catalog, each of its services followed.
func (a *Agent) console(ctx context.Context, cq consoleQuery) consoleState {
	names, at, catErr := a.catalog(ctx, catalogMaxAge)
	st := consoleState{Registry: a.reg.String(), Strategy: string(a.cfg.Strategy), Tokens: a.tokens.len(),
		Health: a.health.state(), Actions: a.cfg.AllowActions,
		Catalog: catalogPage{Known: !at.IsZero(), At: at, Error: catErr, Query: cq.q, Page: cq.page, Size: cq.size}}
	// The followed services are in the catalog too, even if the registry
	// is down, or lists a service only once its first instance is in.
	all := slices.Clone(names)
	for _, v := range a.followed() {
		all = append(all, v.name)
	}
	slices.Sort(all)
	all = slices.Compact(all)
	match := all[:0]
	for _, n := range all {
		if strings.Contains(n, cq.q) {
			match = append(match, n)
		}
	}
	st.Catalog.Total = len(match)
	st.Catalog.Pages = max(1, (len(match)+cq.size-1)/cq.size)
	from := min((cq.page-1)*cq.size, len(match))
	page := match[from:min(from+cq.size, len(match))]
	leases := a.leases()
	a.mu.Lock()
	overrides := a.overrides
	a.mu.Unlock()
	st.Services = make([]consoleService, 0, len(page))
	for _, name := range page {
		cs := consoleService{serviceState: serviceState{Service: name, Instances: []instanceState{}}}
		v, err := a.view(name)
		if err != nil {
			cs.Error = err.Error()
			st.Services = append(st.Services, cs)
			continue
		}
		cur, _ := v.current()
		cs.serviceState = a.serviceState(v, cur)
		cs.Loading = cur.Index == 0
		for i := range cs.Instances {
			cs.Instances[i].Lease = leases[cs.Instances[i].ID]
		}
		cs.Held = applyOverrideInfo(cs.Instances, overridesOf(overrides, name))
		a.history.quarantine(name, a.quarantined(name))
		cs.History = a.history.changes(name)
		st.Stale = st.Stale || cur.Stale
		st.Services = append(st.Services, cs)
	}
	return st
}

// leases returns the leases of the local registrations by instance ID.
func (a *Agent) leases() map[string]*leaseInfo {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]*leaseInfo, len(a.locals))
	for id, l := range a.locals {
		li := &leaseInfo{TTL: l.lease.TTL().String(), Heartbeat: l.lease.HeartbeatInterval().Round(time.Millisecond).String(), State: l.lease.State().String()}
		if err := l.lease.Err(); err != nil {
			li.Error = err.Error()
		}
		out[id] = li
	}
	return out
}

func (a *Agent) handleConsole(w http.ResponseWriter, r *http.Request) {
	cq, err := parseConsoleQuery(r)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, a.console(r.Context(), cq))
}

func (a *Agent) handleConsoleEvents(w http.ResponseWriter, r *http.Request) {
	cq, err := parseConsoleQuery(r)
	if err != nil {
		writeError(w, err)
		return
	}
	a.stream(w, r, func() any { return a.console(r.Context(), cq) })
}
