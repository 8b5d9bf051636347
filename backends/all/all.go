// Package all registers every backend of this module with registry.Open.
// Import it for its side effect in a program that takes the registry URL
// from configuration:
//
//	import _ "github.com/roster-go/roster/backends/all"
//
// A switch of backend is then a change of URL, never of code. The schemes
// are redis, rediss, redis+sentinel, rediss+sentinel, redis+cluster,
// rediss+cluster, consul, consuls, etcd, etcds, zk, k8s, nats, nats+tls,
// dns+srv, dual and mem. A program that knows its backend imports that
// package alone, and links nothing else.
package all

import (
	_ "github.com/roster-go/roster/backends/consul"     // consul://, consuls://
	_ "github.com/roster-go/roster/backends/dnssrv"     // dns+srv://
	_ "github.com/roster-go/roster/backends/dual"       // dual://
	_ "github.com/roster-go/roster/backends/etcd"       // etcd://, etcds://
	_ "github.com/roster-go/roster/backends/kubernetes" // k8s://
	_ "github.com/roster-go/roster/backends/memory"     // mem://
	_ "github.com/roster-go/roster/backends/nats"       // nats://, nats+tls://
	_ "github.com/roster-go/roster/backends/redis"      // redis://, rediss://, +sentinel, +cluster
	_ "github.com/roster-go/roster/backends/zookeeper"  // zk://
)
