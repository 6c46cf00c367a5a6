#!/usr/bin/env bash
# Compiles, into the Go build cache, what the scenarios that run late build
# for themselves, so that they find it compiled and only link: teapot-lb for
# linux/amd64 and linux/arm64 with the flags of make build and make dist-bin
# (the scenarios' hosts, TestHostPackages, TestAgentImageInContainerd and the
# Kubernetes labs' agent image), helm where helmBinary
# (scenarios/packaging_helm_test.go) installs it, and the conformance run's
# echo server and DNS server. Nothing is written outside the caches; a build
# that fails here is built, and fails, in its test again.
#
# .ci/run starts it in the background under nice 19 while the unit tests run
# (they mostly wait: Raft elections, BGP sessions, timeouts). On a fresh
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
exit $status
