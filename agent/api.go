package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/roster-go/roster/internal/dashboard"
	"github.com/roster-go/roster/internal/mwhook"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// Bounds of the HTTP API.
const (
	maxBody        = 64 << 10         // a request body, JSON
	maxWait        = 10 * time.Minute // a long poll's ?wait=
	defaultWait    = 5 * time.Minute  // a long poll without ?wait=, as Consul
	firstAnswerMax = 10 * time.Second // waiting for a service's first list
)

func (a *Agent) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /v1/services", a.handleServices)
	m.HandleFunc("GET /v1/services/{service}", a.handleInstances)
	m.HandleFunc("POST /v1/pick", a.handlePick)
	m.HandleFunc("POST /v1/report", a.handleReport)
	m.HandleFunc("POST /v1/register", jsonCall(a.register))
	m.HandleFunc("GET /v1/register", a.handleLocals)
	m.HandleFunc("DELETE /v1/register/{id}", a.handleDeregister)
	m.HandleFunc("GET /v1/state", a.handleState)
	m.HandleFunc("GET /v1/events", a.handleEvents)
	m.Handle("GET /metrics", a.metrics.handler)
	m.Handle("GET /{$}", dashboard.Handler("roster agent", "v1/state", "v1/events"))
	a.mux = m
}

// services is the answer of GET /v1/services.
type services struct {
	Services []string `json:"services"`
	Stale    bool     `json:"stale"` // the registry fails: the last list it gave
}

func (a *Agent) handleServices(w http.ResponseWriter, r *http.Request) {
	names, err := a.reg.Services(r.Context())
	a.mu.Lock()
	if err == nil {
		a.svcList = names
	}
	last := a.svcList
	a.mu.Unlock()
	if err != nil && last == nil {
		writeError(w, err)
		return
	}
	if last == nil {
		last = []string{}
	}
	writeJSON(w, http.StatusOK, services{Services: last, Stale: err != nil})
}

func (a *Agent) handleInstances(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	index, wait, err := pollParams(q.Get("index"), q.Get("wait"))
	if err != nil {
		writeError(w, err)
		return
	}
	v, release, err := a.holdView(r.PathValue("service"))
	if err != nil {
		writeError(w, err)
		return
	}
	defer release()
	a.extendDeadlines(w, wait)
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	inst, err := v.wait(ctx, index)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("X-Roster-Index", strconv.FormatUint(inst.Index, 10))
	writeJSON(w, http.StatusOK, inst)
}

// pollParams parses ?index= and ?wait=: without an index the request
// waits only for the service's first list.
func pollParams(index, wait string) (uint64, time.Duration, error) {
	if index == "" {
		return 0, firstAnswerMax, nil
	}
	n, err := strconv.ParseUint(index, 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: index %q is not a non-negative integer", registry.ErrInvalid, index)
	}
	d := defaultWait
	if wait != "" {
		if d, err = time.ParseDuration(wait); err != nil || d <= 0 {
			return 0, 0, fmt.Errorf("%w: wait %q is not a positive duration such as 30s", registry.ErrInvalid, wait)
		}
	}
	return n, min(d, maxWait), nil
}

// pickRequest is the body of POST /v1/pick.
type pickRequest struct {
	Service  string   `json:"service"`
	Strategy string   `json:"strategy,omitempty"` // default: the agent's
	Key      string   `json:"key,omitempty"`      // affinity key for consistent_hash and maglev
	Version  string   `json:"version,omitempty"`  // only instances of this version
	Zone     string   `json:"zone,omitempty"`     // only instances in this zone
	Tags     []string `json:"tags,omitempty"`     // only instances with all of these tags
	// Endpoint names the port to call, such as "grpc": only instances
	// that serve it, as registry.Instance.Endpoint decides.
	Endpoint string `json:"endpoint,omitempty"`
	// Tried lists the instance IDs earlier attempts of the same call
	// used: the pick goes elsewhere while it can (another zone before a
	// tried instance), as Client.Do's retries do.
	Tried []string `json:"tried,omitempty"`
}

// pickResponse is the answer of POST /v1/pick.
type pickResponse struct {
	Token    string            `json:"token"` // give it back in the report
	Instance registry.Instance `json:"instance"`
	Endpoint registry.Endpoint `json:"endpoint"` // the port to call: the one asked for, or the primary
	Stale    bool              `json:"stale"`    // picked from the last good list while the registry fails
}

// jsonCall serves call over HTTP: the request body is its JSON argument,
// its result the 200 answer, its error an answer from writeError.
func jsonCall[Req, Resp any](call func(context.Context, Req) (Resp, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req Req
		if err := readJSON(r, &req); err != nil {
			writeError(w, err)
			return
		}
		resp, err := call(r.Context(), req)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

// pickToken picks an instance as POST /v1/pick does.
func (a *Agent) pickToken(ctx context.Context, req pickRequest) (pickResponse, error) {
	p, id, err := a.pick(ctx, req)
	if err != nil {
		return pickResponse{}, err
	}
	e, _ := p.Instance.Endpoint(req.Endpoint) // the pick excluded the instances without it
	return pickResponse{Token: id.String(), Instance: p.Instance, Endpoint: e, Stale: p.Stale}, nil
}

// handlePick serves POST /v1/pick, the hot path: see wire.go.
func (a *Agent) handlePick(w http.ResponseWriter, r *http.Request) {
	buf := getBuf()
	defer putBuf(buf)
	req, err := readRequest(r, buf, decodePick)
	if err != nil {
		writeError(w, err)
		return
	}
	p, id, err := a.pick(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	e, _ := p.Instance.Endpoint(req.Endpoint) // the pick excluded the instances without it
	*buf = appendPick((*buf)[:0], id, &p.Instance, e, p.Stale)
	writeBody(w, http.StatusOK, *buf)
}

// pick picks an instance and issues its token.
func (a *Agent) pick(ctx context.Context, req pickRequest) (mwhook.Pending, tokenID, error) {
	strategy := a.cfg.Strategy
	if req.Strategy != "" {
		s, err := selector.ParseStrategy(req.Strategy)
		if err != nil {
			return mwhook.Pending{}, tokenID{}, fmt.Errorf("strategy: %w", err) // wraps registry.ErrInvalid
		}
		strategy = s
	}
	if err := backend.ValidateService(req.Service); err != nil {
		return mwhook.Pending{}, tokenID{}, err
	}
	if req.Endpoint != "" {
		if err := backend.ValidateEndpointName("endpoint", req.Endpoint); err != nil {
			return mwhook.Pending{}, tokenID{}, err
		}
	}
	if _, err := a.view(req.Service); err != nil { // the dashboard and metrics show what is picked from
		return mwhook.Pending{}, tokenID{}, err
	}
	c, err := a.client(strategy)
	if err != nil {
		return mwhook.Pending{}, tokenID{}, err
	}
	p, err := mwhook.Pick(c, ctx, req.Service, selector.PickOptions{Key: req.Key, Exclude: req.excludes(), Tried: req.tried()})
	if errors.Is(err, selector.ErrAllExcluded) && req.Endpoint != "" {
		err = fmt.Errorf("%w by the filters and endpoint %q", err, req.Endpoint)
	}
	if err != nil {
		return mwhook.Pending{}, tokenID{}, err
	}
	if req.Endpoint != "" {
		// The announced name only: a one-port instance serves any name,
		// and a label must not take every value clients send.
		e, _ := p.Instance.Endpoint(req.Endpoint)
		p.Endpoint = e.Name
	}
	now := time.Now()
	a.stats.picked(req.Service, p.Instance.ID, now)
	return p, a.tokens.issue(newPending(p, req.Service, now)), nil
}

// excludes returns the routing filter of a pick request, or nil. It
// copies the filter out of req, so that req stays on the stack: the pick
// goes through a function value, past which escape analysis cannot see.
// The endpoint is filtered here until the selector routes by it.
func (req *pickRequest) excludes() func(*registry.Instance) bool {
	if req.Version == "" && req.Zone == "" && len(req.Tags) == 0 && req.Endpoint == "" {
		return nil
	}
	f := &routeFilter{req.Version, req.Zone, req.Endpoint, req.Tags}
	return f.excluded
}

// tried returns the soft filter of the instances the call tried, or nil.
func (req *pickRequest) tried() func(*registry.Instance) bool {
	if len(req.Tried) == 0 {
		return nil
	}
	ids := req.Tried
	return func(in *registry.Instance) bool { return slices.Contains(ids, in.ID) }
}

// routeFilter is the hard routing filter of one pick request.
type routeFilter struct {
	version, zone, endpoint string
	tags                    []string
}

func (f *routeFilter) excluded(in *registry.Instance) bool {
	if f.version != "" && in.Version != f.version || f.zone != "" && in.Zone != f.zone {
		return true
	}
	if f.endpoint != "" {
		if _, ok := in.Endpoint(f.endpoint); !ok {
			return true
		}
	}
	for _, t := range f.tags {
		if !slices.Contains(in.Tags, t) {
			return true
		}
	}
	return false
}

// reportRequest is the body of POST /v1/report.
type reportRequest struct {
	Token string `json:"token"`
	// Outcome is success, business (the instance answered with an error
	// of the application: not counted against it), failure (the instance
	// failed: refused, reset, 5xx, timed out), fatal (failed, and a retry
	// cannot help) or abort (the caller gave up).
	Outcome   string  `json:"outcome"`
	LatencyMS float64 `json:"latency_ms"` // the call's duration as the caller measured it
}

// errUnknownToken is returned by report for a token that expired, was
// reported already, or was never issued.
var errUnknownToken = fmt.Errorf("%w: unknown token (expired, reported already, or not issued by this agent)", registry.ErrNotFound)

var outcomes = map[string]middleware.Class{
	"success": middleware.Success, "business": middleware.Business, "failure": middleware.Retryable,
	"retryable": middleware.Retryable, "fatal": middleware.Fatal, "abort": middleware.Abort,
}

// handleReport serves POST /v1/report, the hot path: see wire.go.
func (a *Agent) handleReport(w http.ResponseWriter, r *http.Request) {
	buf := getBuf()
	defer putBuf(buf)
	req, err := readRequest(r, buf, decodeReport)
	if err == nil {
		err = a.report(r.Context(), req)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// report reports a picked call's outcome as POST /v1/report does.
func (a *Agent) report(ctx context.Context, req reportRequest) error {
	class, ok := outcomes[req.Outcome]
	if !ok {
		return fmt.Errorf("%w: outcome %q is not one of success, business, failure, fatal, abort", registry.ErrInvalid, req.Outcome)
	}
	if req.LatencyMS < 0 || req.LatencyMS > float64(time.Hour/time.Millisecond) {
		return fmt.Errorf("%w: latency_ms %v is not between 0 and one hour", registry.ErrInvalid, req.LatencyMS)
	}
	p, ok := a.tokens.take(req.Token)
	if !ok {
		return errUnknownToken
	}
	a.finish(ctx, p, class, time.Duration(req.LatencyMS*float64(time.Millisecond)))
	return nil
}

// expire ends a pick whose token was never reported: an aborted call,
// which counts against no one. Its in-flight count ended long before,
// at the selector's in-flight bound.
func (a *Agent) expire(p *pending) {
	a.finish(context.Background(), p, middleware.Abort, time.Since(p.issued))
}

func (a *Agent) finish(ctx context.Context, p *pending, class middleware.Class, latency time.Duration) {
	mwhook.Report(ctx, p.p, int(class), latency)
	failed := class == middleware.Retryable || class == middleware.Fatal
	a.stats.reported(p.service, p.p.Instance.ID, p.issued, failed, class == middleware.Abort, latency)
	p.release()
}

// readRequest reads the body of r into *buf and decodes it: by hand if
// fast can, else with encoding/json.
func readRequest[Req any](r *http.Request, buf *[]byte, fast func([]byte) (Req, bool)) (Req, error) {
	body, err := readBody(r.Body, *buf)
	*buf = body
	if err != nil {
		return *new(Req), err
	}
	if req, ok := fast(body); ok {
		return req, nil
	}
	var req Req
	return req, decodeJSON(body, &req)
}

// readJSON decodes the JSON body of r (its first maxBody bytes) into v.
func readJSON(r *http.Request, v any) error {
	buf := getBuf()
	defer putBuf(buf)
	body, err := readBody(r.Body, *buf)
	*buf = body
	if err != nil {
		return err
	}
	return decodeJSON(body, v)
}

// decodeJSON decodes the first JSON value of body into v; a member v has
// no field for is an error.
func decodeJSON(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: request body: %v", registry.ErrInvalid, err)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	setJSONHeaders(w)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// apiError is the body of every error answer.
type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code"` // invalid, not_found, unavailable, stale, no_instances, too_many, closed, internal
}

func writeError(w http.ResponseWriter, err error) {
	status, code := classify(err)
	writeJSON(w, status, apiError{Error: err.Error(), Code: code})
}

func classify(err error) (int, string) {
	switch {
	case errors.Is(err, registry.ErrInvalid):
		return http.StatusBadRequest, "invalid"
	case errors.Is(err, registry.ErrNotFound):
		return http.StatusNotFound, "not_found"
	case errors.Is(err, errTooMany):
		return http.StatusTooManyRequests, "too_many"
	case errors.Is(err, selector.ErrNoInstances), errors.Is(err, selector.ErrAllExcluded):
		return http.StatusServiceUnavailable, "no_instances"
	case errors.Is(err, middleware.ErrStale):
		return http.StatusServiceUnavailable, "stale"
	case errors.Is(err, registry.ErrUnavailable):
		return http.StatusServiceUnavailable, "unavailable"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		// The request ended while the registry's first answer was awaited.
		return http.StatusServiceUnavailable, "unavailable"
	case errors.Is(err, registry.ErrClosed):
		return http.StatusServiceUnavailable, "closed"
	}
	return http.StatusInternalServerError, "internal"
}
