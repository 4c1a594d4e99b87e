# syntax=docker/dockerfile:1
# Images of the content platform, one multi-stage file, one target per binary:
#   docker build --target content-server   -t content-server:dev   .
#   docker build --target content-operator -t content-operator:dev .
# Runtime images are distroless (glibc + libgcc, CA certificates, no shell, no package manager)
# and run as the unprivileged user 65532 ("nonroot"); the root filesystem can be read-only.

ARG RUST_VERSION=1
ARG DEBIAN_RELEASE=bookworm

FROM docker.io/library/rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS build
WORKDIR /src
COPY . .
# The caches keep crates and incremental artefacts between builds; the binaries are copied out
# of the cache mount so the runtime stages can COPY them.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p content-server -p content-operator \
    && mkdir -p /out \
    && cp target/release/content-server target/release/content-operator /out/ \
    && strip --strip-debug /out/content-server /out/content-operator

FROM gcr.io/distroless/cc-debian12:nonroot AS content-server
LABEL org.opencontainers.image.title="content-server" \
      org.opencontainers.image.description="Static content server: epoll event loop plus one bounded thread pool per volume" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/content-server /usr/local/bin/content-server
USER 65532:65532
# 8080: HTTP traffic; 9190: admin (/metrics, /healthz, /readyz, /config).
EXPOSE 8080 9190
ENTRYPOINT ["/usr/local/bin/content-server"]
CMD ["serve", "--config", "/etc/content-server/config.toml"]

FROM gcr.io/distroless/cc-debian12:nonroot AS content-operator
LABEL org.opencontainers.image.title="content-operator" \
      org.opencontainers.image.description="Kubernetes operator reconciling ContentServer resources into serving pods" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/content-operator /usr/local/bin/content-operator
USER 65532:65532
# 8080: /metrics, /healthz, /readyz.
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/content-operator"]
