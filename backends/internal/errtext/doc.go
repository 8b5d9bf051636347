// Package errtext holds one test of every backend's error texts together.
// It covers redis, rediss, redis+sentinel, redis+cluster, consul, consuls,
// etcd, etcds, zk, k8s, dns+srv, nats, nats+tls, dual and mem.
//
// An error from a bad URL, or from each operation on an unreachable
// server, names each layer once. Those are the call, the redacted URL, the
// portable sentinel, the backend and the cause. It matches the sentinel
// with errors.Is, and prints no credential. An opaque URL such as
// "consul:10.0.0.1:8500" is ErrInvalid and dials nothing. No typo of a URL
// holding a secret shows it in an error, in Redact, in a Registry's
// String() or in a log line.
//
// The package has tests and an Example only. It exports nothing.
package errtext
