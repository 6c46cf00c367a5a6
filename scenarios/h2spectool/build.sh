#!/usr/bin/env bash
# Builds h2spec, the HTTP/2 conformance suite, at the versions pinned by this
# module's go.mod and go.sum, once, into a cache keyed by those files and the
# Go version, and prints the binary's path. Later runs find it there.
#
#   TEAPOT_H2SPEC_CACHE  cache root (default ~/.cache/teapot-lb/h2spec)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
cache="${TEAPOT_H2SPEC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/teapot-lb/h2spec}"
key="$( { go version; cat "$here/go.mod" "$here/go.sum" "$here/build.sh"; } | sha256sum | cut -c1-16)"
dir="$cache/$key"

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9 # one build at a time; a second caller waits and reuses it

if [[ -x "$dir/h2spec" ]]; then
	echo "$dir/h2spec"
	exit 0
fi

tmp="$(mktemp -d "$cache/.build-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cd "$here"
go build -buildvcs=false -trimpath -ldflags "-s -w" -o "$tmp/h2spec" github.com/summerwind/h2spec/cmd/h2spec >&2
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
# Builds of other pins go a day after they were made.
find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name "$key" ! -name ".*" -mmin +1440 -exec rm -rf {} +
echo "$dir/h2spec"
