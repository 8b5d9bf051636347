#!/usr/bin/env bash
# The whole test suite, on a fresh machine. It installs and builds what the
# tests need, then runs them:
#   - redis-server from Debian's packages (apt-get) when it is missing;
#   - ZooKeeper 3.8 from Debian's zookeeper package (apt-get, with its Java
#     runtime) when it is missing; tests run it as a plain JVM process;
#   - php-cli, php-curl, python3, chromium, nginx and prometheus likewise
#     (roster agent's example clients, console, template and metrics tests),
#     dig and python3-dnspython (its DNS tests), Curator and a JDK (the
#     ZooKeeper backend's layout=curator test);
#   - a Consul agent (v1.13.9, MPL-2.0) built once from the Go module proxy
#     into $ROSTER_CACHE (default ~/.cache/roster), reused afterwards;
#   - kube-apiserver and kube-controller-manager v1.34.2 (Apache-2.0),
#     built the same way (tools/kube);
#   - etcd runs embedded in the test processes (go.etcd.io/etcd/server/v3/embed).
# Test helpers start private servers on free loopback ports; nothing here
# starts a long-lived daemon.
set -euo pipefail
cd "$(dirname "$0")/.."

export ROSTER_CACHE="${ROSTER_CACHE:-$HOME/.cache/roster}"
mkdir -p "$ROSTER_CACHE"

# The servers built from the Go module proxy compile in the background
# while apt installs the packaged ones: on a fresh 2-core machine the two
# builds are most of the setup time.
export ROSTER_CONSUL_BIN="${ROSTER_CONSUL_BIN:-$ROSTER_CACHE/consul-1.13.9}"
export ROSTER_KUBE_APISERVER="${ROSTER_KUBE_APISERVER:-$ROSTER_CACHE/kube-apiserver-v1.34.2}"
export ROSTER_KUBE_CONTROLLER_MANAGER="${ROSTER_KUBE_CONTROLLER_MANAGER:-$ROSTER_CACHE/kube-controller-manager-v1.34.2}"
gobuild() { # gobuild NAME OUTPUT DIR PACKAGE [go build flags...]: once, logged
	local name=$1 out=$2 dir=$3 pkg=$4
	shift 4
	[ -x "$out" ] && return
	echo "== building $name into $out (once, in the background; log: $ROSTER_CACHE/$name.log)"
	if ! (cd "$dir" && go build "$@" -o "$out.tmp" "$pkg" && mv "$out.tmp" "$out") >"$ROSTER_CACHE/$name.log" 2>&1; then
		echo "building $name failed:"; tail -40 "$ROSTER_CACHE/$name.log"; return 1
	fi
}
builds=()
gobuild consul-1.13.9 "$ROSTER_CONSUL_BIN" tools/consul github.com/hashicorp/consul &
builds+=("$!")
# The controller manager shares most packages with the apiserver: built
# after it, from the same build cache, it adds ~1.6 min, not ~7.
V=k8s.io/component-base/version
KUBE_LDFLAGS="-s -w -X $V.gitVersion=v1.34.2 -X $V.gitMajor=1 -X $V.gitMinor=34"
{
	gobuild kube-apiserver-v1.34.2 "$ROSTER_KUBE_APISERVER" tools/kube k8s.io/kubernetes/cmd/kube-apiserver -ldflags "$KUBE_LDFLAGS" &&
		gobuild kube-controller-manager-v1.34.2 "$ROSTER_KUBE_CONTROLLER_MANAGER" tools/kube \
			k8s.io/kubernetes/cmd/kube-controller-manager -ldflags "$KUBE_LDFLAGS"
} &
builds+=("$!")

# Packages, in one apt run: redis-server (tests start their own servers);
# ZooKeeper's jars (the zookeeper package has no daemon, that is
# zookeeperd; zktest starts servers from the jars); php-cli with curl,
# python3 and chromium for roster agent's example clients and dashboard.
missing=() lean=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v php >/dev/null 2>&1 && php -r 'exit(function_exists("curl_init") ? 0 : 1);' || missing+=(php-cli php-curl)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
# nginx for the template test's nginx -t. On a host with systemd, Debian
# starts its service too: systemctl disable --now nginx if unwanted.
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
# prometheus (and its promtool) for roster agent's scrape and lint tests.
command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || lean+=(prometheus) # without its node exporter
[ -f /usr/share/java/zookeeper.jar ] && [ -f /usr/share/java/slf4j-simple.jar ] || lean+=(zookeeper libslf4j-java)
# Apache Curator's service discovery and a JDK, for the ZooKeeper backend's
# layout=curator test against Curator's own code.
[ -f /usr/share/java/curator-x-discovery.jar ] || lean+=(libcurator-discovery-java)
command -v javac >/dev/null 2>&1 || lean+=(default-jdk-headless)
# dig and Python's dnspython, for roster agent's DNS tests.
command -v dig >/dev/null 2>&1 || lean+=(dnsutils)
/usr/bin/python3 -c 'import dns.resolver' >/dev/null 2>&1 || lean+=(python3-dnspython)
if [ $((${#missing[@]} + ${#lean[@]})) -gt 0 ]; then
	echo "== installing ${missing[*]} ${lean[*]} (apt)"
	SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
	$SUDO apt-get update -qq
	[ ${#missing[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
	[ ${#lean[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${lean[@]}" >/dev/null
fi
export ROSTER_REDIS_SERVER="${ROSTER_REDIS_SERVER:-$(command -v redis-server)}"

for b in "${builds[@]}"; do
	wait "$b" || exit 1
done

echo "== gofmt / go vet"
unformatted="$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"
if [ -n "$unformatted" ]; then
	echo "gofmt needed on:"; echo "$unformatted"; exit 1
fi
go vet ./...

# The chaos suite's 11-minute registry outage (docs/reliability.md) runs
# once, in the background beside the other packages' tests: it is mostly
# waiting, with a light load, and would otherwise add 11 minutes.
echo "== chaos: 11-minute outage, in the background (log: $ROSTER_CACHE/long-outage.log)"
ROSTER_CHAOS_OUTAGE=11m go test -race -count=1 -timeout 30m -run '^TestChaosLongOutage$' -v ./chaos \
	>"$ROSTER_CACHE/long-outage.log" 2>&1 &
outage=$!

echo "== go test -race"
# Every package but the chaos suite, which runs alone below.
go test -race -count=1 -timeout 30m "$@" $(go list ./... | grep -v '/chaos$')

# The race detector allocates, so the zero-allocation tests of the hot
# paths (a pick, a call through the chain) run once more without it.
echo "== allocation tests (without -race)"
go test -count=1 -run 'DoesNotAllocate|Allocations' ./selector ./middleware ./agent
go test -count=1 -run 'DoesNotAllocate' ./contrib/rostergrpc

# Fuzz what parses input, for a bounded time: a secret anywhere in a
# mistyped URL never shows in Redact's output nor in the option parser's
# errors (the seed corpus in
# internal/backend/testdata/fuzz runs with every go test too).
echo "== fuzz (bounded)"
# Budgets are counts of executions, not durations: Go 1.26's fuzz
# coordinator can report a spurious "context deadline exceeded" when a
# -fuzztime duration ends while a worker is busy (go.dev/issue/75804,
# fixed in Go 1.27). Each count is about 10-20 s on a 2-core machine.
go test -run '^$' -fuzz FuzzRedact -fuzztime 300000x ./internal/backend
go test -run '^$' -fuzz FuzzQueryErrors -fuzztime 300000x ./internal/backend
go test -run '^$' -fuzz FuzzCanonicalAddress -fuzztime 300000x ./internal/backend
# Records anyone with write access to the backend can set: never a panic.
go test -run '^$' -fuzz FuzzDecodeStored -fuzztime 100000x ./internal/backend
go test -run '^$' -fuzz FuzzDecodeArticle -fuzztime 100000x ./backends/redis
# roster agent's HTTP API: any body or query is answered, never a 500.
go test -run '^$' -fuzz FuzzAPI -fuzztime 40000x ./agent
go test -run '^$' -fuzz 'FuzzDNSName$' -fuzztime 300000x ./agent
go test -run '^$' -fuzz 'FuzzDNSPacket$' -fuzztime 20000x ./agent

echo "== bench module (kratos/go-kit comparison) compiles"
(cd bench && go vet ./...)

# Adapters for peers' interfaces are modules of their own, so that their
# dependencies (kratos, go-zero, go-kit) never reach Roster's users.
for m in contrib/rosterkratos contrib/rostergokit contrib/rostergozero; do
	echo "== $m (its own module)"
	(cd "$m" && go vet ./... && go test -race -count=1 -timeout 10m "$@" ./...)
done

# Registry restarts, outages, instance kills, rolling restarts and a
# partition under load, on every backend and path, then the topology
# faults (docs/reliability.md): alone (but for the light long outage), so
# that its timing bounds are not measured on a machine busy with the other
# packages' tests. -parallel 4 runs four backends at a time (about 9
# minutes with -race for the seven backends and the topology faults);
# ROSTER_CHAOS_REPEAT sets the runs of each fault (3).
echo "== chaos suite"
go test -race -count=1 -timeout 20m -parallel 4 "$@" ./chaos
# ZooKeeper's rows without the race detector: go-zookeeper v1.0.4 has a
# data race at reconnect (go-zookeeper/zk#35) that the detector turns
# into a failure of every test running at that moment.
go test -count=1 -timeout 20m -parallel 4 -run '^TestChaos$/^zookeeper' "$@" ./chaos

echo "== chaos: waiting for the 11-minute outage"
if ! wait "$outage"; then
	echo "the 11-minute outage failed:"; grep -v '^=== ' "$ROSTER_CACHE/long-outage.log" | tail -60; exit 1
fi
grep -E 'TestChaosLongOutage: |^(ok|PASS)' "$ROSTER_CACHE/long-outage.log"
