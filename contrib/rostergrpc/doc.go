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
// Unavailable, or wait with grpc.WaitForReady. A registry that cannot be reached at start is named in
// the RPCs' errors, with its URL redacted.
//
// The balancer, named "roster", keeps one SubConn per instance address. It
// feeds the READY instances to a selector.Selector and picks from its
// immutable view. A pick avoids quarantined instances and those the RPC
// already tried. It falls back in the same order as middleware.Client.
// Done feeds latency and error to the selector, and the classified outcome
// to a middleware.Quarantine.
//
// Outgoing metadata routes one RPC. The keys x-roster-version and
// x-roster-zone keep it to that version or zone. The key x-roster-hash-key
// is its affinity key, as is [WithKey]. A selector.WithRoute in the RPC's
// context routes it too.
//
// Retries are gRPC's own, set with [WithRetry]. By default an RPC gets 3
// attempts on UNAVAILABLE, and a retry goes to another instance.
//
// To stop a server without failing an RPC, deregister it first. Wait until
// clients have seen that, then call GracefulStop. See docs/integration.md
// for the details and the tests that measure them.
package rostergrpc
