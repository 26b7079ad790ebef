# MariaDB for docker-compose.yml: the order log's database (docs/deployment.md, "The order-log
# sink"). Debian's mariadb-server on the same debootstrap'd base as the other images (no image
# registry needed), as the unprivileged mysql user, loopback only (host networking), data on a
# volume. config/mariadb-entrypoint.sh creates the data dir on the first start and, on every
# start, the database and the sink's user with the privileges docs/deployment.md lists.
FROM debian:bookworm-slim
# policy-rc.d: the package's scripts must not start a server inside the build.
RUN printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \
 && apt-get update \
 && apt-get install -y --no-install-recommends mariadb-server \
 && rm -rf /var/lib/apt/lists/* /usr/sbin/policy-rc.d /var/lib/mysql \
 && mkdir -p /var/lib/mysql /run/mysqld && chown mysql:mysql /var/lib/mysql /run/mysqld
COPY config/mariadb-entrypoint.sh /usr/local/bin/mariadb-entrypoint
USER mysql
VOLUME /var/lib/mysql
ENV DB_PORT=3306 DB_NAME=shop DB_USER=sink
# `ping` answers 0 once the server accepts connections (no account needed).
HEALTHCHECK --interval=5s --timeout=3s --retries=10 CMD ["mariadb-admin", "--socket=/run/mysqld/mysqld.sock", "ping"]
ENTRYPOINT ["/usr/local/bin/mariadb-entrypoint"]
