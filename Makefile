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

.PHONY: release image $(PLATFORMS)

release: $(PLATFORMS)
	cd $(DIST) && sha256sum outbox-$(VERSION)-* > SHA256SUMS

# CGO_ENABLED=0: a static binary, no libc; -trimpath: no build paths inside;
# noembeddednats: the demo's NATS server stays out (its demo needs --broker).
$(PLATFORMS):
	CGO_ENABLED=0 GOOS=$(word 1,$(subst /, ,$@)) GOARCH=$(word 2,$(subst /, ,$@)) \
		$(GO) build -trimpath -tags noembeddednats -ldflags "$(LDFLAGS)" \
		-o $(DIST)/outbox-$(VERSION)-$(word 1,$(subst /, ,$@))-$(word 2,$(subst /, ,$@)) ./cmd/outbox

image:
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE):$(VERSION) .
