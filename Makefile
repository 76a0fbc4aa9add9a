# calico-rr-autoscaler
SHELL := /bin/bash
BIN := bin/calico-rr-autoscaler
GO ?= go
export GONOSUMDB := github.com/projectcalico
# -trimpath for every go command (vet, the slim build, the tests): without it the build cache keys
# this module's packages by their directory, so a fresh clone (as .ci/run's) compiles and vets
# every package again (2026-12-02, fresh clones, warm cache: `make lint` 97 s of CPU without it, 32
# with it; building the test binaries 157 s without, 115 with, all of it links); with it a clone of
# a commit already built here hits the cache. The first run after the flag changed, or with a cold
# cache, compiles every dependency again (go vet alone: about 9 minutes of CPU, once).
export GOFLAGS := $(strip $(GOFLAGS) -trimpath)
CONTROLLER_GEN_VERSION := v0.19.0
CONTROLLER_GEN := $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
TOOLS_ENV := $${RRA_CACHE:-$$HOME/.cache/calico-rr-autoscaler}/bin/env.sh
IMAGE ?= calico-rr-autoscaler:dev
IMAGE_DIR ?= bin/image
RELEASE_DIR ?= bin/release
VERSION ?=

.PHONY: all build test test-all test-transitions test-short lint generate tools bench fuzz image release demo clean

all: lint build test

build: ## Build the binary into bin/ (and bin/kubectl-rr, the kubectl plugin: kubectl rr = status)
	$(GO) build -trimpath -o $(BIN) ./cmd/calico-rr-autoscaler
	ln -sf calico-rr-autoscaler bin/kubectl-rr

generate: ## Regenerate deepcopy, the CRD and its reference (docs/policy-reference.md) from policy/, and the metrics reference (docs/operations.md)
	$(CONTROLLER_GEN) object paths=./policy/... crd:crdVersions=v1 output:crd:artifacts:config=policy/crd
	hack/sync-chart-crd.sh
	$(GO) run ./hack/policydoc policy/crd/routereflector.io_routereflectorpolicies.yaml docs/policy-reference.md
	$(GO) run ./hack/metricsdoc

tools: ## Build (or reuse the cached) kube-apiserver, etcd, kubectl and helm (and more: hack/tools.sh; Karpenter's kwok controller with `hack/tools.sh karpenter`, which make test-all runs)
	hack/tools.sh

# internal/serve and bgpverify first: the two longest packages start at once; the live transitions
# proof (test/transitions) takes the third slot first, the others follow it there. Three packages at a time and four
# parallel tests in each (the defaults are the core count, 2): the live tests mostly wait on their
# own API servers, BGP timers and grace periods, so on two cores they overlap their waits.
# -vet=off: `make lint` runs go vet (every analyzer) on every package, and .ci/run runs it first;
# go test's own vet step would check a subset of the same again, once per package.
# -ldflags=-w: test binaries without DWARF (stack traces and runtime.Caller use the symbol and
# line tables, which stay). go test links every test binary again on each run: `go test -c` of
# the 28 test packages (its first run: it caches them), compiles cached, took 151 s of CPU instead
# of 210 (2026-12-02). -trimpath comes from GOFLAGS (above).
TEST_FLAGS ?= -p 3 -parallel 4 -vet=off -ldflags=-w
# GOGC for the tests' processes (the test binaries, with the product's replicas the live tests run
# in them, and what they start: confd, kubectl, helm; testenv gives kube-apiserver and etcd 400
# already) unless GOGC is set: make test is CPU-bound on two cores with memory to spare
# (2026-12-02: extender's test binary 51.5 s of CPU and 220 MB at 100, 32.2 s and 420 MB at 400;
# the linker tunes its own collector, its time did not change).
TEST_GOGC ?= 400
test: tools ## Run every test: unit, fuzz seeds, integration on a real kube-apiserver
	source $(TOOLS_ENV) && GOGC=$${GOGC:-$(TEST_GOGC)} $(GO) test -count=1 -timeout 40m $(TEST_FLAGS) ./internal/serve/ ./internal/tools/bgpverify/ ./test/transitions/ ./...

test-all: tools ## The slow proofs (larger sizes of proofs make test runs smaller, the live transitions history, the release's OCI install, Karpenter's controller beside the product); not in .ci/run: run it before a release
	hack/tools.sh karpenter
	source $(TOOLS_ENV) && RRA_TEST_ALL=1 GOGC=$${GOGC:-$(TEST_GOGC)} $(GO) test -count=1 -timeout 90m -run 'Large$$|^TestTransitionsHistoryOnRealBIRD$$' ./...

test-transitions: tools ## The live transitions proofs on confd + BIRD, the short one (in make test), its Large version with the zone out and back, and the history (in make test-all), verbose
	source $(TOOLS_ENV) && RRA_TRANSITIONS_HISTORY=1 RRA_TEST_ALL=1 $(GO) test -count=1 -v -timeout 30m -run 'TestTransitions' ./test/transitions/

test-short: ## Unit tests only (no cluster binaries needed)
	$(GO) test -short ./...

lint: ## go vet and gofmt; the slim build (-tags slim, the image's entrypoint) compiles
	$(GO) vet ./...
	$(GO) build -tags slim ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

bench: ## Planner benchmarks (figures go to BENCHMARKS.md)
	$(GO) test -run '^$$' -bench . -benchmem -cpu 1 ./extender/

fuzz: ## Fuzz the planner for a minute
	$(GO) test -run '^$$' -fuzz FuzzPlan -fuzztime 60s ./extender/

image: ## Build the OCI image (linux/amd64 and linux/arm64) into bin/image without a container engine; prints its digests
	$(GO) run ./hack/image -out $(IMAGE_DIR) -image $(IMAGE)

release: ## Write a release into bin/release without a container engine: the image (OCI layout), the chart package (version and image digest pinned), the SBOM, the kubectl-rr archives and their krew manifest (docs/release.md)
	$(GO) run ./hack/release -out $(RELEASE_DIR) $(if $(VERSION),-version $(VERSION))

clean:
	rm -rf bin/



demo: ## The main command: a real API server, the chart, serve, 300 nodes, a cordon and a denial
	GO=$(GO) hack/demo.sh

.PHONY: load
NODES ?= 5000
LOAD_ARGS ?=
load: tools ## Load test on a real kube-apiserver, NODES=5000 kubelet-like nodes (make load NODES=65000; slow; figures go to BENCHMARKS.md)
	source $(TOOLS_ENV) && $(GO) test -v -count=1 -run TestLoad -timeout 90m ./test/load/ -args -load -load-nodes=$(NODES) $(LOAD_ARGS)
