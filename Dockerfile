# syntax=docker/dockerfile:1
# Allot's allocator and the example service, built once and shipped in two
# small images (targets "allocator" and "service"), and a "dev-ca" image
# that makes a throwaway CA for trying mTLS. docker-compose.yml runs them
# beside Redis.
#
#   docker build --target allocator -t allot-allocator .
#   docker build --target service   -t allot-example-service .

FROM golang:1.26 AS build
WORKDIR /src
# Modules first: a change to the sources does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static binaries: the runtime image has no C library.
ENV CGO_ENABLED=0
RUN go build -trimpath -ldflags="-s -w" -o /out/allocator ./cmd/allocator \
 && go build -trimpath -ldflags="-s -w" -o /out/service ./examples/service

# distroless/static: CA certificates (for rediss://) and a nonroot user,
# no shell, nothing else to patch.
FROM gcr.io/distroless/static-debian12:nonroot AS allocator
COPY --from=build /out/allocator /allocator
# gRPC, and /metrics with /healthz. Both listen on loopback by default:
# give --listen 0.0.0.0:7070 --metrics 0.0.0.0:9090 in a container.
EXPOSE 7070 9090
ENTRYPOINT ["/allocator"]

FROM gcr.io/distroless/static-debian12:nonroot AS service
COPY --from=build /out/service /service
EXPOSE 8080
ENTRYPOINT ["/service"]

# Runs scripts/make-dev-ca.sh into /certs (a volume) and hands the files to
# the nonroot user of the images above. For trying mTLS only.
FROM alpine:3 AS dev-ca
RUN apk add --no-cache bash openssl
COPY scripts/make-dev-ca.sh /make-dev-ca.sh
ENTRYPOINT ["/bin/sh", "-c", "/make-dev-ca.sh /certs --allocator allocator-1 --allocator allocator-2 --node service-1 && chown -R 65532:65532 /certs"]
