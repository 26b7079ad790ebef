/*
 * How test fixtures start processes (pr_spawn: redis-server in redis_fixture.c, redis-cli in
 * cluster_fixture.c, inventoryd in the service's svc_fixture.c), and the one registry of them,
 * so that they end with the test process whatever way it ends: an atexit handler stops what a
 * failed test left running (cmocka skips the teardown of a failed test), and handlers for
 * SIGABRT, SIGSEGV, SIGTERM and SIGINT kill it (SIGKILL, async-signal-safe) and then let the
 * signal do what it would have done (ASan's report, a core dump, plain death). Processes
 * started later stop first, so a service stops before the Redis it uses. A forked child of the
 * test never stops its parent's processes (each entry remembers which process registered it).
 * PR_SET_PDEATHSIG covers a SIGKILLed test.
 *
 * Not thread-safe: spawn, register, update and remove entries from one thread.
 */
#ifndef LC_TESTS_PROC_REGISTRY_H
#define LC_TESTS_PROC_REGISTRY_H

#include <sys/types.h>

/* What the registry does with one kind of fixture object. */
typedef struct pr_kind {
    /* From the fatal-signal handler, after the process was killed and reaped: removes what the
     * object left on disk (unlink, rmdir only: it must be async-signal-safe). May be NULL. */
    void (*remove_files)(void *obj);
    /* At exit: the fixture's own stop, which ends the process, frees obj and calls pr_remove. */
    void (*stop)(void *obj);
} pr_kind;

/* Forks and execs argv[0] (looked up in PATH when it has no '/') with argv: stdin from
 * /dev/null, stdout to outfd and stderr to errfd (-1: /dev/null; the caller keeps and closes
 * its descriptors), no other descriptor of the test left open, signals unblocked and at their
 * defaults, and PR_SET_PDEATHSIG so that it dies with the calling *thread* (start fixtures from
 * the test's main thread). Returns the pid, or -1 with the reason on stderr. */
pid_t pr_spawn(const char *const *argv, int outfd, int errfd);

/* Registers obj (no process yet). Returns its slot, or -1 when the registry is full (reason on
 * stderr). Installs the exit and signal handlers on first use. */
int pr_add(const pr_kind *kind, void *obj);

/* The pid now running for the slot's object; 0 when none runs. */
void pr_set_pid(int slot, pid_t pid);

/* Forgets the slot (the fixture stopped its process and frees the object). */
void pr_remove(int slot);

/* Calls fn(obj, arg) for every object of kind this process registered, oldest first. */
void pr_each(const pr_kind *kind, void (*fn)(void *obj, void *arg), void *arg);

#endif /* LC_TESTS_PROC_REGISTRY_H */
