package agent

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/roster-go/roster/registry"
)

// registerRequest is the body of POST /v1/register: a local process to
// announce. The agent holds its lease (heartbeats) and, with CheckURL,
// withdraws it while the process's health check fails.
type registerRequest struct {
	registry.Instance
	TTL           string `json:"ttl,omitempty"`            // lease TTL, e.g. "10s" (default: the registry's)
	CheckURL      string `json:"check_url,omitempty"`      // HTTP check: passes while it answers 2xx
	CheckInterval string `json:"check_interval,omitempty"` // default: the heartbeat interval
}

// localInfo is a process the agent keeps registered (GET /v1/register).
type localInfo struct {
	Instance registry.Instance `json:"instance"`
	State    string            `json:"state"` // the lease's state
	Error    string            `json:"error,omitempty"`
}

type local struct {
	lease  *registry.Lease
	weight uint32 // the weight before an operator's drain or weight action (guarded by Agent.mu)
}

func (l *local) stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return l.lease.Deregister(ctx)
}

// register registers a local process as POST /v1/register does, and
// returns the instance as registered (with its ID).
func (a *Agent) register(ctx context.Context, req registerRequest) (registry.Instance, error) {
	opts, err := req.options()
	if err != nil {
		return registry.Instance{}, err
	}
	if err := a.reserveLocal(); err != nil {
		return registry.Instance{}, err
	}
	lease, err := a.reg.Register(ctx, req.Instance, opts...)
	if err != nil {
		a.mu.Lock()
		a.reserved--
		a.mu.Unlock()
		return registry.Instance{}, err
	}
	in := lease.Instance()
	a.mu.Lock()
	a.reserved--
	if a.closed { // closed while the backend answered: Close did not see this lease
		a.mu.Unlock()
		_ = (&local{lease: lease}).stop(ctx)
		return registry.Instance{}, fmt.Errorf("agent: %w", registry.ErrClosed)
	}
	old := a.locals[in.ID]
	a.locals[in.ID] = &local{lease: lease}
	a.mu.Unlock()
	if old != nil { // re-registered under the same ID: the new lease replaces it
		old.lease.Abandon()
	}
	return in, nil
}

// reserveLocal takes a slot for a registration under way. The check and
// the reservation are one step, so concurrent registrations cannot pass
// the bound together while each waits for the backend.
func (a *Agent) reserveLocal() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("agent: %w", registry.ErrClosed)
	}
	if len(a.locals)+a.reserved >= a.cfg.MaxServices {
		return fmt.Errorf("%w local registrations (Config.MaxServices)", errTooMany)
	}
	a.reserved++
	return nil
}

func (req *registerRequest) options() ([]registry.RegisterOption, error) {
	var opts []registry.RegisterOption
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil {
			return nil, fmt.Errorf("%w: ttl %q is not a duration such as 10s", registry.ErrInvalid, req.TTL)
		}
		opts = append(opts, registry.WithTTL(d))
	}
	if req.CheckURL == "" {
		if req.CheckInterval != "" {
			return nil, fmt.Errorf("%w: check_interval without check_url", registry.ErrInvalid)
		}
		return opts, nil
	}
	check, err := httpCheck(req.CheckURL)
	if err != nil {
		return nil, err
	}
	var every time.Duration
	if req.CheckInterval != "" {
		var err error
		if every, err = time.ParseDuration(req.CheckInterval); err != nil || every <= 0 {
			return nil, fmt.Errorf("%w: check_interval %q is not a positive duration", registry.ErrInvalid, req.CheckInterval)
		}
	}
	return append(opts, registry.WithHealthCheck(check, every)), nil
}

func (a *Agent) handleDeregister(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	a.mu.Lock()
	l := a.locals[id]
	delete(a.locals, id)
	a.mu.Unlock()
	if l == nil {
		writeError(w, fmt.Errorf("%w: no local registration %q", registry.ErrNotFound, id))
		return
	}
	if err := l.stop(r.Context()); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *Agent) handleLocals(w http.ResponseWriter, _ *http.Request) {
	a.mu.Lock()
	out := make([]localInfo, 0, len(a.locals))
	for _, l := range a.locals {
		lc := localInfo{Instance: l.lease.Instance(), State: l.lease.State().String()}
		if err := l.lease.Err(); err != nil {
			lc.Error = err.Error()
		}
		out = append(out, lc)
	}
	a.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// httpCheck returns a health check that passes while rawURL answers 2xx
// within the check's deadline. Only http and https URLs are accepted.
func httpCheck(rawURL string) (func(context.Context) error, error) {
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil || (req.URL.Scheme != "http" && req.URL.Scheme != "https") || req.URL.Host == "" {
		return nil, fmt.Errorf("%w: check_url %q is not an http(s) URL", registry.ErrInvalid, rawURL)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return func(ctx context.Context) error {
		resp, err := client.Do(req.Clone(ctx))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("%s answered %s", rawURL, resp.Status)
		}
		return nil
	}, nil
}
