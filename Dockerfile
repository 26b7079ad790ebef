# Multi-stage image of inventoryd on Debian bookworm (docs/deployment.md).
#   docker build --network host -t inventoryd .
#   docker run --network host -e INVENTORY_BIND=127.0.0.1 -e INVENTORY_PORT=8080 \
#     -e INVENTORY_REDIS_URL_FILE=/run/secrets/redis_url -e INVENTORY_ADMIN_TOKEN_FILE=/run/secrets/admin_token \
#     -v "$PWD/secrets:/run/secrets:ro" inventoryd
# Configure it through INVENTORY_* variables (or a mounted --config file): the HEALTHCHECK runs
# `inventoryd --healthcheck` with the same environment and config file, so it asks /healthz on
# the port the service really listens on. Command-line flags given to `docker run` are not seen
# by the health check.
ARG VERSION=0.1.0

FROM debian:bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev make cmake pkg-config binutils \
      libmicrohttpd-dev libhiredis-dev libjansson-dev libcmocka-dev libevent-dev libssl-dev \
      libjwt-dev libmariadb-dev libzookeeper-mt-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY cmake cmake
COPY lockcore lockcore
COPY service service
COPY loadtest loadtest
COPY config config
COPY tools tools
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr/local \
 && cmake --build build -j"$(nproc)" --target inventoryd inventory-sink \
 && DESTDIR=/out cmake --install build --strip --component runtime

FROM debian:bookworm-slim
ARG VERSION
LABEL org.opencontainers.image.title="inventoryd" \
      org.opencontainers.image.description="Flash-sale order service: segmented stock with per-segment distributed locks on Redis" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.base.name="debian:bookworm-slim"
# Runtime libraries only (no compiler, no curl: the health check is the binary itself).
RUN apt-get update \
 && apt-get install -y --no-install-recommends libmicrohttpd12 libhiredis0.14 libjansson4 libevent-2.1-7 libssl3 \
      libjwt0 libmariadb3 libzookeeper-mt2 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/usr/local/bin/inventoryd /usr/local/bin/inventoryd
# The order-log sink (docs/deployment.md): docker run --entrypoint /usr/local/bin/inventory-sink
COPY --from=build /out/usr/local/bin/inventory-sink /usr/local/bin/inventory-sink
COPY --from=build /out/usr/local/etc/inventoryd/inventoryd.json /etc/inventoryd/inventoryd.json
# A numeric UID/GID with no account behind it: not root, and nothing to log in as.
USER 10001:10001
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/inventoryd", "--healthcheck", "--config", "/etc/inventoryd/inventoryd.json"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/inventoryd"]
CMD ["--config", "/etc/inventoryd/inventoryd.json"]
