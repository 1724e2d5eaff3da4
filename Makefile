# Image URL to use all building/pushing image targets
IMG ?= controller:latest
# YEAR is the year in the boilerplate header of generated files. It is pinned
# so that regenerating in another year changes nothing (make verify).
YEAR ?= 2026

# Get the currently used golang install path (in GOPATH/bin, unless GOBIN is set)
ifeq (,$(shell go env GOBIN))
GOBIN=$(shell go env GOPATH)/bin
else
GOBIN=$(shell go env GOBIN)
endif

# CONTAINER_TOOL defines the container tool to be used for building images.
# Be aware that the target commands are only tested with Docker which is
# scaffolded by default. However, you might want to replace it to use other
# tools. (i.e. podman)
CONTAINER_TOOL ?= docker

# Setting SHELL to bash allows bash commands to be executed by recipes.
# Options are set to exit when a recipe line exits non-zero or a piped command fails.
SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

.PHONY: all
all: build

##@ General

# The help target prints out all targets with their descriptions organized
# beneath their categories. The categories are represented by '##@' and the
# target descriptions by '##'. The awk command is responsible for reading the
# entire set of makefiles included in this invocation, looking for lines of the
# file as xyz: ## something, and then pretty-format the target and help. Then,
# if there's a line with ##@ something, that gets pretty-printed as a category.
# More info on the usage of ANSI control characters for terminal formatting:
# https://en.wikipedia.org/wiki/ANSI_escape_code#SGR_parameters
# More info on the awk command:
# http://linuxcommand.org/lc3_adv_awk.php

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-20s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate WebhookConfiguration, ClusterRole and CustomResourceDefinition objects.
	"$(CONTROLLER_GEN)" rbac:roleName=manager-role crd paths="./..." output:crd:artifacts:config=config/crd/bases

.PHONY: generate
generate: controller-gen ## Generate code containing DeepCopy, DeepCopyInto, and DeepCopyObject method implementations.
	"$(CONTROLLER_GEN)" object:headerFile="hack/boilerplate.go.txt",year=$(YEAR) paths="./..."

.PHONY: fmt
fmt: ## Run go fmt against code (rewrites the files).
	go fmt ./...

# The Go files of the work tree: tracked and untracked but not ignored, minus
# those deleted.
GO_FILES = git ls-files --cached --others --exclude-standard -- '*.go' | while read -r f; do [ ! -e "$$f" ] || echo "$$f"; done

.PHONY: fmt-check
fmt-check: ## Fail, listing them, if Go files need gofmt (make fmt rewrites them); changes nothing.
	@unformatted="$$($(GO_FILES) | xargs -r gofmt -l)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt needed on (run 'make fmt'):"; echo "$$unformatted"; exit 1; fi

.PHONY: check-generated
check-generated: controller-gen ## Fail if the CRD, RBAC role or deepcopy code differ from what the Go types generate (make manifests generate rewrites them); changes nothing.
	@out="$$(mktemp -d)"; trap 'rm -rf "$$out"' EXIT; stale=""; \
	"$(CONTROLLER_GEN)" rbac:roleName=manager-role crd paths="./..." \
		output:crd:artifacts:config="$$out/crd" output:rbac:artifacts:config="$$out/rbac"; \
	diff -rq "$$out/crd" config/crd/bases >/dev/null || stale="$$stale config/crd/bases"; \
	cmp -s "$$out/rbac/role.yaml" config/rbac/role.yaml || stale="$$stale config/rbac/role.yaml"; \
	for f in $$(git ls-files -- '*zz_generated.deepcopy.go'); do \
		d="$$(dirname "$$f")"; \
		"$(CONTROLLER_GEN)" object:headerFile="hack/boilerplate.go.txt",year=$(YEAR) paths="./$$d" output:object:dir="$$out/$$d"; \
		cmp -s "$$out/$$d/zz_generated.deepcopy.go" "$$f" || stale="$$stale $$f"; \
	done; \
	if [ -n "$$stale" ]; then echo "Generated files out of date (run 'make manifests generate'):$$stale"; exit 1; fi

.PHONY: vet
vet: ## Run go vet against code.
	go vet ./...

# The Kubernetes binaries (etcd, kube-apiserver, kubectl for envtest; and for
# the simulated cluster kube-controller-manager, kube-scheduler, kwok, kwokctl)
# are built from the Go module proxy by hack/k8s-binaries.sh into a cache
# outside the checkout ($$XDG_CACHE_HOME/myoperator, or ~/.cache/myoperator).
# Each target asks for the set it needs; later calls return at once.
.PHONY: k8s-binaries
k8s-binaries: ## Build (once) and print the directory of the Kubernetes test binaries.
	@hack/k8s-binaries.sh

# Test tiers. `make test` is the fast one (about 75 s on 2 cores once built;
# the first -race build of the dependencies adds about 3 minutes): it changes
# no file but cover.out, checks formatting and generated files instead of
# rewriting them, and runs every unit and envtest test with the race detector
# (the reconciler in internal/controller/mydatabase, test/reliability) except
# the heavy harnesses below, which `make test-heavy` runs:
#   test-leader         two operator processes and a control plane of their
#                       own (test/reliability, TestLeaderElection*), ~25 s
#   test-bench-harness  the benchmark harness small (test/bench, TestHarness:
#                       20 MyDatabases on envtest, the KWOK full tier with 3),
#                       ~70 s
# test/e2e, test/postgres and test/monitoring have targets of their own;
# `make test-all` runs every tier.
LEADER_TESTS = ^TestLeaderElection
TEST_PKGS = $$(go list ./... | grep -v -e /test/e2e -e /test/postgres -e /test/bench -e /test/helm -e /test/monitoring)

.PHONY: test
test: fmt-check vet check-generated kustomize ## Fast tier: unit and envtest tests (race detector on) against a real kube-apiserver built from source; rewrites nothing.
	@assets="$$(hack/k8s-binaries.sh --envtest)" && \
	KUBEBUILDER_ASSETS="$$assets" KUSTOMIZE="$(KUSTOMIZE)" go test -race $(TEST_PKGS) -skip '$(LEADER_TESTS)' -coverprofile cover.out

# The HA loop under the deterministic simulator (internal/instance,
# sim_test.go): test-sim explores 1,000 fault schedules in each of its five
# configurations (asynchronous, a required synchronous quorum, scaling,
# mixed Lease durations, and an instance lost for good), make sim 34,000 in
# each. A failing schedule prints its seed; -sim.seed
# replays it.
SIM_SCHEDULES ?= 34000
.PHONY: test-sim
test-sim: ## The HA loop in the deterministic simulator: 6,000 fault schedules (1,000 per configuration), without the race detector.
	go test ./internal/instance/ -run '^TestSimulation' -count=1 -sim.schedules 1000

.PHONY: sim
sim: ## A long exploration of the HA loop in the deterministic simulator: SIM_SCHEDULES per configuration (default 34,000, so 204,000 in all).
	go test ./internal/instance/ -run '^TestSimulation$$' -count=1 -timeout 0 -sim.schedules $(SIM_SCHEDULES) -v

# Native Go fuzz targets (docs/security.md, Fuzzing), as package:target:
# one per parser at a trust boundary, and one per SQL builder of the
# instance manager, whose statements PostgreSQL's own parser checks
# (internal/instance/sql_fuzz_test.go: pg_query_go is cgo and minutes to
# compile cold, so those carry the build tag sqlparse, which make test
# leaves out). Their seed corpora (f.Add and testdata/fuzz) run as plain
# tests in make test, the SQL ones in test-fuzz. hack/fuzz.sh builds each
# package's instrumented test binary once and runs each target for a
# fixed time; test-fuzz, a tier of make test-all, for FUZZ_CI_TIME.
FUZZ_TARGETS = \
	./internal/contract:FuzzReport ./internal/contract:FuzzLSN ./internal/contract:FuzzToken \
	./internal/contract:FuzzLeaseQuorum ./internal/contract:FuzzLeaseDeclared \
	./internal/contract:FuzzLeasePoolersPaused ./internal/contract:FuzzPoolerApp \
	./internal/instance:FuzzFailsafeSet ./internal/instance:FuzzLeaseAnnotations \
	./internal/instance:FuzzFailsafeRequest ./internal/instance:FuzzFailsafeAnswer \
	./internal/instance:FuzzTimelineHistory ./internal/instance/scram:FuzzMatches \
	./internal/backup:FuzzWALNames ./internal/backup:FuzzManifests \
	./internal/backup:FuzzBaseBackupStream ./internal/backup:FuzzUntar ./internal/backup/agekey:FuzzParse \
	./internal/plugin:FuzzReportBundleSecret ./internal/specs:FuzzBuilders
FUZZ_SQL_TARGETS = \
	./internal/instance:FuzzRolePlan ./internal/instance:FuzzDatabasePlan ./internal/instance:FuzzExtensionPlan \
	./internal/instance:FuzzPublicationPlan ./internal/instance:FuzzSubscriptionPlan ./internal/instance:FuzzServerSQL
# Fuzzed against a real kube-apiserver (envtest; the workers share the
# coordinator's, testenv.StartShared): make fuzz runs them, test-fuzz does
# not (their seed corpus runs in make test). Each input is a round trip to
# the API server, and most of the time goes to minimizing new inputs:
# about 3 inputs a second here.
FUZZ_ENVTEST_TARGETS = ./api/v1alpha1:FuzzAdmission
FUZZ_ENVTEST ?= 1
FUZZTIME ?= 60s
# CI counts executions: a duration can end a target by go.dev/issue/75804
# (hack/fuzz.sh).
FUZZ_CI_TIME ?= 200x

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 60s; about 26 minutes in all); a failing input lands in the package's testdata/fuzz.
	@hack/fuzz.sh $(FUZZTIME) $(FUZZ_TARGETS)
	@hack/fuzz.sh $(FUZZTIME) -tags sqlparse $(FUZZ_SQL_TARGETS)
	@$(if $(FUZZ_ENVTEST),KUBEBUILDER_ASSETS="$$(hack/k8s-binaries.sh --envtest)" FUZZ_MINIMIZE_TIME=3s hack/fuzz.sh $(FUZZTIME) $(FUZZ_ENVTEST_TARGETS))

.PHONY: test-fuzz
test-fuzz: ## The fuzz targets briefly, as CI runs them: FUZZ_CI_TIME each (default 200 executions).
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZ_CI_TIME) FUZZ_ENVTEST=

.PHONY: test-heavy
test-heavy: test-leader test-bench-harness ## The heavy harnesses make test leaves out: leader election and the benchmark harness.

.PHONY: test-leader
test-leader: ## Leader election with two operator processes, the leader paused past its lease (test/reliability TestLeaderElection*, -race).
	@assets="$$(hack/k8s-binaries.sh --envtest)" && \
	KUBEBUILDER_ASSETS="$$assets" go test -race ./test/reliability/ -run '$(LEADER_TESTS)' -count=1 -v

.PHONY: test-bench-harness
test-bench-harness: ## The benchmark harness at small size (test/bench TestHarness: 20 MyDatabases, the KWOK full tier with 3 of 2 servers).
	@assets="$$(hack/k8s-binaries.sh)" && \
	KUBEBUILDER_ASSETS="$$assets" go test ./test/bench/ -run '^TestHarness$$' -count=1 -timeout 20m

# BENCH_FLAGS sizes the benchmarks (go run ./test/bench/cmd/bench -h), e.g.
# BENCH_FLAGS='-n 100 -rounds 1 -steady-n 200 -unrelated 1000'.
.PHONY: bench
bench: ## Run the benchmarks on a control plane of their own; writes docs/benchmarks.{md,json} and charts (an estimated 17 minutes; 10 measured with BENCH_FLAGS='-settings default').
	@assets="$$(hack/k8s-binaries.sh)" && \
	KUBEBUILDER_ASSETS="$$assets" go run ./test/bench/cmd/bench -command "make bench$(if $(BENCH_FLAGS), BENCH_FLAGS='$(BENCH_FLAGS)')" $(BENCH_FLAGS)

.PHONY: bench-scale
bench-scale: ## The scale tiers: B8, 10,000 MyDatabases on envtest, and B9, 1,000 MyDatabases of 3 servers on KWOK; replaces their section of docs/benchmarks.md (about 2.5 hours with 3 rounds; BENCH_FLAGS='-rounds 1 -full-n 0', B8 once, took 58 minutes).
	@assets="$$(hack/k8s-binaries.sh)" && \
	KUBEBUILDER_ASSETS="$$assets" go run ./test/bench/cmd/bench -scale -command "make bench-scale$(if $(BENCH_FLAGS), BENCH_FLAGS='$(BENCH_FLAGS)')" $(BENCH_FLAGS)

.PHONY: bench-ha
bench-ha: ## Failover and switchover figures on real PostgreSQL (test/postgres TestFailoverTimes): the primary lost 20 times by kill, 20 by SIGTERM, 20 switchovers, idle and then under pgbench on a 1 GiB database; writes them into docs/high-availability.md and docs/benchmarks.md (about 20 minutes; 20 min 26 s measured).
	@hack/postgres.sh
	HA_BENCH_ROUNDS=20 HA_BENCH_DOC="$(HA_BENCH_DOC)" go test ./test/postgres/ -run TestFailoverTimes -count=1 -v -timeout 60m
	HA_BENCH_ROUNDS=20 HA_BENCH_SCALE=70 HA_BENCH_DOC="$(HA_BENCH_DOC)" go test ./test/postgres/ -run TestFailoverTimes -count=1 -v -timeout 60m

HA_BENCH_DOC = $(CURDIR)/docs/high-availability.md $(CURDIR)/docs/benchmarks.md

.PHONY: bench-pooler
bench-pooler: ## Pooler figures on real PostgreSQL and PgBouncer (test/postgres TestPoolerFigures, TestPoolerSwitchoverFigures): pgbench through the pooler against straight to the server, 1,000 clients onto max_connections 100, and pgbench across a switchover; writes them into docs/pooler.md and docs/benchmarks.md (about 6 minutes).
	@hack/postgres.sh
	@hack/pgbouncer.sh >/dev/null
	POOLER_BENCH_SECONDS=20 POOLER_BENCH_DOC="$(CURDIR)/docs/pooler.md $(CURDIR)/docs/benchmarks.md" go test ./test/postgres/ -run 'TestPoolerFigures|TestPoolerSwitchoverFigures' -count=1 -v -timeout 30m

.PHONY: bench-backup
bench-backup: ## Backup figures on real PostgreSQL and the real S3 server (test/postgres TestBackupFigures): a 1 GiB database (pgbench and random text) backed up and restored, archive lag under load; writes them into docs/backup.md and docs/benchmarks.md (about 6 minutes).
	@hack/postgres.sh
	@hack/s3.sh >/dev/null
	BACKUP_BENCH_SCALE=54 BACKUP_BENCH_DOC="$(CURDIR)/docs/backup.md $(CURDIR)/docs/benchmarks.md" go test ./test/postgres/ -run TestBackupFigures -count=1 -v -timeout 30m

# test-all runs the tiers in order while hack/prebuild.sh builds, in the
# background and only on idle CPU, the parts the later tiers need: on a fresh
# machine the cold builds overlap the tests (its log: bin/prebuild.log). It
# stops by itself when this recipe's shell ends.
TIERS = verify test test-sim test-heavy test-helm test-monitoring test-postgres test-e2e test-real test-fuzz
.PHONY: test-all
test-all: ## Everything CI runs (.ci/run): the README's test command.
	@mkdir -p bin; setsid hack/prebuild.sh >bin/prebuild.log 2>&1 & \
	for tier in $(TIERS); do \
		start=$$(date +%s); $(MAKE) --no-print-directory $$tier || exit 1; \
		echo "make test-all: $$tier took $$(( $$(date +%s) - start )) s"; \
	done

.PHONY: verify
verify: ## Fail if generated files (the Helm chart included), formatting or go.mod/go.sum differ from what is committed.
	@$(MAKE) -s manifests generate helm-chart
	@go mod tidy
	@$(MAKE) -s fmt-check
	@if [ -n "$$(git status --porcelain -- api config charts go.mod go.sum)" ]; then \
		echo "Generated files or go.mod/go.sum are out of date; run 'make manifests generate helm-chart' and 'go mod tidy', then commit:"; \
		git status --porcelain -- api config charts go.mod go.sum; git --no-pager diff --stat -- api config charts go.mod go.sum; exit 1; fi

.PHONY: helm-chart
helm-chart: kustomize ## Regenerate the templates and CRD of charts/myoperator from the kustomize output of config/ (hack/helmchart).
	@go run ./hack/helmchart -kustomize "$(KUSTOMIZE)" -chart charts/myoperator

# helm template of charts/myoperator, for each of its options, against
# kustomize build of config/default and config/namespaced (test/helm).
# Building helm the first time takes about 2 minutes (cached in bin/).
.PHONY: test-helm
test-helm: helm kustomize ## Prove that charts/myoperator renders what config/ does (helm template vs kustomize build).
	HELM="$(HELM)" KUSTOMIZE="$(KUSTOMIZE)" go test ./test/helm/ -count=1 -v

.PHONY: test-postgres
test-postgres: ## Run what internal/specs generates on real PostgreSQL servers (test/postgres); installs them first if none (hack/postgres.sh), builds the S3 server of the backup tests (hack/s3.sh) and fetches PgBouncer (hack/pgbouncer.sh).
	@hack/postgres.sh
	@hack/s3.sh >/dev/null
	@hack/pgbouncer.sh >/dev/null
	go test ./test/postgres/ -count=1 -v -timeout 30m

# Prometheus and promtool are built from the Go module proxy by
# hack/prometheus.sh into a cache outside the checkout (about 4 minutes the
# first time, nothing after). test-postgres (TestMetrics) uses them too.
.PHONY: prometheus
prometheus: ## Build (once) and print the directory of prometheus and promtool.
	@hack/prometheus.sh

.PHONY: test-monitoring
test-monitoring: ## The alerting rules (config/prometheus) with promtool check and test rules, and their runbooks (test/monitoring).
	go test ./test/monitoring/ -count=1 -v

.PHONY: lint
lint: golangci-lint ## Run golangci-lint linter (the e2e and real-pod tests included)
	"$(GOLANGCI_LINT)" run --build-tags e2e,real

.PHONY: lint-fix
lint-fix: golangci-lint ## Run golangci-lint linter and perform fixes
	"$(GOLANGCI_LINT)" run --build-tags e2e,real --fix

.PHONY: lint-config
lint-config: golangci-lint ## Verify golangci-lint linter configuration
	"$(GOLANGCI_LINT)" config verify

##@ Local cluster

# A simulated cluster on this machine (hack/dev-cluster.sh): a real control
# plane built from source plus KWOK's fake nodes, on which pods are marked
# Running and Ready but no container runs. cmd/dev-provisioner gives it
# volumes. State, logs and PIDs are in bin/dev.
.PHONY: dev
dev: ## Demo: start (or reuse) the local cluster, install the CRD, run the operator locally, apply the sample until Ready. DEV_EXIT=1 exits after.
	@hack/dev-cluster.sh demo

.PHONY: dev-down
dev-down: ## Stop the processes make dev started and delete its cluster.
	@hack/dev-cluster.sh down

E2E_TIMEOUT ?= 30m
.PHONY: test-e2e
test-e2e: helm ## Run the end-to-end tests (test/e2e) on their own local cluster, with the operator as a process.
	@assets="$$(hack/k8s-binaries.sh)" && \
	E2E_K8S_BINARIES="$$assets" HELM="$(HELM)" go test -tags e2e ./test/e2e/ -v -count=1 -timeout $(E2E_TIMEOUT)

REAL_TIMEOUT ?= 30m
.PHONY: test-real
test-real: helm ## Run the life cycle on real pods (test/real) on a one-node cluster with a real kubelet, containerd and CNI (hack/real-node.sh), and the operator installed by the Helm chart; the backup test's S3 server is hack/s3.sh's. Needs Linux and root; builds and caches its parts the first time.
	@hack/node-parts.sh >/dev/null
	@hack/s3.sh >/dev/null
	@PATH="$$(hack/k8s-binaries.sh --node):$$PATH" HELM="$(HELM)" go test -tags real ./test/real/ -v -count=1 -timeout $(REAL_TIMEOUT)
	@echo "Measured (bin/real/results.txt):"; cat bin/real/results.txt

.PHONY: bench-incremental
bench-incremental: helm ## Incremental base backups on PostgreSQL 17 against full ones, on real pods and a real S3 server (test/real TestIncrementalBackupFigures, pgbench scale 68, about 1 GiB): sizes, times, and restores from a full backup and from a chain; prints the table docs/benchmarks.md quotes.
	@hack/node-parts.sh >/dev/null
	@hack/s3.sh >/dev/null
	@REAL_INCREMENTAL_SCALE=$${REAL_INCREMENTAL_SCALE:-68} PATH="$$(hack/k8s-binaries.sh --node):$$PATH" HELM="$(HELM)" go test -tags real ./test/real/ -run '^TestIncrementalBackupFigures$$' -v -count=1 -timeout 60m

.PHONY: test-real-ca-rotation
test-real-ca-rotation: helm ## A rotation of the operator's CA on real pods under writes through the rw Service and a pooler (test/real TestCARotationOnRealPods; not in test-all: each phase lasts at least the kubelet's Secret sync bound, 2 minutes).
	@hack/node-parts.sh >/dev/null
	@hack/s3.sh >/dev/null
	@REAL_CA_ROTATION=1 PATH="$$(hack/k8s-binaries.sh --node):$$PATH" HELM="$(HELM)" go test -tags real ./test/real/ -run '^TestCARotationOnRealPods$$' -v -count=1 -timeout 30m

##@ Build

.PHONY: build
build: manifests generate fmt vet ## Build manager binary.
	go build -o bin/manager cmd/main.go

.PHONY: plugin
plugin: ## Build the kubectl plugin, bin/kubectl-mydb: put it on PATH for `kubectl mydb`.
	go build -o bin/kubectl-mydb ./cmd/kubectl-mydb

.PHONY: run
run: manifests generate fmt vet ## Run a controller from your host.
	go run ./cmd/main.go --zap-devel

# If you wish to build the manager image targeting other platforms you can use the --platform flag.
# (i.e. docker build --platform linux/arm64). However, you must enable docker buildKit for it.
# More info: https://docs.docker.com/develop/develop-images/build_enhancements/
# Override BASE_IMAGE to build from another registry, e.g.
# make docker-build IMG=<img> BASE_IMAGE=docker.io/library/golang:1.26
.PHONY: container-engine
container-engine:
	@$(CONTAINER_TOOL) info >/dev/null 2>&1 || { \
		echo "error: '$(CONTAINER_TOOL)' has no running engine on this machine, so images cannot be built or pushed here."; \
		echo "Build the image where Docker or Podman runs (CONTAINER_TOOL=podman to switch). Everything else works without it."; \
		exit 1; }

.PHONY: docker-build
docker-build: container-engine ## Build docker image with the manager.
	$(CONTAINER_TOOL) build $(if $(BASE_IMAGE),--build-arg BASE_IMAGE=$(BASE_IMAGE)) -t ${IMG} .

.PHONY: docker-push
docker-push: container-engine ## Push docker image with the manager.
	$(CONTAINER_TOOL) push ${IMG}

# PLATFORMS defines the target platforms for the manager image be built to provide support to multiple
# architectures. (i.e. make docker-buildx IMG=myregistry/mypoperator:0.0.1). To use this option you need to:
# - be able to use docker buildx. More info: https://docs.docker.com/build/buildx/
# - have enabled BuildKit. More info: https://docs.docker.com/develop/develop-images/build_enhancements/
# - be able to push the image to your registry (i.e. if you do not set a valid value via IMG=<myregistry/image:<tag>> then the export will fail)
# To adequately provide solutions that are compatible with multiple platforms, you should consider using this option.
PLATFORMS ?= linux/arm64,linux/amd64,linux/s390x,linux/ppc64le
.PHONY: docker-buildx
docker-buildx: container-engine ## Build and push docker image for the manager for cross-platform support
	# copy existing Dockerfile and insert --platform=${BUILDPLATFORM} into Dockerfile.cross, and preserve the original Dockerfile
	sed -e '1 s/\(^FROM\)/FROM --platform=\$$\{BUILDPLATFORM\}/; t' -e ' 1,// s//FROM --platform=\$$\{BUILDPLATFORM\}/' Dockerfile > Dockerfile.cross
	- $(CONTAINER_TOOL) buildx create --name main-builder
	$(CONTAINER_TOOL) buildx use main-builder
	- $(CONTAINER_TOOL) buildx build --push --platform=$(PLATFORMS) $(if $(BASE_IMAGE),--build-arg BASE_IMAGE=$(BASE_IMAGE)) --tag ${IMG} -f Dockerfile.cross .
	- $(CONTAINER_TOOL) buildx rm main-builder
	rm Dockerfile.cross

.PHONY: build-installer
build-installer: manifests generate kustomize ## Generate a consolidated YAML with CRDs and deployment.
	mkdir -p dist
	cd config/manager && "$(KUSTOMIZE)" edit set image controller=${IMG}
	"$(KUSTOMIZE)" build config/default > dist/install.yaml

##@ Deployment

ifndef ignore-not-found
  ignore-not-found = false
endif

.PHONY: install
install: manifests kustomize ## Install CRDs into the K8s cluster specified in ~/.kube/config.
	@crds="$$("$(KUSTOMIZE)" build config/crd)" || { echo "kustomize build config/crd failed; nothing installed." >&2; exit 1; }; \
	echo "$$crds" | "$(KUBECTL)" apply -f -

.PHONY: uninstall
uninstall: manifests kustomize ## Uninstall CRDs from the K8s cluster specified in ~/.kube/config. Call with ignore-not-found=true to ignore resource not found errors during deletion.
	@crds="$$("$(KUSTOMIZE)" build config/crd)" || { echo "kustomize build config/crd failed; nothing uninstalled." >&2; exit 1; }; \
	echo "$$crds" | "$(KUBECTL)" delete --ignore-not-found=$(ignore-not-found) -f -

.PHONY: deploy
deploy: manifests kustomize ## Deploy controller to the K8s cluster specified in ~/.kube/config.
	cd config/manager && "$(KUSTOMIZE)" edit set image controller=${IMG}
	"$(KUSTOMIZE)" build config/default | "$(KUBECTL)" apply -f -

.PHONY: undeploy
undeploy: kustomize ## Undeploy controller from the K8s cluster specified in ~/.kube/config. Call with ignore-not-found=true to ignore resource not found errors during deletion.
	"$(KUSTOMIZE)" build config/default | "$(KUBECTL)" delete --ignore-not-found=$(ignore-not-found) -f -

##@ Dependencies

## Location to install dependencies to
LOCALBIN ?= $(shell pwd)/bin
$(LOCALBIN):
	mkdir -p "$(LOCALBIN)"

## Tool Binaries
# kubectl from PATH, else the one built with the test binaries.
KUBECTL ?= $(shell command -v kubectl 2>/dev/null || echo "$$(hack/k8s-binaries.sh --envtest)/kubectl")
KUSTOMIZE ?= $(LOCALBIN)/kustomize
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
GOLANGCI_LINT = $(LOCALBIN)/golangci-lint
HELM ?= $(LOCALBIN)/helm

## Tool Versions
KUSTOMIZE_VERSION ?= v5.8.1
CONTROLLER_TOOLS_VERSION ?= v0.22.0

GOLANGCI_LINT_VERSION ?= v2.13.1
HELM_VERSION ?= v3.22.0
.PHONY: kustomize
kustomize: $(KUSTOMIZE) ## Download kustomize locally if necessary.
$(KUSTOMIZE): $(LOCALBIN)
	$(call go-install-tool,$(KUSTOMIZE),sigs.k8s.io/kustomize/kustomize/v5,$(KUSTOMIZE_VERSION))

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN) ## Download controller-gen locally if necessary.
$(CONTROLLER_GEN): $(LOCALBIN)
	$(call go-install-tool,$(CONTROLLER_GEN),sigs.k8s.io/controller-tools/cmd/controller-gen,$(CONTROLLER_TOOLS_VERSION))

.PHONY: helm
helm: $(HELM) ## Build helm locally (from the Go module proxy) if necessary.
$(HELM): $(LOCALBIN)
	$(call go-install-tool,$(HELM),helm.sh/helm/v3/cmd/helm,$(HELM_VERSION))

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT) ## Download golangci-lint locally if necessary.
$(GOLANGCI_LINT): $(LOCALBIN)
	$(call go-install-tool,$(GOLANGCI_LINT),github.com/golangci/golangci-lint/v2/cmd/golangci-lint,$(GOLANGCI_LINT_VERSION))

# go-install-tool will 'go install' any package with custom target and name of binary, if it doesn't exist
# $1 - target path with name of binary
# $2 - package url which can be installed
# $3 - specific version of package
define go-install-tool
@[ -f "$(1)-$(3)" ] && [ "$$(readlink -- "$(1)" 2>/dev/null)" = "$(1)-$(3)" ] || { \
set -e; \
package=$(2)@$(3) ;\
echo "Downloading $${package}" ;\
rm -f "$(1)" ;\
GOBIN="$(LOCALBIN)" go install $${package} ;\
mv "$(LOCALBIN)/$$(basename "$(1)")" "$(1)-$(3)" ;\
} ;\
ln -sf "$$(realpath "$(1)-$(3)")" "$(1)"
endef

define gomodver
$(shell go list -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' $(1) 2>/dev/null)
endef
