#!/usr/bin/env bash
# Builds the real Kubernetes components the tenant agent's scenarios run
# (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and
# kube-proxy), once, into a cache keyed by this module's files and the Go
# version, and prints the directory holding them. Later runs (and CI on the
# same machine) find them there in a moment.
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

components=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
complete=1
for c in etcd "${components[@]}"; do
	[[ -x "$dir/$c" ]] || complete=0
done
if ((complete)); then
	echo "$dir"
	exit 0
fi

tmp="$(mktemp -d "$cache/.build-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
version=v1.36.3
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/client-go/pkg/version.gitVersion=$version"
cd "$here"
echo "building Kubernetes $version (${components[*]}) and etcd into $dir (several minutes, once)" >&2
start=$SECONDS
# One go build for every command: the packages they share compile once.
go build -buildvcs=false -trimpath -ldflags "$ldflags" -o "$tmp/" "${components[@]/#/k8s.io/kubernetes/cmd/}" >&2
go build -buildvcs=false -trimpath -ldflags "-s -w" -o "$tmp/etcd" ./cmd/etcd >&2
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
# Builds of other versions go a day after they were made (several checkouts
# of different versions may share the cache meanwhile).
find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name "$key" ! -name ".*" -mmin +1440 -exec rm -rf {} +
echo "built in $((SECONDS - start))s" >&2
echo "$dir"
