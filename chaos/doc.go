// Package chaos holds the chaos suite: on every backend (etcd, Redis with
// the hash and the keys layout, Consul, ZooKeeper standalone and as an
// ensemble, Kubernetes, dual:// and DNS SRV) a client calls a service of
// five instance processes without pause, on four paths with their default
// options (middleware.Client.Do, contrib/rosterhttp, contrib/rostergrpc, and a PHP
// client through a roster agent process), while the registry server
// crashes and comes back empty, restarts with its data, an instance is
// killed, the instances are restarted one by one, and the client is cut
// off from the registry for longer than the TTL. Every fault must fail no
// call, and a restarted registry must list every instance again within
// TTL + 1s of being ready (ZooKeeper: TTL + 2s). Some backends have
// faults of their own: an ensemble loses a member, dual:// either side,
// and DNS SRV has no restart at once (docs/reliability.md).
// TestChaosTopology adds the registry's own topology faults: an etcd
// leader killed, a Redis Sentinel failover, a registry answering 2s late;
// TestChaosLongOutage, an 11-minute outage (run when ROSTER_CHAOS_OUTAGE
// is set).
//
// The package has tests only (its Example shows how to run them and read
// the table a run ends with); docs/reliability.md gives the guarantees,
// the figures measured and the commands that run it.
package chaos
