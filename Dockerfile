# Multi-stage image of inventoryd on Debian bookworm.
#   docker build -t inventoryd .
#   docker run -p 8080:8080 -e INVENTORY_REDIS_URL=redis://redis:6379 -e INVENTORY_ADMIN_TOKEN=... inventoryd
FROM debian:bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake pkg-config \
      libmicrohttpd-dev libhiredis-dev libjansson-dev libcmocka-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY cmake cmake
COPY lockcore lockcore
COPY service service
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo \
 && cmake --build build -j"$(nproc)" --target inventoryd

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libmicrohttpd12 libhiredis0.14 libjansson4 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --no-create-home inventoryd
COPY --from=build /src/build/bin/inventoryd /usr/local/bin/inventoryd
COPY config/inventoryd.json /etc/inventoryd/inventoryd.json
USER inventoryd
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=2s CMD ["/bin/bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080"]
ENTRYPOINT ["/usr/local/bin/inventoryd"]
CMD ["--config", "/etc/inventoryd/inventoryd.json"]
