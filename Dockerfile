# syntax=docker/dockerfile:1
# Tidegate broker image.
#
#   docker build -t tidegate .
#   docker run --rm -p 8080:8080 \
#     -v "$PWD/my-config.toml:/etc/tidegate/config.toml:ro" \
#     -e TIDEGATE_JWT_SECRET=... -e TIDEGATE_ADMIN_KEY=... tidegate
#
# The config must listen on 0.0.0.0 (node.listen, and grpc.listen for the
# gRPC API on 8081: -p 8081:8081 -e TIDEGATE_GRPC_LISTEN=0.0.0.0:8081) and,
# off loopback, the sample JWT secret and API key are refused: give your own
# (key_env, TIDEGATE_JWT_SECRET). Logs go to stderr; TIDEGATE_LOG_FORMAT=json (set
# below) makes them one JSON object per line.

# --- build ---------------------------------------------------------------
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock config.toml ./
COPY broker broker
COPY bench bench
# BuildKit caches keep the registry and the target directory between builds.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p tidegate \
 && install -D target/release/tidegate /out/tidegate

# --- run -----------------------------------------------------------------
# distroless/cc: glibc and libgcc only, no shell, runs as uid 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/tidegate /usr/local/bin/tidegate
COPY --from=build /src/config.toml /etc/tidegate/config.toml
USER nonroot:nonroot
ENV TIDEGATE_LOG_FORMAT=json
EXPOSE 8080 8081
# The binary checks itself: no curl in the image.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/tidegate", "healthcheck", "127.0.0.1:8080"]
ENTRYPOINT ["/usr/local/bin/tidegate"]
CMD ["serve", "--config", "/etc/tidegate/config.toml"]
