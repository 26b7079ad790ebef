/*
 * A throwaway MariaDB server for tests (inventory-sink's database, lockcore's MySQL locks):
 * mariadb-install-db into a fresh temp dir, then mariadbd --no-defaults on a free 127.0.0.1
 * port with that data dir and a socket in it, waited for until it answers; stopped (and the dir
 * removed) by the test, and also when the test process exits, aborts or is killed (the
 * fixtures' process registry, proc_registry.h, as redis-server in redis_fixture.h; a SIGKILLed
 * test's dir is removed by the next mdb_start, whose owner pid is gone).
 *
 * The server gets database MDB_DATABASE and user MDB_USER (password MDB_PASSWORD, from
 * 127.0.0.1) with exactly the privileges docs/deployment.md asks for the sink's user: SELECT,
 * INSERT, UPDATE, CREATE on that database. Root (no password, from localhost) is for the test.
 *
 * Binaries: mariadbd and mariadb-install-db from PATH or /usr/sbin (override with MDB_MARIADBD,
 * MDB_INSTALL_DB). Not thread-safe: start, halt and restart from the main thread.
 */
#ifndef LC_TESTS_MARIADB_FIXTURE_H
#define LC_TESTS_MARIADB_FIXTURE_H

#include <sys/types.h>

#include <mysql.h>

#define MDB_DATABASE "shop"
#define MDB_USER "sink"
#define MDB_PASSWORD "sink-pw"

typedef struct mdb_server mdb_server;

/* 1 when mariadbd and mariadb-install-db are there (tests skip otherwise, saying so). */
int mdb_available(void);

/* Starts a server as above. A new server to release with mdb_stop, or NULL with the reason on
 * stderr (its error log printed). */
mdb_server *mdb_start(void);

/* Stops the server (SIGTERM, SIGKILL after 20 s), removes its dir, frees it. NULL-safe. */
void mdb_stop(mdb_server *srv);

/* Stops only the process (sig: SIGTERM for a clean shutdown, SIGKILL for a crash), keeping the
 * port and the data for mdb_restart. 0, or -1 when it was not running. */
int mdb_halt(mdb_server *srv, int sig);

/* Starts it again on the same port with the same data (after mdb_halt). 0 once it answers. */
int mdb_restart(mdb_server *srv);

int mdb_port(const mdb_server *srv);
pid_t mdb_pid(const mdb_server *srv);
/* "mysql://sink:sink-pw@127.0.0.1:<port>/shop" (borrowed). */
const char *mdb_url(const mdb_server *srv);

/* A new root connection to MDB_DATABASE (5 s timeouts), or NULL (reason on stderr). */
MYSQL *mdb_connect(const mdb_server *srv);

/* Runs sql as root. 0, or -1 (the error on stderr). */
int mdb_exec(const mdb_server *srv, const char *sql);

/* The first column of the first row of sql as an integer; MDB_NO_VALUE when the query failed,
 * gave no row or a NULL. */
#define MDB_NO_VALUE (-999999999LL)
long long mdb_scalar(const mdb_server *srv, const char *sql);

/* Prints the last lines of the server's error log to stderr. */
void mdb_show_log(const mdb_server *srv, int lines);

#endif
