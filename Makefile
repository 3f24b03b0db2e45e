# netready: `make demo` shows the plugin at work, `make test` runs every test.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin
GO ?= go
CACHE ?= $(HOME)/.cache/netready
BIN := $(CURDIR)/bin
CNI_BIN := $(CACHE)/cni-plugins
CONTAINERD_BIN := $(CACHE)/containerd
K8S_BIN := $(CACHE)/k8s
CRIO_BIN := $(CACHE)/crio
CILIUM_BIN := $(CACHE)/cilium
PROMTOOL_BIN := $(CACHE)/promtool
HELM_BIN := $(CACHE)/helm
KREW_BIN := $(CACHE)/krew
GOLANGCI_VERSION := v2.15.0
GOLANGCI_BIN := $(CACHE)/golangci-lint
# The release `make test` builds and checks, as `make release` would.
TEST_VERSION := v0.0.0-test
TEST_DIST := $(BIN)/dist
TEST_ENV := NETREADY_DIST=$(TEST_DIST) NETREADY_VERSION=$(TEST_VERSION) NETREADY_IMAGE=$(BIN)/netready-image.tar NETREADY_BIN=$(BIN) NETREADY_CNI_BIN=$(CNI_BIN) NETREADY_CONTAINERD_BIN=$(CONTAINERD_BIN) NETREADY_K8S_BIN=$(K8S_BIN) NETREADY_CRIO_BIN=$(CRIO_BIN) NETREADY_CILIUM_BIN=$(CILIUM_BIN) NETREADY_PROMTOOL=$(PROMTOOL_BIN)/promtool NETREADY_HELM=$(HELM_BIN)/helm NETREADY_KREW=$(KREW_BIN)/krew NETREADY_CLIENT_IMAGE=$(BIN)/client-image.tar

.PHONY: golangci race all build image client-image release test-release krew demo-node deps tools containerd k8s crio cilium promtool helm generate demo test unit integration bench fuzz lint clean

all: build

# Every binary reports VERSION (`--version`, the CNI VERSION verb, the
# plugin's log lines), through the variable the reference plugins stamp.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$(VERSION)
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/ ./plugins/meta/netready
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/netready-testagent ./test/cmd/agent
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/netready-standin ./test/cmd/standin

# The OCI image ghcr.io/netready/netready:dev as an archive, built without
# Docker: static binaries on a scratch base. deploy/ names that tag; a
# release pins its own (make release).
image: build
	scripts/image.sh $(BIN) dev $(BIN)/netready-image.tar

# The first-packet test's client, netready.test/client:1: a static Go
# binary on scratch.
client-image:
	@rm -rf $(BIN)/client-rootfs && mkdir -p $(BIN)/client-rootfs
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $(BIN)/client-rootfs/client ./test/cmd/client
	scripts/oci-archive.sh $(BIN)/client-rootfs /client netready.test/client:1 $(BIN)/client-image.tar

deps:
	@scripts/deps.sh

# dist/: binaries, SBOMs and the image for linux/amd64 and linux/arm64,
# deploy/ pinned to VERSION, and SHA256SUMS. VERSION must be a tag (v0.3.0).
# No deps: a release needs Go and what builds the image (apt-get,
# dpkg-deb, readelf), as any user; release.sh names what is missing.
release:
	scripts/release.sh $(VERSION) $(CURDIR)/dist $(CACHE)

test-release:
	scripts/release.sh $(TEST_VERSION) $(TEST_DIST) $(CACHE) >/dev/null

krew:
	@scripts/build-krew.sh $(KREW_BIN)

tools:
	@scripts/build-tools.sh $(CNI_BIN)

containerd:
	@scripts/build-containerd.sh $(CONTAINERD_BIN)

k8s:
	@scripts/build-k8s.sh $(K8S_BIN)

crio: deps
	@scripts/build-crio.sh $(CRIO_BIN)

cilium: deps
	@scripts/build-cilium.sh $(CILIUM_BIN)

promtool:
	@scripts/build-promtool.sh $(PROMTOOL_BIN)

helm:
	@scripts/build-helm.sh $(HELM_BIN)

# deploy/'s generated files from the chart (scripts/gendeploy); the helm
# room's TestDeployIsTheChartsRenderAsCommitted fails when they are stale.
generate: helm
	$(GO) run ./scripts/gendeploy -helm $(HELM_BIN)/helm

demo: deps tools build
	CNI_BIN=$(CNI_BIN) BIN=$(BIN) scripts/preserve-host.sh scripts/demo.sh

# The node of the node test, one gated pod and a slow agent, watched with
# kubectl get pod -w; then the first-packet test's counts
# (TestFirstConnectionSucceedsForEveryPod); then everything is torn down.
demo-node: deps tools containerd k8s build image client-image test-release
	$(TEST_ENV) scripts/preserve-host.sh \
	  $(GO) test -tags 'integration demo' -count=1 -run '^(TestNodeDemo|TestFirstConnectionSucceedsForEveryPod)$$' -v -timeout 20m ./test/integration/node/ 2>&1 | \
	  grep -vE '^(=== RUN|PASS$$|ok )' ; exit $${PIPESTATUS[0]}

test: deps tools containerd k8s crio cilium promtool helm krew build image client-image test-release unit integration

unit:
	$(GO) test -count=1 ./...

integration:
	$(TEST_ENV) scripts/preserve-host.sh \
	  $(GO) test -tags integration -count=1 -p 1 -timeout 30m -v ./test/integration/... 2>&1 | \
	  tee $(CURDIR)/.integration.log | grep -E '^(=== RUN|--- |\s+---|PASS|FAIL|ok|panic|soak:)' ; \
	  rc=$${PIPESTATUS[0]}; [ $$rc = 0 ] || scripts/failure-excerpt.sh $(CURDIR)/.integration.log; exit $$rc

bench: deps tools containerd k8s build image test-release
	$(TEST_ENV) scripts/preserve-host.sh \
	  $(GO) test -tags integration -run '^$$' -bench . -benchtime 1x -count=1 -timeout 45m ./test/integration/bench/

# Each fuzz target for FUZZTIME; their seed corpora (and any crash found,
# kept in testdata/fuzz) already run in `make unit`.
FUZZTIME ?= 30s
FUZZ_TARGETS := FuzzParse:./pkg/config FuzzExpand:./pkg/config FuzzReadFile:./pkg/marker FuzzParsePod:./pkg/attachment FuzzEdit:./pkg/conflist FuzzContainsToken:./pkg/nftrule FuzzGet:./pkg/httpget FuzzRangesMatchHostLocal:./pkg/pool FuzzTransaction:./pkg/watch
fuzz:
	@for t in $(FUZZ_TARGETS); do 	  echo "fuzz: $${t%%:*} for $(FUZZTIME)"; 	  $(GO) test -run '^$$' -fuzz "^$${t%%:*}$$" -fuzztime $(FUZZTIME) $${t#*:} || exit 1; 	done

golangci:
	@scripts/build-golangci.sh $(GOLANGCI_BIN) $(GOLANGCI_VERSION)

# gofmt and vet, then golangci-lint (.golangci.yml) at the pinned version.
lint: golangci
	gofmt -l . | (! grep .)
	$(GO) vet ./...
	$(GO) vet -tags integration ./test/...
	$(GOLANGCI_BIN)/golangci-lint run ./...

# The packages' own tests under the race detector (root: several use
# network namespaces, nftables and a tmpfs).
race:
	$(GO) test -race -count=1 ./pkg/...

clean:
	rm -rf $(BIN)
