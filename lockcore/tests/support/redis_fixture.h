/*
 * A throwaway redis-server for tests: started on a free 127.0.0.1 port in a fresh temp dir,
 * stopped (and the dir removed) by the test, and also when the test process exits, aborts or
 * is killed. Plus short-lived connections for assertions on the server's state (rf_command).
 *
 * Every server started here is in the fixtures' process registry (proc_registry.h): an atexit
 * handler and handlers for SIGABRT, SIGSEGV, SIGTERM and SIGINT (which then re-raise) kill what
 * is still running, and each server gets PR_SET_PDEATHSIG so even a SIGKILLed test takes it
 * along. PR_SET_PDEATHSIG follows the *thread* that forked: start and restart servers from the
 * main thread (cmocka group setup is fine). A forked child of the test never stops the
 * parent's servers (the registry remembers which process started each one). A SIGKILLed test
 * cannot remove its temp dir; the first rf_start of a later test process removes such dirs
 * (TMPDIR/lc-redis-*, whose "owner" pid is gone).
 *
 * Not thread-safe: start, restart and stop servers from one thread.
 */
#ifndef LC_TESTS_REDIS_FIXTURE_H
#define LC_TESTS_REDIS_FIXTURE_H

#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "testutil.h"

typedef struct rf_server rf_server;

/*
 * Starts redis-server (or $RF_REDIS_SERVER) with
 *     --port P --bind 127.0.0.1 --dir D --save "" --appendonly no --logfile D/redis.log
 * followed by extra_args (a NULL-terminated list, may be NULL), so extra args override the
 * defaults. In every extra arg the text "{dir}" is replaced by the temp dir, so a socket can go
 * there: {"--unixsocket", "{dir}/redis.sock", NULL}. The fixture reads back the values of
 * --requirepass (to authenticate its own connections) and --unixsocket (rf_unixsocket).
 * Picks a free port and retries with another one when it was taken meanwhile. Waits (at most
 * 5 s) until the server answers PING and checks by its pid that it is ours.
 * Returns a new server to release with rf_stop, or NULL with the reason on stderr.
 */
rf_server *rf_start(const char *const *extra_args);

/* Stops the server (SIGTERM, SIGKILL after 3 s, waitpid), removes its temp dir and frees it.
 * NULL-safe. */
void rf_stop(rf_server *srv);

/* Stops only the process, keeping port, dir and arguments for rf_restart. sig is SIGTERM for a
 * clean shutdown (SIGKILL after 3 s) or SIGKILL for a crash. Returns 0, or -1 when it was not
 * running. */
int rf_halt(rf_server *srv, int sig);

/* rf_halt(SIGTERM) if running, then starts it again on the same port, in the same dir, with the
 * same arguments (data survives only if the extra args enabled persistence). Retries for a
 * while if the port is busy. Returns 0 when the new process answers PING, -1 otherwise. */
int rf_restart(rf_server *srv);

/* SIGSTOP / SIGCONT the server, e.g. to make it unresponsive without closing its sockets.
 * Return 0, or -1 when it is not running. */
int rf_pause(rf_server *srv);
int rf_resume(rf_server *srv);

/* Accessors (borrowed strings, valid until rf_stop). */
int rf_port(const rf_server *srv);
pid_t rf_pid(const rf_server *srv);              /* 0 when not running */
const char *rf_url(const rf_server *srv);        /* "redis://127.0.0.1:PORT", no credentials */
const char *rf_dir(const rf_server *srv);        /* the temp dir */
const char *rf_unixsocket(const rf_server *srv); /* --unixsocket path, or NULL */
const char *rf_password(const rf_server *srv);   /* --requirepass value, or NULL */

/* A new TCP connection to the server, authenticated when it has a password, with 1 s connect
 * and 5 s command timeouts. NULL on failure (reason on stderr). Free with redisFree. */
redisContext *rf_connect(const rf_server *srv);

/* Runs one command (hiredis format: %s, %b, ...) on a short-lived connection of its own.
 * Returns the new reply to free with freeReplyObject (Redis error replies included), or NULL
 * when the server could not be reached. */
redisReply *rf_command(const rf_server *srv, const char *fmt, ...);

/* FLUSHALL: every database of the server emptied. 0, or -1 when that failed. */
int rf_flushall(const rf_server *srv);

/* rf_command for commands answering an integer (EXISTS, PTTL, DEL, ...): the integer, or
 * RF_NOT_INTEGER for any other reply or no reply. */
#define RF_NOT_INTEGER (-999999999LL)
long long rf_integer(const rf_server *srv, const char *fmt, ...);

/* rf_command for commands answering a bulk string (GET, HGET, ...): copies it NUL-terminated
 * into buf (truncated to size - 1) and returns 1; 0 for a nil reply; -1 for anything else. */
int rf_string(const rf_server *srv, char *buf, size_t size, const char *fmt, ...);

#endif /* LC_TESTS_REDIS_FIXTURE_H */
