// Package selector picks one instance of a service per call: client-side
// load balancing over registry snapshots.
//
// A Selector follows a service's snapshots (Update, or Start with a
// *registry.Watcher) and, on every change, builds an immutable Picker:
// filters applied, draining instances set aside, weights normalised,
// rings and tables computed. The Picker is published through an atomic
// pointer; Pick only reads it. A pick takes no lock and allocates nothing,
// the Done feedback included, so its cost is the strategy's own (≈15–150 ns
// on a shared 2-vCPU VM; docs/benchmarks.md). Neither reads the system
// clock: they read a coarse process clock (see Done.Finish). Selector.Picker hands
// out the current Picker, for a caller that must keep picking from one
// set while the selector moves on (the gRPC balancer's pickers).
//
//	sel, err := selector.New(selector.WithStrategy(selector.P2CEWMA))
//	...
//	if err := sel.Start(ctx, watcher); err != nil { ... } // first snapshot applied
//	defer sel.Close()
//
//	inst, done, err := sel.Pick(ctx, selector.PickOptions{})
//	if err != nil { ... } // errors.Is(err, selector.ErrNoInstances)
//	err = call(ctx, inst.Address)
//	done.Finish(err) // the latency, measured on the selector's coarse clock
//
// # Contract
//
//   - Pick returns ErrNoInstances when there is nothing to pick from, and
//     ErrAllExcluded when PickOptions.Exclude rejected every instance.
//   - PickOptions.Tried and Avoid are soft: Pick relaxes them in one
//     stated order rather than fail — an untried, admitted instance, then
//     a tried one that is admitted, then any. middleware.Client and
//     contrib/rostergrpc both pick this way, so a retry goes to the same kind of
//     instance through either.
//   - A Picker never changes. Holders of an old Picker keep picking from
//     its set; the feedback their Done values give lands in the
//     selector's per-instance state all the same.
//   - Instances with Weight 0 are draining: they are picked only when no
//     other instance is left (or every other one is excluded).
//   - A stale snapshot (the registry backend is failing) is used as is:
//     the last known instances are the best guess, and are never dropped
//     because of a backend error.
//   - Per-instance state (requests in flight, latency EWMA) is kept by
//     instance ID across updates; an instance that drops out of a snapshot
//     and comes back later starts fresh.
//   - Done must be called once per successful Pick for LeastRequest,
//     P2CEWMA and bounded loads (it is what they measure); it is a cheap
//     no-op for the other strategies, so callers can always call it. A
//     pick whose Done never comes counts in flight for at most
//     WithInflightBound (DefaultInflightBound, about 8.6 s), so a caller
//     that died mid-call does not starve its instance; a late Done then
//     changes nothing.
//   - Filters run in Update, never per pick. Per-call routing is a Route
//     (PickOptions.Route or WithRoute): its prepared picker is cached with
//     the snapshot, so a routed pick allocates nothing either. WithSplit
//     sends a percentage of the calls to a canary, sticky per key.
//   - Weights are honoured by every strategy but RoundRobin and Random.
//     An instance new to the service (not in the first snapshot) ramps
//     its share over a slow start (defaultSlowStart: 30 s from 10 %);
//     Rewarm restarts the ramp of a readmitted instance.
//
// Strategies, defaults and the reasons for them are described in
// docs/selector.md.
package selector
