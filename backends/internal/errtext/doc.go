// Package errtext holds a test of every backend's error texts together
// (redis, rediss, redis+sentinel, redis+cluster, consul, consuls, etcd,
// etcds, zk, k8s, dns+srv, dual, mem): an error from a bad URL or from
// each operation on an unreachable server names each layer once (the
// call, the redacted URL, the portable sentinel, the backend, the cause),
// matches the sentinel with errors.Is, and prints no credential; an
// opaque URL ("consul:10.0.0.1:8500") is ErrInvalid and dials nothing;
// no typo of a URL holding a secret shows it in an error, in Redact, in a
// Registry's String() or in a log line.
//
// The package has tests and an Example only; it exports nothing.
package errtext
