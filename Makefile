# sless — see README.md. `make demo` and `make test` set up everything they need themselves.
SHELL := /bin/bash
GO ?= go
BIN := bin
export SLESS_CACHE ?= $(HOME)/.cache/sless

.PHONY: all build test bench bench-soak fmt vet tools demo lint clean e2e e2e-k8s manifests

all: build

build:
	$(GO) build -o $(BIN)/sless ./cmd/sless
	$(GO) build -o $(BIN)/terraform-provider-sless ./cmd/terraform-provider-sless

# Applies every examples/ configuration with the real terraform CLI against a fresh sless up
# (also part of make test).
e2e: tools
	@PATH="$(SLESS_CACHE)/bin:$$PATH" SLESS_REQUIRE_REAL=1 $(GO) test -count=1 -v -run TestExamples ./provider/

# The real-cluster e2e (also part of make test): brings up a single-node Kubernetes (hack/k8s/),
# installs sless into it from operator/config with an image sless built, runs the suite against the
# REST API, Terraform and /fn/, and tears the cluster down again.
e2e-k8s: tools
	@PATH="$(SLESS_CACHE)/bin:$$PATH" SLESS_REQUIRE_REAL=1 $(GO) test -count=1 -v -timeout 20m ./e2e/k8s/

# Debian packages, Go tools and base images the tests need (idempotent, cached under $(SLESS_CACHE)).
tools:
	@hack/setup-test.sh

# CRDs, RBAC and deepcopy code for operator/ from the kubebuilder markers (committed; make test
# fails when they are stale).
manifests:
	@hack/install-go-tools.sh controller-gen
	@hack/manifests.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

vet:
	$(GO) vet ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(GO) vet ./...
	@hack/manifests.sh --check

# Unit and integration tests against real components. SLESS_REQUIRE_REAL=1 turns a skip for a
# missing component into a failure; the last line is the pass/fail/skip count.
# The real-cluster e2e runs after the other packages, not beside them: the node's kube-proxy and
# kube-router rewrite iptables and conntrack on this host, and sless up's podman networks (./local)
# live there too (see issue 16's note: replies lost under load while a cluster ran).
test: tools lint
	@set -o pipefail; export PATH="$(SLESS_CACHE)/bin:$$PATH" SLESS_REQUIRE_REAL=1; \
	  ( $(GO) test -race -timeout 30m -count=1 -json $$($(GO) list ./... | grep -v '/e2e/k8s$$'); a=$$?; \
	    $(GO) test -race -timeout 30m -count=1 -json ./e2e/k8s/; b=$$?; exit $$((a | b)) ) | $(GO) run ./hack/testsum

# Benchmarks with side-by-side anchors (kaniko, buildah, the protocol floor); see BENCHMARKS.md.
bench: tools
	@hack/install-go-tools.sh kaniko
	@hack/build-bases.sh bench-debian >/dev/null
	$(GO) run ./bench $(BENCH_FLAGS)
	@$(MAKE) --no-print-directory bench-soak

# The soak on the real cluster (issue 17): 10 minutes of mixed /fn/ load through both API
# replicas, RSS of every sless pod every 5 s, the invocation rows in PostgreSQL against the requests
# (make test runs the same test for 60 s).
bench-soak: tools
	@set -o pipefail; PATH="$(SLESS_CACHE)/bin:$$PATH" SLESS_REQUIRE_REAL=1 SLESS_SOAK_DURATION=$${SLESS_SOAK_DURATION:-10m} \
	  $(GO) test -count=1 -v -timeout 40m -run 'TestSoak$$' ./e2e/k8s/ | grep -v '^\['

# Cold starts only (issue 16): the real single-node cluster beside the Kubernetes readiness path,
# the ramp, and sless up (needs root, hack/k8s's binaries and podman).
bench-coldstart: tools
	$(GO) run ./bench -sections coldstart,coldstart-up

demo:
	@hack/setup-demo.sh
	@hack/demo.sh

clean:
	rm -rf $(BIN)
