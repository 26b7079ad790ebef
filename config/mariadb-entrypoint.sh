#!/bin/sh
# Entry point of the mariadb container of docker-compose.yml (config/mariadb.Dockerfile): on the
# first start makes the data dir (mariadb-install-db: root and mysql reach it only through the
# container's Unix socket), then runs mariadbd on 127.0.0.1:$DB_PORT with an --init-file that
# creates the database $DB_NAME and the user '$DB_USER'@'127.0.0.1' identified by $DB_PASSWORD
# with SELECT, INSERT, UPDATE, CREATE on it (docs/deployment.md) — on every start, so a changed
# password takes effect. DB_PASSWORD comes from the env file (never the command line); letters,
# digits and . _ ~ - only, so it goes into the sink's mysql:// URL as it is (openssl rand -hex 24).
# POSIX sh.
set -eu
: "${DB_PORT:=3306}" "${DB_NAME:=shop}" "${DB_USER:=sink}"
: "${DB_PASSWORD:?DB_PASSWORD (the sink user's password) is not set: see docs/deployment.md}"
case "$DB_PASSWORD$DB_NAME$DB_USER" in
  *[!A-Za-z0-9._~-]*) echo "mariadb-entrypoint: DB_PASSWORD, DB_NAME and DB_USER may hold letters, digits and . _ ~ - only" >&2; exit 2 ;;
esac
datadir=/var/lib/mysql
if [ ! -d "$datadir/mysql" ]; then
  echo "mariadb-entrypoint: a new data dir in $datadir" >&2
  mariadb-install-db --no-defaults --datadir="$datadir" --auth-root-authentication-method=socket \
    --skip-test-db >/dev/null
fi
init=/run/mysqld/init.sql
(umask 077 && cat >"$init" <<SQL
CREATE DATABASE IF NOT EXISTS \`$DB_NAME\`;
CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASSWORD';
ALTER USER '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASSWORD';
GRANT SELECT, INSERT, UPDATE, CREATE ON \`$DB_NAME\`.* TO '$DB_USER'@'127.0.0.1';
SQL
)
exec mariadbd --no-defaults --datadir="$datadir" --bind-address=127.0.0.1 --port="$DB_PORT" \
  --socket=/run/mysqld/mysqld.sock --skip-name-resolve --init-file="$init"
