// Package rostergrpc connects grpc-go to Roster. Call [NewClient] with a
// registry and a service name. It returns a grpc.ClientConn whose RPCs are
// balanced by Roster's selector strategies.
//
//	conn, err := rostergrpc.NewClient(reg, "user-svc",
//		[]rostergrpc.Option{rostergrpc.WithStrategy(selector.LeastRequest)},
//		grpc.WithTransportCredentials(insecure.NewCredentials()))
//
// To call grpc.NewClient yourself, pass it [Target] and [DialOptions].
//
// The resolver serves roster:///service targets from the registry's watch.
// It pushes every snapshot whole, one endpoint per instance ([InstanceOf]).
// Each instance is reached on its endpoint named "grpc", or on its Address
// when it announces no endpoints; [WithEndpoint] names another. An
// instance whose primary is another named endpoint ("http" only) is left
// out.
// A registry outage never empties the list, as stale snapshots keep the
// last instances. An empty snapshot is a real answer. RPCs then fail with
// Unavailable, or wait with grpc.WaitForReady. A registry that cannot be
// reached at start is named in the RPCs' errors, its URL redacted.
//
// The balancer, named "roster", keeps one SubConn per instance address. It
// feeds every instance to a selector.Selector and picks from its
// immutable view, among the instances whose connection is READY. A pick
// avoids quarantined instances and those the RPC already tried. It falls
// back in the same order as middleware.Client. Done feeds latency and
// error to the selector, and the classified outcome to a
// middleware.Quarantine. [WithSelector] adds selector options: with
// selector.WithLocality, an instance that is not READY, quarantined or
// draining is unusable in its zone's tier, and traffic spills to the
// other zones as the local zone's usable share falls.
//
// Outgoing metadata routes one RPC. The keys x-roster-version and
// x-roster-zone keep it to that version or zone. The key x-roster-hash-key
// is its affinity key, as is [WithKey]. A selector.WithRoute in the RPC's
// context routes it too.
//
// Retries are gRPC's own, set with [WithRetry]. By default an RPC gets 3
// attempts on UNAVAILABLE, and a retry goes to another instance. The
// service config's retryThrottling stops retries in an outage. gRPC
// never retries an RPC that received response headers; a unary RPC to a
// method named by [WithIdempotent] is then sent again.
//
// Unary RPCs go through middleware.Client's adaptive throttle, per
// service ([WithThrottle]). Failures on quarantined instances do not count.
//
// To stop a server without failing an RPC, deregister it first. Wait until
// clients have seen that, then call GracefulStop. See docs/integration.md
// for the details and the tests that measure them.
package rostergrpc
