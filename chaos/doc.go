// Package chaos holds the chaos suite. It runs on every backend: etcd,
// Redis with the hash and the keys layout, Consul, ZooKeeper standalone
// and as an ensemble, Kubernetes, dual:// and DNS SRV. A client calls a
// service of five instance processes without pause. It does so on four
// paths with their default options. Those are middleware.Client.Do,
// contrib/rosterhttp, contrib/rostergrpc, and a PHP client through a roster agent
// process.
//
// Meanwhile the registry server crashes and comes back empty, or restarts
// with its data. An instance is killed, the instances restart one by one,
// and the client is cut off from the registry for longer than the TTL.
// No fault may fail a call. A restarted registry must list every instance
// again within TTL + 1s of being ready, or TTL + 2s on ZooKeeper.
//
// Some backends have faults of their own. An ensemble loses a member,
// dual:// loses either side, and DNS SRV has no restart at once.
// TestChaosTopology adds the registry's own topology faults. It kills an
// etcd leader, fails a Redis Sentinel over, and makes a registry answer
// 2s late. TestChaosLongOutage runs an 11-minute outage, when
// ROSTER_CHAOS_OUTAGE is set.
//
// The package has tests only. Its Example shows how to run them and read
// the table a run ends with. docs/reliability.md gives the guarantees,
// the figures measured and the commands that run it.
package chaos
