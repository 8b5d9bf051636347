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
// Register validates the instance (service name [a-z0-9][a-z0-9._-]{0,127},
// host:port address, at most 64 metadata pairs of ≤128-byte keys and
// ≤512-byte values, ≤16 KiB encoded; a *FieldError names the field), gives
// it a unique ID if it has none (<service>-<host>-<port>-<random>, so two
// processes on one address never overwrite each other) and writes it. The
// returned Lease heartbeats every TTL/3 (default TTL 10s) with jitter. When
// the backend reports the registration lost — expired during an outage,
// deleted by hand, data wiped, agent restarted — the lease writes it again
// by itself, with capped jittered backoff, until Deregister or Close. An
// optional health check withdraws the instance while it fails.
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
//
// # Errors
//
// Every error wraps ErrInvalid, ErrNotFound, ErrClosed or ErrUnavailable
// (or a context error), and no error or String output contains the
// credentials of a registry URL.
package registry
