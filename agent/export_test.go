package agent

import (
	"context"

	"github.com/roster-go/roster/registry"
)

// The wire types and calls behind the HTTP API, for the tests.
type (
	PickRequest     = pickRequest
	PickResponse    = pickResponse
	ReportRequest   = reportRequest
	RegisterRequest = registerRequest
	Error           = apiError
	Local           = localInfo
	State           = agentState
	Instances       = instanceList
)

var ErrUnknownToken = errUnknownToken

func (a *Agent) Pick(ctx context.Context, req PickRequest) (PickResponse, error) {
	return a.pickToken(ctx, req)
}

func (a *Agent) Report(ctx context.Context, req ReportRequest) error { return a.report(ctx, req) }

func (a *Agent) Register(ctx context.Context, req RegisterRequest) (registry.Instance, error) {
	return a.register(ctx, req)
}

func (a *Agent) State() State { return a.state() }

func (a *Agent) Registry() *registry.Registry { return a.reg }
