#!/usr/bin/env bash
# Builds the real kube-apiserver and etcd that the tenant agent's scenarios
# run, once, into a cache keyed by this module's files and the Go version,
# and prints the directory holding them. Later runs (and CI on the same
# machine) find them there in a moment.
#
#   TEAPOT_KUBE_CACHE  cache root (default ~/.cache/teapot-lb/kube)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export GOTOOLCHAIN=local CGO_ENABLED=0
cache="${TEAPOT_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/teapot-lb/kube}"
key="$( { go version; cat "$here/go.mod" "$here/go.sum" "$here/build.sh" "$here/cmd/etcd/main.go"; } | sha256sum | cut -c1-16)"
dir="$cache/$key"

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9 # one build at a time; a second caller waits and reuses it

if [[ -x "$dir/kube-apiserver" && -x "$dir/etcd" ]]; then
	echo "$dir"
	exit 0
fi

tmp="$(mktemp -d "$cache/.build-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
version=v1.36.3
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/client-go/pkg/version.gitVersion=$version"
cd "$here"
echo "building kube-apiserver $version and etcd into $dir (a few minutes, once)" >&2
start=$SECONDS
go build -buildvcs=false -trimpath -ldflags "$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver >&2
go build -buildvcs=false -trimpath -ldflags "-s -w" -o "$tmp/etcd" ./cmd/etcd >&2
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
# Builds of older versions of this module are of no further use.
find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -exec rm -rf {} +
echo "built in $((SECONDS - start))s" >&2
echo "$dir"
