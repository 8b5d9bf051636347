// Package agent is the local process behind `roster agent`: it keeps the
// registry's lists for every program on the host and serves discovery,
// picks, outcome reports and local registrations as JSON over HTTP on
// loopback (or a Unix socket), so PHP, Python, Node or a shell script get
// the same strategies, quarantine and stale-cache fallback as a Go
// middleware.Client — and all the short-lived workers of a host (PHP-FPM)
// share one list and one view of which instances fail.
//
// # API
//
//	GET    /v1/services                      the registry's services
//	GET    /v1/services/{service}            its instances, index, revision, stale flag
//	GET    /v1/services/{service}?index=N&wait=30s   long poll: answers when the index is not N
//	POST   /v1/pick     {"service","strategy","key","version","zone","tags"} → {"token","instance","stale"}
//	POST   /v1/report   {"token","outcome","latency_ms"} → 204
//	POST   /v1/register {instance fields, "ttl", "check_url", "check_interval"} → the instance
//	GET    /v1/register                      the local registrations and their lease states
//	DELETE /v1/register/{id}
//	GET    /v1/state, /v1/events             the dashboard's state (JSON, server-sent events)
//	GET    /metrics                          Prometheus, through OpenTelemetry
//	GET    /                                 the dashboard
//
// # Contract
//
//   - A pick is a middleware.Client pick, without the call: one Client per
//     strategy in use, each with its own quarantine. Routing filters
//     (version, zone, tags) are hard: a pick never returns an instance
//     they reject, and fails with 503 "no_instances" when none is left.
//   - Every pick returns a token; reporting it feeds the call's outcome
//     and latency to the selector (in-flight count, latency EWMA) and to
//     the quarantine, exactly as an attempt through Client.Do does. A
//     token is reported once. A pick counts in flight for at most the
//     selector's in-flight bound (selector.DefaultInflightBound, about
//     8.6 s), reported or not, so a client that died mid-call does not
//     starve the instance; a later report still feeds latency and
//     quarantine. An unreported token expires after Config.TokenTTL
//     (default 1 minute) and counts as an aborted call; at most
//     Config.MaxTokens wait, past that the oldest expires early.
//   - While the registry fails, picks go on from the last good list
//     (flagged "stale"), for the whole outage unless Config.MaxStaleness
//     bounds it; the instances endpoint flags the list stale too.
//   - The index of the instances endpoint counts the changes this agent
//     saw (instances or stale flag); a long poll with ?index=N answers as
//     soon as the index differs from N, or after ?wait (default 5m, at
//     most 10m) with the unchanged state. An index from an earlier run of
//     the agent differs, so the poll answers at once.
//   - Errors are JSON {"error","code"}: 400 invalid, 403 forbidden (a
//     request of a web page: see below), 404 not_found (an unknown token
//     or registration), 429 too_many, 503 no_instances, stale,
//     unavailable or closed.
//   - The API has no authentication, so it serves programs of its host
//     only: a request with an Origin other than the agent's own (a
//     cross-site form or fetch from a browser on the host) is refused,
//     and over TCP so is a Host other than a loopback address or
//     localhost (DNS rebinding). Listen on loopback or a Unix socket.
//   - Local registrations are leases the agent holds: they live while
//     the agent does and are deregistered by Close. With check_url the
//     instance is withdrawn while its process's HTTP check fails.
//   - The agent follows at most Config.MaxServices services.
//
// See docs/agent.md for examples in PHP, Python and the shell.
package agent
