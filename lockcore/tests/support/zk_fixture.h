/*
 * A throwaway ZooKeeper for tests: one server, or an ensemble of three, started from Debian's
 * `zookeeper` package (java ... org.apache.zookeeper.server.quorum.QuorumPeerMain <cfg>) on free
 * 127.0.0.1 ports, each in its own data directory under a fresh temp dir, and stopped (the dir
 * removed) by the test, and also when the test process exits, aborts or is killed (the process
 * registry of proc_registry.h, PR_SET_PDEATHSIG).
 *
 * Environment: ZF_JAVA (java), ZF_CLASSPATH (the jars of /usr/share/java the server needs),
 * ZF_TICK_MS (tickTime, default 200: sessions may be as short as 2 ticks).
 *
 * Not thread-safe: start, pause and stop servers from the test's main thread.
 */
#ifndef LC_TESTS_ZK_FIXTURE_H
#define LC_TESTS_ZK_FIXTURE_H

#include <sys/types.h>

typedef struct zf_ensemble zf_ensemble;

/* Starts n servers (1, or 3 for an ensemble) and waits (at most 60 s) until every one serves
 * requests (the "srvr" four-letter word answers a Mode). Returns the ensemble to release with
 * zf_stop, or NULL with the reason on stderr. */
zf_ensemble *zf_start(int n);

/* Stops every server (SIGTERM, SIGKILL after 3 s), removes the temp dir, frees. NULL-safe. */
void zf_stop(zf_ensemble *z);

/* "127.0.0.1:P1[,127.0.0.1:P2...]" (borrowed). */
const char *zf_hosts(const zf_ensemble *z);
/* The client address of server i only. */
const char *zf_host(const zf_ensemble *z, int i);
int zf_count(const zf_ensemble *z);
pid_t zf_pid(const zf_ensemble *z, int i); /* 0 when not running */

/* SIGSTOP / SIGCONT server i. 0, or -1 when it is not running. */
int zf_pause(zf_ensemble *z, int i);
int zf_resume(zf_ensemble *z, int i);
/* SIGKILL server i and reap it. 0, or -1 when it was not running. */
int zf_kill(zf_ensemble *z, int i);
/* Starts server i again (same ports, same data dir). 0 once it runs (not waiting to serve). */
int zf_restart(zf_ensemble *z, int i);

/* Server i's "Mode:" as the srvr command reports it ("standalone", "leader", "follower"), copied
 * into buf; "" when it does not serve. Returns buf. */
char *zf_mode(const zf_ensemble *z, int i, char *buf, size_t size);
/* The index of the server that is leader (or standalone) now, or -1. */
int zf_leader(const zf_ensemble *z);

#endif /* LC_TESTS_ZK_FIXTURE_H */
