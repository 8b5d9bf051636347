package rostergrpc

import (
	"context"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/resolver"

	"github.com/roster-go/roster/registry"
)

// BalancerName, NewResolverBuilder and ServiceConfig expose the pieces
// DialOptions assembles, for tests that assemble them otherwise.
const BalancerName = balancerName

var ServiceConfig = serviceConfig

// NewResolverBuilder is the resolver DialOptions installs, resolving the
// instances' "grpc" endpoints.
func NewResolverBuilder(reg *registry.Registry) resolver.Builder {
	return newResolverBuilder(reg, defaultEndpoint)
}

// RPCContext is the context the interceptors give an RPC's attempts.
func RPCContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, triedCtx{}, newTried())
}

// PickerPartial reports whether p is a roster picker that excludes
// instances whose connection is not READY.
func PickerPartial(p balancer.Picker) bool {
	pk, ok := p.(*picker)
	return ok && pk.partial
}
