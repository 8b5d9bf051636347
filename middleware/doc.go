// Package middleware calls services found in a registry. Call [NewClient]
// with a registry, then [Client.Do] with a service name and a [Call]. The
// Call runs against one instance, and Do retries it elsewhere on failure.
//
//	c, err := middleware.NewClient(reg) // close c before reg
//	err = c.Do(ctx, "user-svc", func(ctx context.Context, in registry.Instance) error {
//		return callHTTP(ctx, "http://"+in.Address+"/users/42")
//	})
//
// Each call runs through a chain of [Middleware]. The default chain runs
// from the outside in.
//
//	Throttle(ThrottleConfig{}) → Retry(RetryConfig{}) → Quarantine.Middleware() → pick + call
//
// [Throttle] rejects calls locally while a service refuses most of them.
// [Retry] makes 3 attempts in all, preferring instances not tried yet,
// under a retry budget. A [Quarantine] ejects an instance after 5 failures in a
// row, or when its success rate falls far below its peers'. The pick uses
// the selector's strategy over the service's cached instances.
// [WithMiddleware] replaces the chain, and [Hedge] is added that way.
//
// [WithEndpoint] sends a client's calls to a named port of each
// instance, such as "grpc", and [ForEndpoint] one call. The Call then gets
// the instance with that port's address in Address.
//
// Every attempt's error is classified by [DefaultClassify], or by
// [WithClassifier]. A [BusinessError] is the application's answer, so it is
// neither retried nor counted against the instance. A [FatalError] is
// counted but not retried. An attempt whose caller's context is done is
// neither. Other errors are retried and counted.
//
// The Client follows each service with one registry watch. While the
// registry fails, the last good list stays in use, flagged stale.
// [WithMaxStaleness] bounds how long. A backend that comes back empty
// does not empty the list either. [WithSnapshotDir] keeps each list on
// disk, for a start during an outage.
//
// Calls produce OpenTelemetry spans and metrics. [RegistryObserver] adds
// the Registry's own events. With a no-op tracer provider a call allocates
// nothing.
//
// A Client is safe for concurrent use. Close stops following services.
// Calls in flight finish, and new ones fail with registry.ErrClosed.
//
// See docs/middleware.md for every default, the reasons for it, the metric
// names and the measured costs.
package middleware
