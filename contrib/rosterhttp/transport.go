// Package rosterhttp routes net/http requests through Roster. Call [New]
// with a middleware.Client and use the [Transport] in an http.Client. A
// request to http://<service>/path then goes to an instance of the service.
//
//	client, _ := middleware.NewClient(reg)
//	hc := &http.Client{Transport: rosterhttp.New(client)}
//	resp, err := hc.Get("http://user-svc/users/42")
//
// The URL's host is the service name, without a port; any other host
// fails with [ErrNotService]. The request goes to the picked instance's
// endpoint named by the URL's scheme (http, https; [Transport.Endpoint]
// sets another), with the URL's scheme, path and query. An instance that
// announces no endpoints serves every name on its address. The
// Host header stays as the request had it, as through a reverse proxy. For
// https, set tls.Config.ServerName on the base transport.
//
// Each attempt goes through the client's chain, which picks, quarantines
// and retries. Its outcome is fed back. Three request headers route one
// request. X-Roster-Version and X-Roster-Zone keep it to that version or
// zone. X-Roster-Hash-Key is its affinity key.
//
// The client's per-service policies (middleware.WithPolicy, SetPolicy)
// apply to the requests. A policy's hash_key names the header that holds
// the affinity key. See docs/policy.md.
//
// An attempt fails on a transport error or on a status RetryOn accepts
// (502, 503 or 504 by default). It is retried on another instance only
// when that is safe. The method must be idempotent, or the request must
// carry an Idempotency-Key header. The body must be replayable, that is
// absent or with Request.GetBody set. A request whose connection was
// refused never left, so it is always retried. When the last attempt got a
// retryable status, that response is returned as it came.
//
// With middleware.Hedge in the chain, a safe request may be in flight on
// two instances at once. The first success wins, and the other attempt is
// cancelled.
//
// The returned body stays readable until it is closed or read to the end,
// or the request's context ends. Closing it releases the attempt, as with
// net/http.
//
// See docs/integration.md for the details.
package rosterhttp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"

	"github.com/roster-go/roster/internal/backend"

	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// Transport is an http.RoundTripper over a middleware.Client. Its fields
// must not change once it is in use.
type Transport struct {
	// Client picks instances, retries and quarantines. Required.
	Client *middleware.Client
	// Base sends each attempt (default http.DefaultTransport).
	Base http.RoundTripper
	// RetryOn reports whether a response is a failure of the instance, to
	// be retried elsewhere and counted (default: 502, 503, 504).
	RetryOn func(*http.Response) bool
	// Endpoint names the port of each instance that requests go to
	// (default: the URL's scheme, "http" or "https"). Instances that
	// announce no endpoints serve every name on their Address.
	Endpoint string
}

// New returns a Transport over c with the defaults.
func New(c *middleware.Client) *Transport { return &Transport{Client: c} }

// ErrNotService reports a URL whose host cannot be a service name.
var ErrNotService = errors.New("rosterhttp: URL host is not a service name")

// StatusError is the error of an attempt that got a status RetryOn
// accepts.
type StatusError struct {
	Instance registry.Instance
	Status   int
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("rosterhttp: %s (%s) answered %d %s", e.Instance.ID, e.Instance.Address, e.Status, http.StatusText(e.Status))
}

func defaultRetryOn(r *http.Response) bool {
	switch r.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil {
		closeBody(req)
		return nil, fmt.Errorf("%w: request without a URL (want http://<service>/path)", ErrNotService)
	}
	if req.URL.Port() != "" {
		closeBody(req)
		return nil, fmt.Errorf("%w: %q (want http://<service>/path, no port)", ErrNotService, req.URL.Host)
	}
	service := req.URL.Hostname()
	if err := backend.ValidateService(service); err != nil {
		closeBody(req)
		return nil, fmt.Errorf("%w: %w", ErrNotService, err)
	}
	rt := t.newRoundTrip(req)
	ctx := req.Context()
	if !rt.safe {
		// Two copies at once of a request that may not be sent twice:
		// never. Nor a retry of one that may have left, whatever the
		// service's policy says.
		ctx = middleware.Idempotent(middleware.NoHedge(ctx), false)
	}
	ctx, key := routeFromHeader(ctx, req.Header)
	if p, ok := t.Client.Policy(service); ok && p.HashKey != "" {
		// The service's policy names the header of its affinity key.
		key = cmp.Or(req.Header.Get(p.HashKey), key)
	}
	ctx = middleware.ForEndpoint(ctx, cmp.Or(t.Endpoint, req.URL.Scheme))
	err := t.Client.DoKey(ctx, service, key, rt.attempt)
	return rt.finish(service, err)
}

// The routing headers a request may carry (see the package doc).
const (
	headerVersion = "X-Roster-Version"
	headerZone    = "X-Roster-Zone"
	headerHashKey = "X-Roster-Hash-Key"
)

// routeFromHeader returns ctx routed by the request's routing headers,
// and its affinity key.
func routeFromHeader(ctx context.Context, h http.Header) (context.Context, string) {
	r := selector.Route{Version: h.Get(headerVersion), Zone: h.Get(headerZone)}
	if r != (selector.Route{}) {
		ctx = selector.WithRoute(ctx, r)
	}
	return ctx, h.Get(headerHashKey)
}

// roundTrip is one RoundTrip, shared by its attempts. They may run
// concurrently (middleware.Hedge), and a cancelled one may still be
// finishing after Client.Do has returned.
type roundTrip struct {
	req        *http.Request
	base       http.RoundTripper
	retryOn    func(*http.Response) bool
	hasBody    bool
	replayable bool // no body, or GetBody makes new copies
	safe       bool // replayable and idempotent: may be sent again

	mu      sync.Mutex
	started int            // attempts begun; the first one sends req.Body
	won     *http.Response // the first success
	failed  *http.Response // the latest response RetryOn accepted
	done    bool           // RoundTrip returned: late attempts discard what they get
}

func (t *Transport) newRoundTrip(req *http.Request) *roundTrip {
	rt := &roundTrip{req: req, base: t.Base, retryOn: t.RetryOn}
	if rt.base == nil {
		rt.base = http.DefaultTransport
	}
	if rt.retryOn == nil {
		rt.retryOn = defaultRetryOn
	}
	rt.hasBody = req.Body != nil && req.Body != http.NoBody
	rt.replayable = !rt.hasBody || req.GetBody != nil
	rt.safe = rt.replayable && isIdempotent(req)
	return rt
}

// attempt is the middleware.Call: one try on one instance.
func (rt *roundTrip) attempt(ctx context.Context, in registry.Instance) error {
	first, err := rt.begin(ctx)
	if err != nil {
		return err
	}
	resp, err := rt.send(ctx, in, first)
	if err != nil {
		// The request may have reached the instance: send it again
		// only if that is safe, or if it surely never left.
		if !rt.safe && !(rt.replayable && neverSent(err)) {
			return middleware.FatalError(err)
		}
		return err
	}
	if rt.retryOn(resp) {
		rt.keepFailed(resp)
		serr := &StatusError{Instance: in, Status: resp.StatusCode}
		if !rt.safe {
			return middleware.FatalError(serr)
		}
		return serr
	}
	rt.keepWon(resp)
	return nil
}

// errLate is the error of an attempt that starts after RoundTrip returned.
var errLate = errors.New("rosterhttp: attempt started after the round trip ended")

// begin counts an attempt and reports whether it is the first, which
// sends req.Body itself.
func (rt *roundTrip) begin(ctx context.Context) (first bool, err error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.done {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		return false, middleware.BusinessError(errLate)
	}
	rt.started++
	return rt.started == 1, nil
}

// send sends the request to in. ctx cancels the attempt until its
// response arrives; the response's body then lives until the caller
// closes it or reads it to the end, or the caller's own context ends —
// not until ctx does, since Hedge ends the context of every attempt, the
// winner's too, when the call returns.
func (rt *roundTrip) send(ctx context.Context, in registry.Instance, first bool) (*http.Response, error) {
	actx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stopAttempt := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	var resp *http.Response
	out, err := rt.outgoing(actx, in, first)
	if err == nil {
		resp, err = rt.base.RoundTrip(out)
	}
	if !stopAttempt() {
		// ctx ended first: this attempt was cancelled (a hedge that
		// lost, the caller gave up) even if a response came.
		if err == nil {
			resp.Body.Close()
			err = context.Cause(ctx)
		}
		cancel(nil)
		return nil, err
	}
	if err != nil {
		cancel(nil)
		return nil, err
	}
	caller := rt.req.Context()
	stopCaller := context.AfterFunc(caller, func() { cancel(context.Cause(caller)) })
	resp.Body = releasing(resp.Body, func() {
		stopCaller()
		cancel(nil)
	})
	return resp, nil
}

// errNotReplayable is the error of a second attempt of a request whose
// body cannot be sent again. RoundTrip never makes one; a custom chain
// that runs a call again regardless of its error class can.
var errNotReplayable = errors.New("rosterhttp: request body cannot be sent again (Request.GetBody is nil)")

// outgoing returns the attempt's request to in.
func (rt *roundTrip) outgoing(ctx context.Context, in registry.Instance, first bool) (*http.Request, error) {
	out := rt.req.Clone(ctx)
	out.URL.Host = in.Address
	if out.Host == "" {
		out.Host = rt.req.URL.Host
	}
	if rt.hasBody && !first {
		if rt.req.GetBody == nil {
			return nil, middleware.FatalError(errNotReplayable)
		}
		body, err := rt.req.GetBody()
		if err != nil {
			return nil, middleware.FatalError(fmt.Errorf("rosterhttp: replay body: %w", err))
		}
		out.Body = body
	}
	return out, nil
}

// keepWon keeps resp as the answer unless another attempt won already, or
// RoundTrip has returned.
func (rt *roundTrip) keepWon(resp *http.Response) {
	rt.mu.Lock()
	keep := !rt.done && rt.won == nil
	if keep {
		rt.won = resp
	}
	rt.mu.Unlock()
	if !keep {
		resp.Body.Close() // a hedge that lost the race
	}
}

// keepFailed keeps resp as the answer to return if every attempt fails,
// in place of the one kept before.
func (rt *roundTrip) keepFailed(resp *http.Response) {
	rt.mu.Lock()
	old := resp
	if !rt.done {
		old, rt.failed = rt.failed, resp
	}
	rt.mu.Unlock()
	if old != nil {
		discard(old)
	}
}

// finish ends the round trip with the chain's outcome: the winning
// response, or the last failed one when the chain failed on a status,
// or the error. Every other response is closed.
func (rt *roundTrip) finish(service string, err error) (*http.Response, error) {
	rt.mu.Lock()
	rt.done = true
	won, failed, started := rt.won, rt.failed, rt.started
	rt.won, rt.failed = nil, nil
	rt.mu.Unlock()
	if started == 0 {
		closeBody(rt.req) // never sent: RoundTrip must close it
	}
	var serr *StatusError
	switch {
	case err == nil && won != nil:
		discard(failed)
		return won, nil
	case errors.As(err, &serr) && failed != nil:
		discard(won)
		return failed, nil // the caller sees the instance's own answer
	}
	discard(won)
	discard(failed)
	if err == nil {
		// Only a custom chain that reports success without a
		// successful call gets here.
		err = errNoResponse
	}
	return nil, fmt.Errorf("rosterhttp: %s: %w", service, err)
}

var errNoResponse = errors.New("no attempt succeeded, yet the chain reported success")

// releasing wraps a response body so that release runs once the caller is
// done with it: at Close, or when a read reaches the end — as net/http's
// Client does for its timeout. A 101 Switching Protocols body stays
// writable.
func releasing(rc io.ReadCloser, release func()) io.ReadCloser {
	b := &body{rc: rc, release: release}
	if w, ok := rc.(io.Writer); ok {
		return &rwBody{b, w}
	}
	return b
}

type body struct {
	rc      io.ReadCloser
	release func() // safe to call more than once
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.release()
	}
	return n, err
}

func (b *body) Close() error {
	err := b.rc.Close()
	b.release()
	return err
}

type rwBody struct {
	*body
	w io.Writer
}

func (b *rwBody) Write(p []byte) (int, error) { return b.w.Write(p) }

func isIdempotent(r *http.Request) bool {
	switch r.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	_, a := r.Header["Idempotency-Key"]
	_, b := r.Header["X-Idempotency-Key"]
	return a || b
}

// neverSent reports a dial failure: the request did not leave.
func neverSent(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// discard drains a little of r's body, so that its connection can be
// reused, and closes it. r may be nil.
func discard(r *http.Response) {
	if r == nil {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 64<<10))
	r.Body.Close()
}

func closeBody(r *http.Request) {
	if r.Body != nil {
		r.Body.Close()
	}
}
