/*
 * Helpers shared by the lockcore tests (header-only, all static inline): cmocka includes,
 * status assertions that print names and messages, clients and locks with test-sized options,
 * and forked children that die with the test.
 *
 * A forked child must never return into cmocka (its assertions would longjmp into the parent's
 * copied state): child code checks with LT_CHILD_CHECK and ends with _exit().
 */
#ifndef LC_TESTS_LC_TEST_H
#define LC_TESTS_LC_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lockcore/lockcore.h"
#include "group_fixture.h"
#include "redis_fixture.h"
#include "testutil.h"

/* Fails the test unless expr returns the status want, naming both and quoting lc_errmsg(). */
#define assert_status(expr, want)                                                                  \
    do {                                                                                           \
        lc_status lt_st_ = (expr);                                                                 \
        lc_status lt_want_ = (want);                                                               \
        if (lt_st_ != lt_want_)                                                                    \
            fail_msg("%s:%d: %s returned %s (%s), expected %s", __FILE__, __LINE__, #expr,         \
                     lc_status_name(lt_st_), lc_errmsg(), lc_status_name(lt_want_));               \
    } while (0)

#define assert_ok(expr) assert_status((expr), LC_OK)

/* Fails the test unless lo <= v <= hi (for elapsed times), printing all three. */
#define assert_between(v, lo, hi)                                                                  \
    do {                                                                                           \
        long long lt_v_ = (long long)(v);                                                          \
        if (lt_v_ < (long long)(lo) || lt_v_ > (long long)(hi))                                    \
            fail_msg("%s:%d: %s = %lld, expected within [%lld, %lld]", __FILE__, __LINE__, #v,     \
                     lt_v_, (long long)(lo), (long long)(hi));                                     \
    } while (0)

/* In a forked child: report the failed check on stderr and exit with the line number. */
#define LT_CHILD_CHECK(cond)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "child %ld: %s:%d: check failed: %s (%s)\n", (long)getpid(), __FILE__, \
                    __LINE__, #cond, lc_errmsg());                                                 \
            _exit(__LINE__ % 200 + 2);                                                             \
        }                                                                                          \
    } while (0)

/* Client options for the tests: the defaults, with the multiplexed connection when the test
 * runs with LC_TEST_PIPELINE=1 (ctest registers every integration test in both modes). */
static inline const lc_client_opts *lt_client_opts(void)
{
    static lc_client_opts o;
    lc_client_opts_init(&o);
    const char *p = getenv("LC_TEST_PIPELINE");
    o.pipeline = p && p[0] == '1';
    return &o;
}

/* A new client for url with the test options; fails the test when that is not LC_OK. */
static inline lc_client *lt_client(const char *url)
{
    lc_client *c = NULL;
    lc_status st = lc_client_new(url, lt_client_opts(), &c);
    if (st != LC_OK)
        fail_msg("lc_client_new(%s): %s (%s)", url, lc_status_name(st), lc_errmsg());
    assert_non_null(c);
    return c;
}

/* Lock options with the given lease and watchdog flag (no cap, no callback). */
static inline lc_lock_opts lt_opts(int lease_ms, int watchdog)
{
    lc_lock_opts o;
    lc_lock_opts_init(&o);
    o.lease_ms = lease_ms;
    o.watchdog = watchdog;
    return o;
}

/* A new lock handle on name; fails the test when lc_lock_new is not LC_OK. */
static inline lc_lock *lt_lock(lc_client *c, const char *name, int lease_ms, int watchdog)
{
    lc_lock_opts o = lt_opts(lease_ms, watchdog);
    lc_lock *l = NULL;
    lc_status st = lc_lock_new(c, name, &o, &l);
    if (st != LC_OK)
        fail_msg("lc_lock_new(%s): %s (%s)", name, lc_status_name(st), lc_errmsg());
    assert_non_null(l);
    return l;
}

/* fork() whose child gets SIGKILL when the test process dies. Returns as fork() does. */
static inline pid_t lt_fork(void)
{
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(120);
    }
    return pid;
}

/* Waits up to timeout_ms for a child; SIGKILLs it after that. Returns its exit code, 128 + the
 * signal that killed it, or -1 when it had to be killed for the timeout. */
static inline int lt_wait_child(pid_t pid, int timeout_ms)
{
    int64_t deadline = tu_now_ms() + timeout_ms;
    int status = 0;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            break;
        if (r < 0)
            return -2;
        if (tu_now_ms() >= deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        tu_sleep_ms(5);
    }
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}

/* One lc_lock_acquire (5 s) on a thread of its own (pthread_create(&a.tid, NULL,
 * lt_acquire_main, &a)): its status and when it returned. */
typedef struct lt_acquirer {
    lc_lock *lock;
    lc_status st;
    int64_t done_us;
    pthread_t tid;
} lt_acquirer;

static inline void *lt_acquire_main(void *arg)
{
    lt_acquirer *t = arg;
    t->st = lc_lock_acquire(t->lock, 5000, NULL);
    t->done_us = tu_now_us();
    return NULL;
}

/* The owner token stored in the lock hash (field o), or "" when absent. */
static inline const char *lt_owner(rf_server *srv, const char *name, char *buf, size_t size)
{
    if (rf_string(srv, buf, size, "HGET %s o", name) != 1)
        buf[0] = '\0';
    return buf;
}

/* Pings until LC_OK (at most timeout_ms): after a Redis restart the pooled connections are
 * dead and the first calls are allowed to fail with LC_EIO. Returns the last status. */
static inline lc_status lt_ping_until_ok(lc_client *c, int timeout_ms)
{
    int64_t deadline = tu_now_ms() + timeout_ms;
    lc_status st;
    while ((st = lc_client_ping(c)) != LC_OK && tu_now_ms() < deadline)
        tu_sleep_ms(20);
    return st;
}

/* HGET key field parsed as an integer, or RF_NOT_INTEGER when absent or not a number. */
static inline long long lt_hget_ll(rf_server *srv, const char *key, const char *field)
{
    char buf[64], *end;
    if (rf_string(srv, buf, sizeof buf, "HGET %s %s", key, field) != 1)
        return RF_NOT_INTEGER;
    long long v = strtoll(buf, &end, 10);
    return *end == '\0' && end != buf ? v : RF_NOT_INTEGER;
}

/* GET key parsed as an integer, or RF_NOT_INTEGER when absent or not a number. */
static inline long long lt_get_ll(rf_server *srv, const char *key)
{
    char buf[64], *end;
    if (rf_string(srv, buf, sizeof buf, "GET %s", key) != 1)
        return RF_NOT_INTEGER;
    long long v = strtoll(buf, &end, 10);
    return *end == '\0' && end != buf ? v : RF_NOT_INTEGER;
}

#endif /* LC_TESTS_LC_TEST_H */
