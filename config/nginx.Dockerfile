# nginx for docker-compose.yml: Debian's nginx running config/nginx-lb.conf.template (mounted),
# rendered at start by config/nginx-lb-entrypoint.sh from LISTEN and UPSTREAMS.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends nginx \
 && rm -rf /var/lib/apt/lists/*
COPY config/nginx-lb-entrypoint.sh /usr/local/bin/nginx-lb-entrypoint
ENTRYPOINT ["/usr/local/bin/nginx-lb-entrypoint"]
