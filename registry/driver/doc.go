// Package driver is the contract a Roster backend implements. Programs
// use package registry; a backend implements Driver, Registration and
// Stream, and calls Register from its init function to claim a URL
// scheme.
//
// A driver is storage only, as in gocloud.dev's driver packages:
// package registry wraps it in the portable Registry and does the rest
// once. The conformance package checks a driver against its real server.
// docs/architecture.md shows a backend written against this contract.
package driver
