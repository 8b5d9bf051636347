// Package registry is Roster's portable service registry: the types users
// hold (Instance, Snapshot, Registry, Lease, Watcher), and everything that
// is the same on every backend, written once.
//
// A backend is a Driver — storage only — registered under a URL scheme, so
// that switching from etcd to Redis or Consul is a change of URL:
//
//	import _ "github.com/roster-go/roster/backends/etcd"
//	reg, err := registry.Open(ctx, os.Getenv("ROSTER_REGISTRY")) // "etcd://10.0.0.1:2379"
//
// # Registration
//
// Register validates the instance (service name [a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?:
// a Kubernetes label value, at most a DNS label long;
// a host:port address, stored in its canonical form (CanonicalAddress),
// weight at most 65535, at most 63 metadata pairs of ≤128-byte keys and
// ≤512-byte values, ≤16 KiB encoded; version, zone, tags and metadata
// values printable UTF-8, no control characters; a *FieldError names the
// field; these limits are the same on every backend and nothing is
// written when they fail), gives Weight 0 the DefaultWeight unless the
// Drained option asks for an instance that starts out of rotation, gives
// it a unique ID if it has none
// (<service>-<host>-<port>-<random>, so two processes on one address never
// overwrite each other) and writes it. The
// returned Lease heartbeats every TTL/3 (default TTL 10s) with jitter. When
// the backend reports the registration lost — expired during an outage,
// deleted by hand, data wiped, agent restarted — the lease writes it again
// by itself, with jittered backoff capped at the heartbeat interval (so it
// is back within one interval of the backend's return), until Deregister
// or Close. An optional health check withdraws the instance while it
// fails.
//
// Any positive Duration is accepted by every option, up to math.MaxInt64:
// arithmetic on durations saturates instead of overflowing, and a panic in
// a user's health check or state hook is caught (a failed check; a logged
// hook), so no option or callback can crash the process from a lease's
// goroutine.
//
// # Discovery
//
// Watch follows a service. All watchers of one service in one Registry
// share a single backend watch and cache ("one refresh loop for every
// worker"); see Watcher for the exact delivery contract: initial state
// always delivered, coalesced updates, revisions that never go back, stale
// marking instead of emptying on errors. The cache re-lists each watched
// service every resync interval (random phase), to heal anything a change
// feed missed. Lookup answers from that cache when a watch is live.
// Lookup and Services ask the backend under the caller's deadline, or
// DefaultLookupTimeout (15s) when the context has none, so that no
// backend can leave a call waiting.
//
// # Surviving a backend that restarts empty
//
// A backend that comes back after an outage — restarted without its data,
// wiped, or simply reachable again — first answers without the instances
// whose leases have not yet written themselves again. Those instances have
// not gone; their leases return within one heartbeat interval. So when a
// watch's stream comes back from a failure, or sees the backend's revision
// go back, it keeps serving the instances it served before until each reappears or
// the recovery window (DefaultRecoveryWindow, 15s; WithRecoveryWindow)
// ends. Only absences are held: instances in the backend's answer are
// served as the backend has them. An instance that really died during the
// outage is offered for at most the window, where the middleware's retry
// and quarantine route around it. A wipe that a connected watch cannot
// tell from ordinary changes (the revision did not go back) is applied as
// the backend reports it.
//
// # Errors
//
// Every error wraps ErrInvalid, ErrNotFound, ErrClosed or ErrUnavailable
// (or a context error), and no error or String output contains the
// credentials of a registry URL. A driver's error names the backend and
// the operation once; Registry adds no second prefix to it.
//
// # What is read back
//
// Every record a driver reads is checked before it is served: a record
// of another service, an address that does not parse, a field past the
// limits or a repeated ID is skipped and reported (a rate-limited slog
// warning), never served.
package registry
