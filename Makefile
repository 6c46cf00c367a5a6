# teapot-lb — build, test and code generation. Requires GNU make and Go 1.26.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := build

export GOTOOLCHAIN := local
export CGO_ENABLED := 0

MODULE  := github.com/teapot-lb/teapot-lb
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X $(MODULE)/api/cli.Version=$(VERSION) -X $(MODULE)/api/cli.Commit=$(COMMIT)

BIN   := bin/teapot-lb
DIST  := dist
ARCHES := amd64 arm64
# Release artefacts take every timestamp from the commit time.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
export SOURCE_DATE_EPOCH
TOOLS := $(CURDIR)/.tools/bin

PROTOC_GEN_GO_VERSION      := v1.36.10
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
PROTO_DIR   := api/proto
PROTO_FILES := $(wildcard $(PROTO_DIR)/teapotv1/*.proto)
# What the manifest reference generator writes (from model.proto and examples/).
SCHEMA_OUT  := api/schema/generated.go docs/reference.md docs/teapot-lb.schema.json

# The ACME CA of `make run`: pebble's address on this machine (apt-get install
# pebble), so that trying things never reaches a public CA. Opt in to one with
# `make run ACME_CA=https://acme-v02.api.letsencrypt.org/directory`;
# ACME_CA_ROOT is a PEM file that verifies the CA (pebble's certificate).
ACME_CA      ?= https://127.0.0.1:14000/dir
ACME_CA_ROOT ?=

# Timeouts for one test binary; the scenarios start real clusters.
TEST_TIMEOUT  ?= 45m
BENCH_TIMEOUT ?= 30m

.PHONY: build run test test-quick lint generate generate-check bench soak clean help dist-bin image package upgrade-test conformance

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

build: ## build the static binary bin/teapot-lb
	go build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) .

dist-bin: ## cross-build the static binaries dist/bin/{amd64,arm64}/teapot-lb
	for arch in $(ARCHES); do \
		GOOS=linux GOARCH=$$arch go build -trimpath -buildvcs=false -ldflags "$(LDFLAGS)" -o $(DIST)/bin/$$arch/teapot-lb . ; \
	done

image: dist-bin ## the agent's multi-arch OCI image as dist/teapot-lb-agent_VERSION.oci.tar (no container daemon)
	go run ./packaging/cmd/teapot-pkg image --version $(VERSION) --revision $(COMMIT) --dist $(DIST)

package: dist-bin ## the host packages dist/teapot-lb_VERSION-1_{amd64,arm64}.deb and .rpm (nfpm)
	go run ./packaging/cmd/teapot-pkg package --version $(VERSION) --revision $(COMMIT) --dist $(DIST)

run: build ## run a single-node cluster with default settings (data in ./teapot-data), ACME against ACME_CA (default a pebble on 127.0.0.1:14000)
	./$(BIN) serve --acme-ca $(ACME_CA) $(if $(ACME_CA_ROOT),--acme-ca-root $(ACME_CA_ROOT))

# go vet compiles every package it checks and their dependencies. With make
# build's flags (CGO off, -trimpath) that is what the scenarios' hosts run,
# the conformance run's echo and DNS servers and make test-quick's tests, so
# they only link after it; with go's defaults (cgo on, full paths) each would
# be compiled twice. Nothing here uses cgo, so CGO off hides no file from vet.
lint: ## go vet (the appliance and the conformance module) and gofmt
	CGO_ENABLED=0 go vet -trimpath ./...
	CGO_ENABLED=0 go -C conformance vet -trimpath ./...
	CGO_ENABLED=0 go -C conformance/coredns vet -trimpath ./...
	@unformatted="$$(gofmt -l $$(find . -name '*.go' -not -path './.tools/*' -not -path './.git/*'))"; \
	if [ -n "$$unformatted" ]; then \
		echo "gofmt: these files need formatting (run gofmt -w):"; echo "$$unformatted"; exit 1; \
	fi

# make test runs every package's tests at once (go test's -p, the CPUs): the
# scenarios package beside the others. Within it, the scenarios that mostly
# wait run three at a time once the others are done (parallelScenario). Running
# them beside the unit tests instead (TEAPOT_SCENARIOS=parallel, then =alone:
# scenarios/phase_test.go) timed out requests of the Kubernetes lab and a
# proxy flood test's p99 on 2 cores, so it is not the default.
# Its output is go test's without -v, then the test time: the slowest tests
# and packages of the run (scenarios/testreport reads go test -json).
# What make test does first; .ci/run, which runs lint as a step of its own and
# builds the Kubernetes components in the background, gives it empty.
TEST_PREREQS ?= lint kube-tools

# The scenarios package is named first: go test builds and runs the packages
# in the order given, as -p lets it, and scenarios is the longest by far (it
# started 4 minutes into a warm run when it came in ./...'s order, after the
# proxy packages; the other packages' tests had all ended 9 minutes before it did).
test: $(TEST_PREREQS) ## lint, then every test with the race detector, then the slowest tests
	CGO_ENABLED=1 go test -race -count=1 -timeout $(TEST_TIMEOUT) -json ./scenarios $$(go list ./... | grep -v '/scenarios$$') | go run ./scenarios/testreport -slowest 30

# The rule tests of the scenarios package (dependencies, doc comments, file
# sizes): they read `go list` and the tree, and start nothing.
RULE_TESTS := ^(TestDependencyRules|TestImportProblems|TestForbiddenDependencies|TestDepProblems|TestPackagesHaveDocComments|TestFileSizes)$$

# test-quick compiles with lint's flags (CGO off, -trimpath), so that its
# tests find what go vet compiled.
#
# Packages test-quick runs at once: three per CPU. Most of its tests wait
# (Raft elections, BGP sessions, timeouts) rather than compute, so more
# packages than CPUs overlap their waits.
QUICK_PACKAGES ?= $(shell echo $$(( $$(nproc) * 3 )))

test-quick: lint ## the inner loop (goal 2 min warm on 2 idle cores; see README, Test time): lint, the unit tests of every package but scenarios (-short: without the scale and flood tests, which test runs; no race detector) and the rule tests
	CGO_ENABLED=0 go test -trimpath -short -count=1 -p $(QUICK_PACKAGES) -timeout 10m $$(go list ./... | grep -v '/scenarios$$')
	CGO_ENABLED=0 go test -trimpath -count=1 -timeout 5m -run '$(RULE_TESTS)' ./scenarios

upgrade-test: ## the rolling-upgrade scenarios (CI runs it after test; not in test: they build two earlier releases from git, 8-12 min): three hosts of the previous release upgraded one by one under traffic in the ARP lab, and of the last level-1 release on loopback, then one downgraded
	TEAPOT_SCENARIO_UPGRADE=1 CGO_ENABLED=1 go test -race -count=1 -p 1 -timeout 30m ./scenarios -run 'TestRollingUpgradeFromLevelOneRelease|TestRollingUpgradeInARPLab' -v

# Its test binary is compiled with lint's flags, whose go vet compiled what it
# imports (with go's defaults it compiled for more than 4 minutes after a
# cold lint on a fresh machine).
conformance: kube-tools ## the official Gateway API conformance suite (the version conformance/go.mod pins) against a tenant cluster and three LB hosts in network namespaces; writes docs/conformance/gateway-api-report.yaml (CI runs it after test; not in test: it runs for longer than a scenario may)
	TEAPOT_CONFORMANCE=1 TEAPOT_CONFORMANCE_REPORT=docs CGO_ENABLED=0 go test -trimpath -count=1 -p 1 -timeout 120m ./scenarios -run '^TestGatewayAPIConformance$$' -v

kube-tools: ## build etcd and the Kubernetes components for the tenant scenarios (cached in ~/.cache/teapot-lb/kube)
	bash scenarios/kubetools/build.sh >/dev/null

bench: ## consensus benchmarks, the cluster scale report and L7 through serve vs HAProxy and nginx (HTTP/1.1, HTTPS, HTTP/2, gRPC unary and streaming), the WAF vs nginx with ModSecurity and the same CRS, then the engine-only L7 and TCP comparisons, authoritative DNS vs BIND 9, then the proxy's and the control plane's scale reports
	go test ./scenarios -run '^$$' -bench . -benchtime 1x -count=1 -timeout $(BENCH_TIMEOUT)
	go run ./proxy/l7/bench -duration 5s -rounds 2
	go run ./proxy/tcpbench -duration 10s -streams 1,4 -rounds 3
	go run ./proxy/dns/dnsbench -duration 5s -rounds 3
	go run ./proxy/scalebench -sizes 1000,10000,100000
	go test ./consensus -run '^$$' -bench '^BenchmarkClusterChangeAtScale$$' -benchtime 1x -count=1 -timeout $(BENCH_TIMEOUT)

soak: ## the VIP soak: 10 minutes per mode (arp and bgp at once), cores saturated, a 200ms stall of a random host every 10s
	TEAPOT_SOAK=5m go test ./scenarios -run '^TestVIPSoak$$' -count=1 -v -timeout 40m

generate: ## regenerate the Go code for api/proto with pinned plugins, and the manifest reference and JSON Schema
	GOBIN=$(TOOLS) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(TOOLS) go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	protoc -I $(PROTO_DIR) \
		--plugin=protoc-gen-go=$(TOOLS)/protoc-gen-go \
		--plugin=protoc-gen-go-grpc=$(TOOLS)/protoc-gen-go-grpc \
		--go_out=$(PROTO_DIR) --go_opt=paths=source_relative \
		--go-grpc_out=$(PROTO_DIR) --go-grpc_opt=paths=source_relative \
		$(PROTO_FILES)
# The generator compiles with lint's flags, so it finds compiled what lint did.
	CGO_ENABLED=0 go run -trimpath ./api/schema/gen

generate-check: generate ## fail if the committed generated code, reference or JSON Schema is stale
	@git diff --exit-code -- $(PROTO_DIR) $(SCHEMA_OUT) || { echo "generated files differ from the commit: run make generate and commit"; exit 1; }
	@untracked="$$(git ls-files --others --exclude-standard -- $(PROTO_DIR) $(SCHEMA_OUT))"; \
	if [ -n "$$untracked" ]; then \
		echo "untracked generated files (commit them or remove them):"; echo "$$untracked"; exit 1; \
	fi

clean: ## remove build output (keeps ./teapot-data)
	rm -rf bin $(DIST)
