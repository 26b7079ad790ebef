# Redis for docker-compose.yml: Debian's redis-server with AOF (appendonly, fsync every second)
# on a volume, as the unprivileged redis user, loopback only (host networking).
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server redis-tools \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data && chown redis:redis /data
USER redis
VOLUME /data
ENV REDIS_PORT=6379
HEALTHCHECK --interval=5s --timeout=2s --retries=5 CMD ["sh", "-c", "redis-cli -p \"$REDIS_PORT\" ping | grep -q PONG"]
CMD ["sh", "-c", "exec redis-server --bind 127.0.0.1 --port \"$REDIS_PORT\" --dir /data --appendonly yes --appendfsync everysec --save ''"]
