package rostergrpc

// BalancerName, NewResolverBuilder and ServiceConfig expose the pieces
// DialOptions assembles, for tests that assemble them otherwise.
const BalancerName = balancerName

var (
	NewResolverBuilder = newResolverBuilder
	ServiceConfig      = serviceConfig
)
