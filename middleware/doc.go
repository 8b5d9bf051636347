// Package middleware calls services found in a registry. A Client runs
// each call through a chain of middleware (adaptive throttling per
// service, retry on another instance, local quarantine of failing
// instances, the pick) over a stale-aware cache of each service's
// instances, with OpenTelemetry spans and metrics.
//
//	c, err := middleware.NewClient(reg) // defaults below; close c before reg
//	err = c.Do(ctx, "user-svc", func(ctx context.Context, in registry.Instance) error {
//		return callHTTP(ctx, "http://"+in.Address+"/users/42")
//	})
//
// # The chain
//
// A Middleware is a plain value, func(next Handler) Handler; the Client
// composes them with Chain, the first outermost, around its innermost
// handler, which picks an instance and runs one attempt of the Call. The
// default chain is
//
//	Throttle(ThrottleConfig{}) → Retry(RetryConfig{}) → Quarantine.Middleware() → pick + call
//
// and WithMiddleware replaces it (Hedge is added that way). A Request
// carries one call through the chain; the Client reuses Requests, so
// middleware must not keep one after its handler returns.
//
// Every attempt's error is classified (DefaultClassify, or WithClassifier):
// Success; Business (the application's answer: not retried, not counted
// against the instance); Retryable (retried elsewhere, counted); Fatal
// (counted, not retried); Abort (the caller's context is done: neither).
//
//   - Retry: 3 attempts in all; before each retry, full-jitter backoff in
//     [0, min(250ms, 25ms·2ⁿ⁻¹)); no retry starts if its backoff would end
//     past the caller's deadline; a retry budget (20% of calls, at least 3
//     per second, over 10 s; RetryConfig.BudgetRatio) bounds retries, and
//     a refusal is joined to the error as ErrBudgetExhausted. Only Retryable errors are retried, and
//     never ErrNoInstances.
//   - Quarantine: 5 Retryable or Fatal failures in a row eject an instance
//     for 30 s × the times it was ejected (at most 300 s, plus up to 10%
//     jitter); then one probe call at a time is let through, and its
//     outcome readmits the instance or ejects it again. At most 10% of a
//     service's instances are ejected (always at least one), and below 50%
//     admitted instances quarantine is ignored (panic mode), so a small
//     service never goes dark. Instances that leave the service are
//     forgotten. Besides, every 10 s, among the instances with at least
//     100 calls in the interval — when there are at least 5 — those whose
//     success rate is below mean − 1.9 × stdev are ejected the same way
//     (Envoy's success-rate outlier detection). See QuarantineConfig.
//   - Throttle (on): adaptive client-side throttling per service (Google
//     SRE book): over 10 s, a call is rejected locally with probability
//     max(0, (requests − 2·accepts)/(requests + 1)), at most 0.9, once 20
//     calls were made; a service failing less than half its calls is never
//     throttled. Rejections match ErrThrottled. See ThrottleConfig. It is
//     the one per-service protection: what go-zero and kratos ship as
//     their breaker, and gentler than a closed/open circuit.
//   - Pick: the selector's strategy (selector.DefaultStrategy unless
//     WithSelector), with the selector's fallback order
//     (selector.PickOptions): an instance this call has not tried that
//     quarantine admits, then a tried one it admits, then any —
//     the same order as contrib/rostergrpc's balancer. The attempt's latency and
//     error go back to the selector (Done).
//
// # Stale cache and recovery
//
// The Client follows each service it calls with one registry Watcher,
// shared with every other reader of that service in the Registry. The
// first call to a service waits for its first snapshot, bounded by the
// caller's deadline or, without one, 10 s (then an error wrapping
// registry.ErrUnavailable).
//
//   - An error never replaces a good list: while the registry fails the
//     last good instances stay in use, flagged stale (Client.Snapshot,
//     span attribute roster.stale, metric roster.discovery.staleness).
//     They stay in use for the whole outage unless WithMaxStaleness sets
//     a bound, past which calls fail with ErrStale.
//   - A backend that comes back empty (restarted without its data, wiped)
//     does not empty the list either: the registry's watch holds the
//     instances it served until their leases write them back or its
//     recovery window ends (registry.WithRecoveryWindow, 15 s).
//   - An empty answer from a healthy registry is applied at once (the
//     last instance left); WithZeroProtection(d) holds the last non-empty
//     list for d first, against an operator's mistake.
//   - WithSnapshotDir(dir) persists each fresh snapshot; a Client that
//     starts while the registry is down uses it, stale, its age counted
//     from the last time a live watch confirmed it.
//
// # Telemetry
//
// Spans: roster.call per call (service, attempts, stale) and, under a
// recording call span, roster.attempt per attempt (service, instance,
// server.address, attempt, retry reason, stale). Metrics under scope github.com/roster-go/roster:
// discovery lookup latency, cache hits and snapshot updates, picks and
// failures per instance, retries by reason, retry-budget refusals,
// quarantined instances, ejections by reason, local rejections by reason,
// staleness. docs/middleware.md lists the metric and attribute names. RegistryObserver, installed on the Registry
// with registry.WithObserver, adds the Registry's own events under names
// of their own (roster.registry.*): Lookup cache hits and backend
// latency, watch snapshots, resync spans, lease state changes. Providers
// default to the OpenTelemetry globals; metric recording is skipped when
// no SDK listens, and with an explicit no-op tracer provider a call
// allocates nothing.
//
// A Client is safe for concurrent use. Close stops following services;
// calls in flight finish, new ones fail with registry.ErrClosed. The
// reasons for every default are in docs/middleware.md.
package middleware
