# The `outbox` command (relay daemon and operator's tool) as a small, static,
# non-root image:
#
#   docker build --build-arg VERSION=v0.1.0 -t pgoutbox/outbox:v0.1.0 .
#   (or: make image VERSION=v0.1.0)
#   docker run --rm -e DATABASE_URL=postgres://... pgoutbox/outbox migrate
#   docker run --rm -e DATABASE_URL=postgres://... -p 9090:9090 \
#     pgoutbox/outbox relay --broker nats://nats:4222
#
# The build flags are the ones deploy/build_test.go checks produce a static
# binary (CGO_ENABLED=0: no libc, so the distroless "static" base suffices).
# The cache mounts need BuildKit (the default builder since Docker 23).

FROM golang:1.26 AS build
# The version `outbox version`, the relay's start-up line and the
# outbox_build_info metric report (.git is not in the build context).
ARG VERSION=devel
WORKDIR /src
# Dependencies first: this layer is rebuilt only when go.mod or go.sum change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -tags noembeddednats -ldflags "-s -w -X github.com/pgoutbox/outbox/cmd/outbox/outboxcli.version=${VERSION}" -o /out/outbox ./cmd/outbox

# distroless/static: CA certificates, tzdata and /etc/passwd with the
# "nonroot" user (65532), no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/outbox /outbox
USER 65532:65532
# The relay serves /metrics, /healthz and /readyz here (the relay command
# only; other commands ignore it). 0.0.0.0: reachable from outside the
# container. Override with --http-addr or OUTBOX_HTTP_ADDR; empty turns it off.
ENV OUTBOX_HTTP_ADDR=0.0.0.0:9090
EXPOSE 9090
ENTRYPOINT ["/outbox"]
CMD ["relay"]
