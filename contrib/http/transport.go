// Package rosterhttp routes net/http requests through Roster: an
// http.RoundTripper that sends http://<service>/path to an instance of the
// service picked by a middleware.Client (selector strategy, quarantine,
// retry on another instance, stale-aware discovery), and feeds every
// attempt's outcome back.
//
//	client, _ := middleware.NewClient(reg)
//	hc := &http.Client{Transport: rosterhttp.New(client)}
//	resp, err := hc.Get("http://user-svc/users/42")
//
// # Routing
//
// The URL's host is the service name (no port): the request is sent to
// the picked instance's address, with the URL's scheme, path and query.
// The Host header stays what the request had (the service name, unless
// set), as through a reverse proxy. For https, the base transport must
// verify the service's certificate name (tls.Config.ServerName), since the
// connection goes to an address.
//
// # Retries
//
// An attempt fails on a transport error (refused, reset, timeout) or on a
// status the Transport's RetryOn accepts (default 502, 503, 504). Failed
// attempts count towards the instance's quarantine and are retried on
// another instance by the client's middleware.Retry when the request is
// safe to send again:
//   - its method is idempotent (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) or
//     it carries an Idempotency-Key or X-Idempotency-Key header (as
//     net/http itself decides); any request is retried when it never
//     left (the connection was refused);
//   - and its body can be replayed: no body, or Request.GetBody set
//     (http.NewRequest sets it for bytes, strings and bytes.Buffer
//     bodies). A request with a one-shot body is sent once.
//
// When every attempt got a retryable status, the last response is
// returned as it came (the caller sees the 503 and its body); the
// responses of earlier attempts are drained and closed.
package rosterhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"

	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/registry"
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
	if req.URL == nil || req.URL.Port() != "" {
		closeBody(req)
		return nil, fmt.Errorf("%w: %q (want http://<service>/path, no port)", ErrNotService, req.URL.Host)
	}
	service := req.URL.Hostname()
	if err := registry.ValidateService(service); err != nil {
		closeBody(req)
		return nil, fmt.Errorf("%w: %w", ErrNotService, err)
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	retryOn := t.RetryOn
	if retryOn == nil {
		retryOn = defaultRetryOn
	}
	hasBody := req.Body != nil && req.Body != http.NoBody
	replayable := !hasBody || req.GetBody != nil
	safe := replayable && isIdempotent(req)

	var last *http.Response // the latest attempt's response
	attempts := 0
	err := t.Client.Do(req.Context(), service, func(ctx context.Context, in registry.Instance) error {
		if last != nil {
			discard(last)
			last = nil
		}
		attempts++
		out := req.Clone(ctx)
		out.URL.Host = in.Address
		if out.Host == "" {
			out.Host = req.URL.Host
		}
		if attempts > 1 && hasBody {
			body, err := req.GetBody()
			if err != nil {
				return middleware.FatalError(fmt.Errorf("rosterhttp: replay body: %w", err))
			}
			out.Body = body
		}
		resp, err := base.RoundTrip(out)
		if err != nil {
			// The request may have reached the instance: send it again
			// only if that is safe, or if it surely never left.
			if !safe && !(replayable && neverSent(err)) {
				return middleware.FatalError(err)
			}
			return err
		}
		if retryOn(resp) {
			last = resp
			serr := &StatusError{Instance: in, Status: resp.StatusCode}
			if !safe {
				return middleware.FatalError(serr)
			}
			return serr
		}
		last = resp
		return nil
	})
	if err == nil {
		return last, nil
	}
	var serr *StatusError
	if errors.As(err, &serr) && last != nil {
		return last, nil // the caller sees the instance's own answer
	}
	if last != nil {
		discard(last)
	}
	if attempts == 0 {
		closeBody(req) // never sent: RoundTrip must close it
	}
	return nil, fmt.Errorf("rosterhttp: %s: %w", service, err)
}

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

func discard(r *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 64<<10))
	r.Body.Close()
}

func closeBody(r *http.Request) {
	if r.Body != nil {
		r.Body.Close()
	}
}
