// Package registry is Roster's portable service registry. Open one by URL
// with [Open], after importing the backend for its scheme:
//
//	import _ "github.com/roster-go/roster/backends/etcd"
//
//	reg, err := registry.Open(ctx, os.Getenv("ROSTER_REGISTRY")) // "etcd://10.0.0.1:2379"
//	defer reg.Close()
//	lease, err := reg.Register(ctx, registry.Instance{Service: "api", Address: "10.0.0.5:8080"})
//	defer lease.Deregister(ctx)
//	w, err := reg.Watch(ctx, "api")
//	snap, err := w.Next(ctx) // the current instances, then each change
//
// A backend is a driver, storage only, registered under a URL scheme. So
// a switch from etcd to Redis or Consul is a change of URL. [New] wraps a
// driver you built yourself. Everything above the driver is written once,
// here.
//
// [Registry.Register] checks the instance against limits that are the
// same on every backend, and writes nothing when it fails. It returns a
// [Lease], which heartbeats every TTL/3, 10s TTL by default. When the
// backend loses the registration, the lease writes it again by itself.
//
// [Registry.Watch] returns a [Watcher]. All watchers of one service in one
// Registry share one backend watch and one cache. [Registry.Lookup]
// answers from that cache while a watch is live. Lookups without a
// deadline get [DefaultLookupTimeout].
//
// A backend that comes back after an outage may first answer without
// instances whose leases have not yet written them again. Those instances
// have not gone. So after a failed stream, or a revision that went back,
// a watch keeps serving the instances it served. It holds each until it
// reappears or the recovery window ends, [DefaultRecoveryWindow] or
// [WithRecoveryWindow]. Only absences are held.
//
// Every error wraps [ErrInvalid], [ErrNotFound], [ErrClosed] or
// [ErrUnavailable], or is a context error. No error or String output
// contains the credentials of a registry URL.
//
// docs/registry.md has the rules in full. docs/backends/limits.md lists
// the limits.
package registry
