package rostergrpc

import (
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
