#!/usr/bin/env bash
# Compiles, into the Go build cache, what the scenarios that run late build
# for themselves, so that they find it compiled and only link: teapot-lb for
# linux/amd64 and linux/arm64 with the flags of make build and make dist-bin
# (the scenarios' hosts, TestHostPackages, TestAgentImageInContainerd and the
# Kubernetes labs' agent image), helm where helmBinary
# (scenarios/packaging_helm_test.go) installs it, the conformance run's
# echo server and DNS server, and the earlier releases make upgrade-test
# builds. Nothing is written outside the caches; a build
# that fails here is built, and fails, in its test again.
#
# .ci/run starts it in the background under nice 19 after make lint, whose
# go vet has compiled teapot-lb for amd64 and the conformance servers
# already (so those only link here), while the unit tests run (they mostly
# wait: Raft elections, BGP sessions, timeouts). On a fresh
# machine these builds took about 1,500 CPU-seconds inside the scenarios
# that make them.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export GOTOOLCHAIN=local GOFLAGS= CGO_ENABLED=0 GOOS=linux
status=0
run() {
	local start=$SECONDS
	if "$@"; then
		echo "$* ($((SECONDS - start))s)"
	else
		echo "failed: $*" >&2
		status=1
	fi
}

cd "$root"
# The hosts' binary comes first: the scenarios package builds it as it starts.
run env GOARCH=amd64 go build -trimpath -buildvcs=false -o /dev/null .
run env GOARCH=arm64 go build -trimpath -buildvcs=false -o /dev/null .

helm="$(sed -n 's/^const helmVersion = "\(v[0-9.]*\)"$/\1/p' scenarios/packaging_helm_test.go)"
if [[ -n "$helm" ]]; then
	dir="${XDG_CACHE_HOME:-$HOME/.cache}/teapot-lb/helm/$helm"
	if [[ ! -x "$dir/helm" ]]; then
		run env GOBIN="$dir" go -C "${TMPDIR:-/tmp}" install "helm.sh/helm/v3/cmd/helm@$helm"
	fi
else
	echo "no helmVersion in scenarios/packaging_helm_test.go" >&2
	status=1
fi

run go -C conformance build -trimpath -o /dev/null sigs.k8s.io/gateway-api/conformance/echo-basic
run go -C conformance/coredns build -trimpath -o /dev/null .

# The releases make upgrade-test upgrades from (scenarios/upgrade_test.go),
# from the directory and with the flags buildRelease uses (race detector,
# cgo on). They come last: make test compiles their dependencies with the
# race detector first. A release that is not in this clone by its hash is
# left to the test, which also looks for it by subject or fetches it.
releases="${XDG_CACHE_HOME:-$HOME/.cache}/teapot-lb/releases"
for hash in $(sed -n 's/^\t\thash: *"\([0-9a-f]\{40\}\)",$/\1/p' scenarios/upgrade_test.go); do
	if ! git -C "$root" cat-file -e "$hash^{commit}" 2>/dev/null; then
		echo "release $hash: not in this clone, left to the test"
		continue
	fi
	src="$releases/$hash"
	if [[ ! -f "$src/go.mod" ]]; then
		mkdir -p "$releases"
		tmp="$(mktemp -d "$releases/.extract-XXXXXX")"
		if git -C "$root" archive "$hash" | tar -x -C "$tmp" && [[ -f "$tmp/go.mod" ]]; then
			mv -T "$tmp" "$src" 2>/dev/null || rm -rf "$tmp"
		else
			echo "failed: extract $hash" >&2
			rm -rf "$tmp"
			status=1
			continue
		fi
	fi
	run env -C "$src" CGO_ENABLED=1 go build -race -o /dev/null .
done
exit $status
