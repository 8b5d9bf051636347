// Package rostergrpc connects grpc-go to Roster: a resolver for
// roster:///service-name targets fed by the registry's watch, and a
// load-balancing policy ("roster") whose picker uses Roster's selector
// strategies, with every RPC's outcome fed back to the selector (latency
// EWMA, requests in flight) and to a middleware.Quarantine.
//
//	conn, err := grpc.NewClient(rostergrpc.Target("user-svc"),
//		append(rostergrpc.DialOptions(reg, rostergrpc.WithStrategy(selector.LeastRequest)),
//			grpc.WithTransportCredentials(insecure.NewCredentials()))...)
//
// # Resolver
//
// One registry Watcher per ClientConn (watchers of one service share the
// registry's cache). Every snapshot is pushed whole, one endpoint per
// instance, with the instance in the endpoint's attributes (InstanceOf).
// A backend outage never empties the list: stale snapshots keep the last
// known instances; the error is reported only while no snapshot was ever
// had. An empty snapshot is a real answer: RPCs then fail with
// Unavailable (or wait, with grpc.WaitForReady).
//
// A registry that cannot be reached at the client's start is named
// (redacted URL) in the RPCs' errors: gRPC holds RPCs until the
// resolver's first answer or error, which may take the registry's whole
// timeout, so an RPC whose deadline ends first gets a DeadlineExceeded
// saying which registry it waited for and for how long; after the
// registry's error, RPCs fail at once with Unavailable quoting it.
//
// # Balancer
//
// One SubConn per instance address, kept connected. On every change of
// addresses, weights or connectivity the balancer feeds the READY
// instances to a selector.Selector and publishes a picker over the
// selector's immutable view of exactly those instances (selector.Picker):
// Pick only reads it, and an old picker never sees a newer set. Draining
// instances (weight 0, Lease.Drain) stay connected but are picked only
// when nothing else is left, so in-flight and last-resort traffic still
// works. Pick falls back in the selector's order (selector.PickOptions),
// the same as middleware.Client: an instance this RPC has not tried that
// the quarantine admits, then one it tried that the quarantine admits,
// then any. Done reports the latency and error to the selector and the
// classified outcome (middleware.Classifier) to the quarantine.
//
// # Routing one RPC
//
// Outgoing metadata routes one RPC: x-roster-version and x-roster-zone
// keep it to the instances of that version or zone (a selector.Route:
// when none is deployed the RPC fails with Unavailable; while
// connections are still being made it waits for them), x-roster-hash-key
// is its affinity key for the consistent-hash strategies and canary
// splits (WithKey wins over it). A selector.WithRoute in the RPC's
// context routes it too.
//
// # Retries
//
// DialOptions installs gRPC's own retry policy (3 attempts on UNAVAILABLE
// by default, WithRetry), and interceptors that record each RPC's failed
// instances so that the retry goes elsewhere. gRPC retries only before
// the server's response headers arrive, which covers a killed or
// restarting server. Roster's middleware.Retry is not used here: retries
// belong to the channel.
//
// # Graceful shutdown of a server
//
// Deregister (or Drain) first, wait until clients have seen it (the
// rosterfx drain window), then GracefulStop: no RPC fails. See
// docs/integration.md.
package rostergrpc
