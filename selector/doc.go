// Package selector picks one instance of a service per call. It is
// client-side load balancing over registry snapshots. Call [New], feed the
// Selector snapshots with [Selector.Start] or [Selector.Update], then call
// [Selector.Pick] once per call.
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
// On every snapshot the Selector builds an immutable [Picker] and
// publishes it atomically. A pick only reads it. It takes no lock and
// allocates nothing, the Done feedback included. [Selector.Picker] hands
// out the current Picker, for a caller that must keep picking from one set.
//
// Call Done once per successful Pick. LeastRequest, P2CEWMA and bounded
// loads measure by it, and for other strategies it costs next to nothing.
// A pick whose Done never comes counts in flight for at most
// [DefaultInflightBound], about 8.6 s. [WithInflightBound] changes it.
//
// Pick returns [ErrNoInstances] when nothing is left to pick from. It
// returns [ErrAllExcluded] when PickOptions.Exclude rejects every instance.
// PickOptions.Tried and Avoid are soft, and Pick relaxes them in one stated
// order rather than fail. middleware.Client and contrib/rostergrpc pick
// the same way.
//
// Instances of weight 0 are draining. They are picked only when no other
// instance is left, or every other one is excluded. A stale snapshot is used as is, so a backend error
// never empties the list. Per-instance state is kept by instance ID across
// snapshots.
//
// Filters ([WithFilters]) run once per snapshot, never per pick. A [Route]
// narrows one call to a version, zone, tag or metadata value. [WithSplit] sends a share of
// the calls to a canary, sticky per key. New instances ramp up their share
// over a slow start, 30 s by default.
//
// PickOptions.Endpoint picks for a named port ("grpc"). Only instances
// that serve it are picked, by registry.Instance.Endpoint's rule. The
// Instance returned then holds that endpoint's address in Address.
//
// See docs/selector.md for the strategies, their defaults and the reasons
// for them.
package selector
