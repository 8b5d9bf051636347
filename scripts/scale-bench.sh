#!/usr/bin/env bash
# scale-bench.sh runs "roster bench" at N = 10, 100, 1,000 and 10,000
# instances (Consul: up to 1,000) against a private redis-server, a
# "roster dev" etcd and a Consul dev agent, writing one JSON report per
# line to docs/bench/scale.jsonl, then draws docs/scale.svg with tools/plot.
# Needs redis-server and $ROSTER_CONSUL_BIN (scripts/test.sh builds it).
# BACKENDS (default "redis etcd consul") and SIZES (default "10 100 1000
# 10000") narrow the series; APPEND=1 keeps the reports already written;
# CONSUL_QUERY (e.g. "?max_conns=32") is appended to the Consul URL.
# HOLD (default 10s) is how long leases are held while heartbeat CPU and
# flaps are measured; SERVICES fixes S for every size (default N/10, at
# most 1,000); SERIES (default "curve") labels the reports: tools/plot
# draws the "curve" series and lists every series in its table.
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/bench/scale.jsonl
mkdir -p docs/bench
[ -n "${APPEND:-}" ] || : > "$out"
tmp=$(mktemp -d /dev/shm/roster-scale.XXXXXX 2>/dev/null || mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
go build -o "$tmp/roster" ./cmd/roster
want() { [[ " ${BACKENDS:-redis etcd consul} " == *" $1 "* ]]; }
want redis && { "${ROSTER_REDIS_SERVER:-redis-server}" --port 16379 --save '' --appendonly no --maxclients 20000 >"$tmp/redis.log" 2>&1 & pids+=($!); }
want etcd && { "$tmp/roster" dev --temp --listen 127.0.0.1:12379 >"$tmp/etcd.log" 2>&1 & pids+=($!); }
want consul && { "$ROSTER_CONSUL_BIN" agent -dev -client 127.0.0.1 -http-port 18500 -grpc-port -1 -dns-port -1 \
  -serf-lan-port 18301 -serf-wan-port 18302 -server-port 18300 -data-dir "$tmp/consul" >"$tmp/consul.log" 2>&1 & pids+=($!); }
sleep 5
bench() { # url n
  local n=$2 s=${SERVICES:-$(( $2 / 10 ))}
  (( s > 1000 )) && s=1000
  (( s < 1 )) && s=1
  echo "== $1 N=$n S=$s load $(cut -d' ' -f1 /proc/loadavg)" >&2
  if "$tmp/roster" bench "$1" --json --instances "$n" --services "$s" --processes 4 --watchers 2 \
    --workers 64 --ttl 10s --hold "${HOLD:-10s}" --probes 50 > "$tmp/report.json"; then
    # load: the 1-minute load average as the run ends, which covers its hold.
    sed "s|^{|{\"backend\":\"${1%%:*}\",\"series\":\"${SERIES:-curve}\",\"load\":$(cut -d' ' -f1 /proc/loadavg),|" "$tmp/report.json" >> "$out"
  else
    echo "roster bench failed: $1 N=$n" >&2
  fi
}
declare -A url=([redis]=redis://127.0.0.1:16379 [etcd]=etcd://127.0.0.1:12379 [consul]=consul://127.0.0.1:18500${CONSUL_QUERY:-})
for b in ${BACKENDS:-redis etcd consul}; do
  for n in ${SIZES:-10 100 1000 10000}; do
    (( n > 1000 )) && [ "$b" = consul ] && continue # Consul: up to 1,000 leases
    bench "${url[$b]}" "$n"
  done
done
go run ./tools/plot -in "$out" -out docs/scale.svg -md > docs/bench/scale.md
