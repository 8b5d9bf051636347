// Package redis is the Redis backend of Roster, for standalone Redis,
// Sentinel-managed failover and Redis Cluster, through go-redis's
// UniversalClient. Importing it registers the URL schemes:
//
//	redis://[user:pass@]host:6379[/db][?option=value&…]
//	rediss://…                                   TLS
//	redis+cluster://host1:7000,host2:7001[?…]    Redis Cluster (several seeds;
//	redis://host1:7000,host2:7001                 two or more hosts imply it)
//	redis+sentinel://[user:pass@]s1:26379,s2:26379[/db]?master=mymaster[&sentinel_password_file=…]
//
// Options are read by backend.Query, in the vocabulary every backend
// shares: an option given twice or unknown is an error; TLS is tls,
// ca_file, cert_file, key_file, server_name and skip_verify (on by
// default with rediss). The server's password is the URL's userinfo, else
// the content of password_file, else $ROSTER_REDIS_PASSWORD (EnvPassword);
// the Sentinels' is sentinel_password or sentinel_password_file, else
// $ROSTER_REDIS_SENTINEL_PASSWORD (EnvSentinelPassword). Client
// options: addr (more seeds, comma-separated), master, sentinel_username,
// client_name, pool_size, dial_timeout, read_timeout, write_timeout.
//
// Two storage layouts are offered (option layout=hash|keys).
//
// # Layout hash (default)
//
// All keys of one service share the hash tag {service}, so every operation
// is one atomic Lua script, also on Cluster:
//
//	<prefix>:{svc}:i:<id>   String, the instance as JSON, PX TTL
//	<prefix>:{svc}:idx      ZSet id → expiry deadline (ms, server TIME)
//	<prefix>:{svc}:rev      revision counter (INCR on every change)
//	<prefix>:{svc}:log      Stream change log, capped (MAXLEN ~), every entry
//	                        carries its revision: rev, op=put, id, data (the
//	                        instance) or rev, op=del, id
//	<prefix>:{svc}:sweeper  which watch sweeps the service (PX lease)
//	<prefix>:services       ZSet svc → latest deadline (for Services only)
//
// Register, Update and Heartbeat run the same script: it re-writes the whole
// record with a fresh TTL and deadline (not just PEXPIRE, so an index entry
// or record content lost in a failover is repaired), and appends a log entry
// only when the stored record was missing or different. A heartbeat that
// finds the record gone (expired during a partition, FLUSHALL, a failover
// that lost it, a manual DEL) writes nothing and returns ErrNotFound; the
// lease registers again at once, so the instance is back within one
// heartbeat and watchers see it return. Deadlines come from the server's
// TIME, so client clock skew does not matter. Lookups read the index
// (ZRANGEBYSCORE now +inf), never SCAN the keyspace, so an expired member is
// never listed even before it is swept.
//
// A watch takes a snapshot (instances, revision and the log's last ID in one
// script), then follows the log: the driver reads the logs of all its
// watches with one XREAD BLOCK per 1,024 logs, each on a connection of its
// own (on Cluster, one per hash slot, as a multi-key read must stay in one
// slot), woken by an entry on a private stream <prefix>:mux:<token> when a
// watch joins. Relists, sweeps and those wakes share one client of two
// connections, so a process watching 1,000 services holds four. A
// revision that does not follow the last one (a trimmed log, a FLUSHALL, a
// failover that lost writes) makes it relist; so does a quiet period without
// entries (option quiet, default 10s) if the revision counter moved, and so
// does a broken read (if the
// relist fails as well, the stream reports ErrUnavailable and the registry
// marks the watcher stale).
//
// Sweeps announce crashed instances: a script removes members whose deadline
// passed and whose key is gone, and logs their removal. One process per
// service sweeps at a time, across all processes: the holder of the
// sweeper key, taken with SET NX PX and renewed by every sweep for 3 sweep
// intervals. A driver sweeps all the services its watches follow from one
// goroutine with its own clock, in rounds: once per sweep interval (option
// sweep, default 1s) a round renews the leases it holds and sweeps those
// services, and claims the leases whose holder's would have run out; the
// scripts of a round cover up to 128 services each (services of one hash
// slot on Cluster) and go in one pipeline, so a process watching 1,000
// services runs 8 scripts a round, not 1,000. Between rounds only the
// services whose earliest deadline falls due, or whose log showed a put
// (the new member may be the earliest), are swept, together when they fall
// due together; so a crashed instance reaches watchers within its TTL
// plus, at worst, one sweep interval — typically a few milliseconds after
// its TTL. When the holder's process dies or its last watch of the service
// ends, another takes over in its first round after the lease runs out —
// within 4 sweep intervals — and sweeps at once. Until then removals wait:
// a crash reaches watchers within the later of TTL + sweep and 4 sweep
// intervals after the holder's end.
//
// A quiet watch (no log entry for option quiet) reads the service's
// revision counter, one GET; it relists only when the counter is not the
// one it has reached.
//
// # Forgetting (hash)
//
// A service without instances leaves nothing behind. Its idx, rev and log
// keys share one expiry, which every script that changes the service
// sets: a removal (deregistration or sweep) to option linger (default 5m)
// after the latest deadline left in the index, or after now if that is
// later; a put (registration, update, heartbeat) extends it, if needed,
// to 2 × linger after the new deadline, so that most heartbeats only read
// it. The instance keys expire at their own deadline, the sweeper key 3
// sweep intervals after its holder's last sweep. So once the last
// instance is deregistered or swept, every key of the service is gone
// linger later (and the sweeper key once nobody watches it); if it
// crashed and nobody sweeps the service, between linger and 2 × linger
// after its last deadline. The services index drops entries linger after
// their deadline and expires linger after the latest one written.
//
// The change log holds what a watcher needs to apply a change and no
// more: a put carries the instance's JSON, a removal only its ID. Every
// change, heartbeats included, trims entries older than linger (XTRIM
// MINID, exact), so the data of an instance that left stays in the log at
// most linger plus one heartbeat of the service's remaining instances;
// on top, the log is capped at about maxlen entries (option maxlen,
// default 1000, XADD MAXLEN ~). A watcher that falls further behind than
// the log reaches sees a revision gap and relists.
//
// Revisions after forgetting: a service that comes back after its keys
// expired starts again at revision 1 with a new log stream. A watch still
// reading the old log from its last ID gets the new entries all the same:
// stream IDs are the server's clock in milliseconds and the old log
// expired linger or more after its last entry, so the new entries sort
// after the watch's position. Their revision (1, say, after 57) does not
// follow the watch's, which is a gap: the watch relists and delivers the
// new state. Only a server clock set back by more than linger could place
// new entries before a watch's position; its quiet check then relists
// within quiet, unless the new counter happens to equal the old one. The registry keeps the revisions its Watchers see
// monotonic across such a restart of the counter, as across a FLUSHALL.
//
// Options: prefix (default "roster"; no '{' or '}', so the prefix ends
// where the service's hash tag starts and two prefixes, svc and
// svc:staging say, never share a key), sweep, quiet, maxlen, linger. TTLs
// have millisecond granularity, minimum 10ms.
//
// # Layout keys
//
// The layout of the widely copied "Redis as a service registry" article:
// one String per instance, key service:<name>:<addr> (the "service" prefix
// is option prefix, which may not contain ':': a reader splits the key at
// ':', so under prefix svc the keys of prefix svc:staging would read as a
// service "staging"), value JSON with string fields exactly as the article
// writes them:
//
//	{"addr":"10.0.0.1:8080","version":"1.2.0","weight":"100","metadata":"zone=hz-1"}
//
// metadata is k=v pairs separated by commas (',', '=' and '%' in values are
// %-escaped). Roster keeps its own fields there under keys starting with
// "roster_": roster_id (the instance ID) and roster_tags; the instance's
// Zone is "zone", as in the article. The TTL is set with SET … EX and
// refreshed with EXPIRE (whole seconds, minimum 1s). Records written by
// scripts that follow the article are discovered (their ID is derived from
// the service and address), and ours are readable by those scripts.
//
// The article's key has no instance ID. The first registration of an
// address owns service:<name>:<addr>; a second, live registration of the
// same address under another ID (two workers on one port, or a restarted
// process whose predecessor has not expired) is written to
// service:<name>:<addr>:<id> instead, so the two never overwrite each other.
// Scripts that take the address from the JSON value see both; scripts that
// cut it from the key name see a longer suffix for the second one.
//
// Listing uses SCAN MATCH over the escaped prefix (on every master in a
// Cluster), which costs O(keys in the database) per call. A watch relists
// every poll interval (option poll, default 1s) and, when the server has
// keyspace notifications enabled (notify-keyspace-events with E and g$x or
// A), relists at once on a set, del or expired event for the service
// (option notify=auto|on|off, default auto; never on Cluster, where events
// are node-local). Without notifications a change reaches watchers within
// one poll interval.
//
// A watch whose relist finds instances gone first checks the server's
// run_id (a restart) and the keyspace's epoch key <prefix>:~epoch, a
// random token created by the first watch that finds it missing and
// expiring 24h after the last watch pushed it back (hourly). A wipe
// (FLUSHALL, FLUSHDB, a restart without data) takes the key along; seeing
// its token gone or new, the watch reports driver.ErrUnavailable, so the
// registry holds the instances until their leases write them back, as
// after a restart.
//
// # Errors
//
// Errors wrap driver.ErrUnavailable (network, timeouts, server errors),
// driver.ErrNotFound, driver.ErrInvalid or driver.ErrClosed, and
// never contain passwords.
package redis
