# syntax=docker/dockerfile:1
#
# The ratelimit image, a drop-in for envoyproxy/ratelimit's: the binary at
# /bin/ratelimit as the entrypoint (with no command it serves; Envoy Gateway's
# --name=value flags work as they do there), run as 65534:65534, gRPC on 8081,
# HTTP (/healthcheck, /json) on 8080 and debug (/metrics) on 6070.
#
#   docker build -t dynalimit:dev .                    # or: make image
#   docker build -t dynalimit-upstream:dev --target upstream .
#
# internal/deploytest builds the binary with this file's flags, checks that
# it is static and serves, and checks the instructions below.

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY cmd ./cmd
COPY internal ./internal
COPY pkg ./pkg
COPY examples/upstream ./examples/upstream
# Static binaries: no libc in the final stages.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ratelimit ./cmd/ratelimit
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/upstream ./examples/upstream

# The demo application of examples/envoy (docker-compose.yml's upstream):
# answers 200 and the request's method and path.
FROM scratch AS upstream
COPY --from=build /out/upstream /bin/upstream
USER 65534:65534
EXPOSE 8090
ENTRYPOINT ["/bin/upstream"]
CMD ["-addr", ":8090"]

# The service (the default target: the last stage).
FROM scratch AS ratelimit
# The AWS SDK calls DynamoDB over HTTPS.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/ratelimit /bin/ratelimit
USER 65534:65534
EXPOSE 8080 8081 6070
ENTRYPOINT ["/bin/ratelimit"]
