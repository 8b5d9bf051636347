// Package errtext holds a test of every backend's error texts together:
// an error from a bad URL or an unreachable server names each layer once
// (the call, the redacted URL, the portable sentinel, the backend, the
// cause), matches the sentinel with errors.Is, and prints no credential.
//
// The package has tests and an Example only; it exports nothing.
package errtext
