// Package redis is Roster's Redis backend. Import it for its side effect
// and open a registry by URL with registry.Open:
//
//	import _ "github.com/roster-go/roster/backends/redis"
//
//	reg, err := registry.Open(ctx, "redis://127.0.0.1:6379/0")
//
// It serves standalone Redis, Sentinel failover and Redis Cluster through
// go-redis's UniversalClient. The URL picks the deployment:
//
//	redis://[user:pass@]host:6379[/db][?option=value&…]
//	rediss://…                                    TLS
//	redis+cluster://host1:7000,host2:7001[?…]     Redis Cluster
//	redis://host1:7000,host2:7001                 Cluster too (two or more hosts)
//	redis+sentinel://[user:pass@]s1:26379,s2:26379[/db]?master=mymaster
//
// To build a driver from go-redis options instead, call [New] and pass it
// to registry.New. [ParseURL] turns a URL into those options.
//
// Options use the vocabulary every backend shares. An unknown option, or
// one given twice, is an error. The password comes from the URL, else
// from password_file, else from $ROSTER_REDIS_PASSWORD ([EnvPassword]).
// Sentinels take sentinel_password or sentinel_password_file, else
// $ROSTER_REDIS_SENTINEL_PASSWORD ([EnvSentinelPassword]).
//
// # Layouts
//
// The option layout picks how instances are stored.
//
// With layout=hash, the default, each service's keys share the hash tag
// {service}. So every operation is one atomic Lua script, on Cluster too.
// Deadlines come from the server's clock. A watch follows the service's
// change log, a Redis stream. It sees every change in order, or relists
// after a gap. One process per service sweeps expired instances, so a
// crash reaches watchers within the TTL plus one sweep interval. A service with no instances leaves no
// key behind once linger passes.
//
// With layout=keys, one string per instance sits at service:<name>:<addr>.
// This is the layout of the widely copied "Redis as a service registry"
// article. Scripts that follow it see Roster's records, and Roster sees
// theirs. Listing scans the keyspace, and a watch polls. Keyspace
// notifications, when the server has them on, wake it at once.
//
// docs/backends/redis.md has the keys, the scripts, every option, the
// guarantees and their measurements.
//
// Errors wrap registry.ErrUnavailable, ErrNotFound, ErrInvalid or
// ErrClosed. They never contain a password.
package redis
