#!/usr/bin/env bash
# Regenerates go.mod for this tools module, which builds a real kube-apiserver
# (k8s.io/kubernetes/cmd/kube-apiserver) from the Go module proxy for the
# Kubernetes backend's tests.
#
# k8s.io/kubernetes requires its staging modules (k8s.io/api, client-go,
# apiserver, ...) at v0.0.0 and resolves them with
#   replace k8s.io/xxx => ./staging/src/k8s.io/xxx
# A dependency's replace directives are ignored, so this module replaces each
# staging module with the published version that matches:
#   k8s.io/kubernetes v1.X.Y  <->  k8s.io/xxx v0.X.Y
# The list of staging modules is read from the kubernetes go.mod itself.
#
# Usage (from anywhere): tools/kube/gen-gomod.sh [KUBE_VERSION]   default v1.34.2
set -euo pipefail
KV="${1:-v1.34.2}"
SV="v0.${KV#v1.}"
cd "$(dirname "$0")"

go mod download k8s.io/kubernetes@"$KV"
MODFILE="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$KV.mod"
GOLINE="$(grep -m1 '^go ' "$MODFILE")"

{
	echo "module github.com/roster-go/roster/tools/kube"
	echo
	echo "$GOLINE"
	echo
	echo "require k8s.io/kubernetes $KV"
	echo
	echo "replace ("
	sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/src/.*#\1#p' "$MODFILE" |
		sort -u | while read -r m; do printf '\t%s => %s %s\n' "$m" "$m" "$SV"; done
	echo ")"
} >go.mod

GOFLAGS=-mod=mod go mod tidy
