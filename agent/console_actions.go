package agent

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"

	"github.com/roster-go/roster/internal/backend"
	"github.com/roster-go/roster/registry"
)

// actionRequest is the body of POST /v1/actions/{action}.
type actionRequest struct {
	Service string  `json:"service"`
	ID      string  `json:"id"`
	Weight  *uint32 `json:"weight,omitempty"` // weight only: the new weight
}

// actionResponse is the answer of a performed action.
type actionResponse struct {
	Action  string `json:"action"`
	Service string `json:"service"`
	ID      string `json:"id"`
	Done    string `json:"done"` // what was done, in words
}

// actioner performs the operator actions on an instance. Each returns
// what it did, in words, for the answer and the log.
type actioner interface {
	drain(ctx context.Context, service, id string) (string, error)
	weight(ctx context.Context, service, id string, w uint32) (string, error)
	maint(ctx context.Context, service, id string) (string, error)
	restore(ctx context.Context, service, id string) (string, error)
	deregister(ctx context.Context, service, id string) (string, error)
}

// errNotSupported is returned for an action this agent cannot perform.
var errNotSupported = errors.New("not supported")

// errActionsOff is the answer to an action while Config.AllowActions is
// off.
var errActionsOff = errors.New("operator actions are disabled on this agent: start it with --allow-actions " +
	"(agent.Config.AllowActions) to drain, weigh, maintain, restore or deregister instances from the console or the API")

// actions lists the actions POST /v1/actions/{action} serves.
var actions = []string{"drain", "weight", "maint", "restore", "deregister"}

func (a *Agent) handleAction(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("action")
	log := a.cfg.Logger.With("action", name, "remote", r.RemoteAddr, "origin", r.Header.Get("Origin"))
	if !slices.Contains(actions, name) {
		writeError(w, fmt.Errorf("%w: no action %q (drain, weight, maint, restore, deregister)", registry.ErrNotFound, name))
		return
	}
	if !a.cfg.AllowActions {
		log.Warn("action refused: actions disabled")
		writeJSON(w, http.StatusForbidden, apiError{Error: errActionsOff.Error(), Code: "forbidden"})
		return
	}
	// A JSON body cannot come from a form: a page of another origin
	// would need a CORS preflight, which the agent never grants.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		log.Warn("action refused: not JSON")
		writeJSON(w, http.StatusUnsupportedMediaType, apiError{Error: "an action's body is JSON: send Content-Type: application/json", Code: "invalid"})
		return
	}
	var req actionRequest
	err := readJSON(r, &req)
	if err == nil {
		err = req.validate(name)
	}
	if err != nil {
		log.Warn("action refused", "error", err)
		writeError(w, err)
		return
	}
	log = log.With("service", req.Service, "id", req.ID)
	var done string
	switch name {
	case "drain":
		done, err = a.act.drain(r.Context(), req.Service, req.ID)
	case "weight":
		log = log.With("weight", *req.Weight)
		done, err = a.act.weight(r.Context(), req.Service, req.ID, *req.Weight)
	case "maint":
		done, err = a.act.maint(r.Context(), req.Service, req.ID)
	case "restore":
		done, err = a.act.restore(r.Context(), req.Service, req.ID)
	case "deregister":
		done, err = a.act.deregister(r.Context(), req.Service, req.ID)
	}
	if err != nil {
		log.Warn("action failed", "error", err)
		if errors.Is(err, errNotSupported) {
			writeJSON(w, http.StatusNotImplemented, apiError{Error: err.Error(), Code: "not_supported"})
			return
		}
		writeError(w, err)
		return
	}
	log.Info("action done", "done", done)
	writeJSON(w, http.StatusOK, actionResponse{Action: name, Service: req.Service, ID: req.ID, Done: done})
}

// validate checks an action's body; each error names its field.
func (req *actionRequest) validate(action string) error {
	if err := backend.ValidateService(req.Service); err != nil {
		return err
	}
	if req.ID == "" || len(req.ID) > 256 {
		return fmt.Errorf("%w: id: an instance ID of 1 to 256 bytes is required", registry.ErrInvalid)
	}
	switch {
	case action == "weight" && req.Weight == nil:
		return fmt.Errorf("%w: weight: the new weight is required", registry.ErrInvalid)
	case action != "weight" && req.Weight != nil:
		return fmt.Errorf("%w: weight: only the weight action takes one", registry.ErrInvalid)
	}
	return nil
}

// localActioner acts on the instances this agent registered, through
// their leases. Other instances need an override stored in the
// registry, which the registry does not offer yet.
type localActioner struct{ a *Agent }

func (l localActioner) local(service, id string) (*local, error) {
	l.a.mu.Lock()
	lc := l.a.locals[id]
	l.a.mu.Unlock()
	if lc == nil || lc.lease.Instance().Service != service {
		return nil, fmt.Errorf("%w: %s %s is not registered through this agent, and the registry keeps no operator overrides: "+
			"act on it from its own host", errNotSupported, service, id)
	}
	return lc, nil
}

func (l localActioner) drain(ctx context.Context, service, id string) (string, error) {
	return l.weight(ctx, service, id, 0)
}

func (l localActioner) weight(ctx context.Context, service, id string, w uint32) (string, error) {
	lc, err := l.local(service, id)
	if err != nil {
		return "", err
	}
	old := lc.lease.Instance().Weight
	if err := lc.lease.SetWeight(ctx, w); err != nil {
		return "", err
	}
	l.a.mu.Lock()
	if old != 0 && lc.weight == 0 {
		lc.weight = old // what restore goes back to
	}
	l.a.mu.Unlock()
	return fmt.Sprintf("weight %d → %d", old, w), nil
}

func (l localActioner) maint(_ context.Context, service, id string) (string, error) {
	if _, err := l.local(service, id); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%w: maintenance needs an override stored in the registry; drain %s instead", errNotSupported, id)
}

func (l localActioner) restore(ctx context.Context, service, id string) (string, error) {
	lc, err := l.local(service, id)
	if err != nil {
		return "", err
	}
	l.a.mu.Lock()
	w := lc.weight
	l.a.mu.Unlock()
	if w == 0 {
		w = lc.lease.Instance().Weight
	}
	if w == 0 {
		w = registry.DefaultWeight
	}
	if err := lc.lease.SetWeight(ctx, w); err != nil {
		return "", err
	}
	return fmt.Sprintf("weight restored to %d", w), nil
}

func (l localActioner) deregister(ctx context.Context, service, id string) (string, error) {
	lc, err := l.local(service, id)
	if err != nil {
		return "", err
	}
	l.a.mu.Lock()
	if l.a.locals[id] == lc {
		delete(l.a.locals, id)
	}
	l.a.mu.Unlock()
	if err := lc.stop(ctx); err != nil {
		return "", err
	}
	return "deregistered", nil
}
