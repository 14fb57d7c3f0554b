# The project's habits and its release recipe. `make help` lists the targets.
#
#   make test     the test suite, README's command (PostgreSQL and the
#                 brokers on loopback; .ci/run starts them)
#   make lint     gofmt, go vet and staticcheck (staticcheck.conf)
#   make ci       everything CI runs: .ci/run (services, linters, nested
#                 modules, fuzzing, the test suite)
#
# Release recipe. Nothing here publishes anything: it builds the files a
# release attaches and the image, with the version stamped in both.
#
#   make release VERSION=v0.1.0    static binaries for linux and darwin,
#                                  amd64 and arm64, in dist/, and SHA256SUMS
#   make image VERSION=v0.1.0      the container image (needs Docker/BuildKit)
#
# VERSION defaults to `git describe` (the tag on a tagged commit). The build
# flags are the Dockerfile's; cmd/outbox's TestReleaseRecipe runs this recipe.

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
DIST    ?= dist
IMAGE   ?= pgoutbox/outbox
GO      ?= go
PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
LDFLAGS := -s -w -X github.com/pgoutbox/outbox/cmd/outbox/outboxcli.version=$(VERSION)
# The linter at the version .ci/run pins, run with `go run pkg@version` so
# that it stays out of go.mod (and out of the graph of applications).
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2

.DEFAULT_GOAL := help
.PHONY: help test lint ci release image $(PLATFORMS)

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-z-]*:.*## / {printf "  %-8s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

test: ## run the test suite (README's command)
	$(GO) test -race -count=1 ./...

lint: ## gofmt -l, go vet (also as the daemon builds), staticcheck
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then \
		echo "gofmt -l: not formatted:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags noembeddednats ./cmd/outbox/...
	$(STATICCHECK) ./...

ci: ## what CI runs: bash .ci/run
	bash .ci/run

release: $(PLATFORMS) ## static binaries for four platforms in DIST (dist/), and SHA256SUMS
	cd $(DIST) && sha256sum outbox-$(VERSION)-* > SHA256SUMS

# CGO_ENABLED=0: a static binary, no libc; -trimpath: no build paths inside;
# noembeddednats: the demo's NATS server stays out (its demo needs --broker).
$(PLATFORMS):
	CGO_ENABLED=0 GOOS=$(word 1,$(subst /, ,$@)) GOARCH=$(word 2,$(subst /, ,$@)) \
		$(GO) build -trimpath -tags noembeddednats -ldflags "$(LDFLAGS)" \
		-o $(DIST)/outbox-$(VERSION)-$(word 1,$(subst /, ,$@))-$(word 2,$(subst /, ,$@)) ./cmd/outbox

image: ## the container image (Docker/BuildKit)
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE):$(VERSION) .
