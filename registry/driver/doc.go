// Package driver is what a Roster backend implements, in the manner of
// gocloud.dev's pubsub/driver: users hold registry.Registry, the portable
// type, and never this package; a backend implements Driver,
// Registration and Stream here and registers a URL scheme with Register
// from its init function.
//
// A driver is storage only. Everything that is the same on every backend
// lives once in package registry: input validation (the limits here,
// checked before a driver sees an instance), instance IDs, leases that
// heartbeat and re-register, the watch cache shared by every reader,
// coalescing, periodic resync, stale marking and the recovery hold after
// a backend fault. A driver's contract is written on each interface; the
// conformance package checks it against a real server.
//
// The data types (Instance, Snapshot), the sentinel errors and the limits
// are defined here so that both sides share them; package registry names
// them too, so that programs import registry alone.
//
// A new backend is a driver package (this contract), a test-server
// package that starts its real server for tests, and a conformance test
// that runs conformance.Run against it.
package driver
