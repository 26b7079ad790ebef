/*
 * Integration tests of lock.c against a real redis-server: mutual exclusion across threads and
 * processes (and the control run proving the workload can fail), owner-only release, reentrant
 * holds, try-lock, acquire with atomic reads, the Redis key layout, leases, extend,
 * force-unlock, and a crashed holder whose lease runs out.
 */
#include "lc_test.h"

#include <pthread.h>

/* ---- mutual exclusion: non-atomic GET + SET increments --------------------------------- */

#define MX_PROCS 2
#define MX_THREADS 8
#define MX_TOTAL 2000
#define MX_PER_THREAD (MX_TOTAL / (MX_PROCS * MX_THREADS))
#define MX_GAP_US 200 /* between GET and SET: widens the race window for the control run */

typedef struct mx_worker {
    lc_client *client;
    int use_lock;
    int errors;
    char err[200];
    pthread_t tid;
} mx_worker;

static const char MX_LOCK[] = "it_lock:mx";
static const char MX_COUNTER[] = "it_lock:mx:counter";

/* Notes the first error of a worker with its status and message. */
static void mx_error(mx_worker *w, const char *what, lc_status st)
{
    if (w->errors++ == 0)
        snprintf(w->err, sizeof w->err, "%s: %s (%s)", what, lc_status_name(st), lc_errmsg());
}

/* Reads the counter, waits a little, writes it back + 1: loses updates unless serialised. */
static int mx_increment(mx_worker *w)
{
    const char *get[] = {"GET", MX_COUNTER};
    redisReply *r = NULL;
    lc_status st = lc_client_command(w->client, 2, get, NULL, &r);
    if (st != LC_OK) {
        mx_error(w, "GET", st);
        freeReplyObject(r);
        return -1;
    }
    long v = r->type == REDIS_REPLY_STRING ? strtol(r->str, NULL, 10) : 0;
    freeReplyObject(r);
    tu_sleep_us(MX_GAP_US);
    char buf[32];
    snprintf(buf, sizeof buf, "%ld", v + 1);
    const char *set[] = {"SET", MX_COUNTER, buf};
    st = lc_client_command(w->client, 3, set, NULL, NULL);
    if (st != LC_OK) {
        mx_error(w, "SET", st);
        return -1;
    }
    return 0;
}

/* MX_PER_THREAD increments, each under the lock when use_lock (own lc_lock per thread). */
static void *mx_thread(void *arg)
{
    mx_worker *w = arg;
    lc_lock *lock = NULL;
    if (w->use_lock) {
        lc_lock_opts o = lt_opts(10000, 1);
        lc_status st = lc_lock_new(w->client, MX_LOCK, &o, &lock);
        if (st != LC_OK) {
            mx_error(w, "lc_lock_new", st);
            return NULL;
        }
    }
    for (int i = 0; i < MX_PER_THREAD; i++) {
        if (lock != NULL) {
            lc_status st = lc_lock_acquire(lock, 30000, NULL);
            if (st != LC_OK) {
                mx_error(w, "lc_lock_acquire", st);
                break;
            }
        }
        int failed = mx_increment(w);
        if (lock != NULL) {
            lc_status st = lc_lock_release(lock);
            if (st != LC_OK)
                mx_error(w, "lc_lock_release", st);
        }
        if (failed)
            break;
    }
    lc_lock_free(lock);
    return NULL;
}

/* Runs MX_THREADS workers on one client in this process; returns the number of errors. */
static int mx_run_threads(lc_client *client, int use_lock, char *err, size_t errsize)
{
    mx_worker w[MX_THREADS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < MX_THREADS; i++) {
        w[i].client = client;
        w[i].use_lock = use_lock;
        if (pthread_create(&w[i].tid, NULL, mx_thread, &w[i]) != 0) {
            snprintf(err, errsize, "pthread_create failed");
            return 1;
        }
    }
    int errors = 0;
    for (int i = 0; i < MX_THREADS; i++) {
        pthread_join(w[i].tid, NULL);
        if (w[i].errors && errors == 0)
            snprintf(err, errsize, "%s", w[i].err);
        errors += w[i].errors;
    }
    return errors;
}

/* Two processes x MX_THREADS threads, started together; returns the final counter. The child
 * makes its own client after the fork (threads and connections do not survive fork). */
static long mx_workload(int use_lock)
{
    int ready[2], go[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(go), 0);
    pid_t pid = lt_fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        close(go[1]);
        lc_client *c = NULL;
        LT_CHILD_CHECK(lc_client_new(rf_url(gf_redis), lt_client_opts(), &c) == LC_OK);
        LT_CHILD_CHECK(write(ready[1], "r", 1) == 1);
        char b;
        LT_CHILD_CHECK(read(go[0], &b, 1) == 1);
        char err[200] = "";
        int errors = mx_run_threads(c, use_lock, err, sizeof err);
        if (errors)
            fprintf(stderr, "child: %d errors, first: %s\n", errors, err);
        lc_client_free(c);
        _exit(errors ? 1 : 0);
    }
    close(ready[1]);
    close(go[0]);
    lc_client *c = lt_client(rf_url(gf_redis));
    char b;
    assert_int_equal(read(ready[0], &b, 1), 1);
    assert_int_equal(write(go[1], "g", 1), 1);
    char err[200] = "";
    int errors = mx_run_threads(c, use_lock, err, sizeof err);
    int code = lt_wait_child(pid, 60000);
    close(ready[0]);
    close(go[1]);
    lc_client_free(c);
    if (errors)
        fail_msg("parent: %d errors, first: %s", errors, err);
    assert_int_equal(code, 0);
    long long v = RF_NOT_INTEGER;
    char buf[32];
    if (rf_string(gf_redis, buf, sizeof buf, "GET %s", MX_COUNTER) == 1)
        v = strtoll(buf, NULL, 10);
    return (long)v;
}

/* 2 processes x 8 threads, 2000 read-then-write increments under the lock: none is lost. */
static void test_mutual_exclusion(void **state)
{
    (void)state;
    int64_t t0 = tu_now_ms();
    long v = mx_workload(1);
    print_message("locked workload: counter %ld in %lld ms\n", v, (long long)(tu_now_ms() - t0));
    assert_int_equal(v, MX_TOTAL);
    /* Every lock was released: nothing left behind but the fencing counter. */
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", MX_LOCK), 0);
}

/* The control run: the same workload without the lock loses updates, so the test above is
 * able to fail. */
static void test_mutual_exclusion_control(void **state)
{
    (void)state;
    long v = mx_workload(0);
    print_message("unlocked workload: counter %ld\n", v);
    assert_true(v > 0);
    assert_true(v < MX_TOTAL);
}

/* ---- owners and holds ------------------------------------------------------------------- */

/* A handle that holds nothing cannot release another owner's lock; the lock stays. */
static void test_release_by_other_owner(void **state)
{
    (void)state;
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *a = lt_lock(c, "it_lock:other", 30000, 0);
    lc_lock *b = lt_lock(c, "it_lock:other", 30000, 0);
    assert_string_not_equal(lc_lock_token(a), lc_lock_token(b));

    assert_ok(lc_lock_acquire(a, 0, NULL));
    assert_status(lc_lock_release(b), LC_ENOTHELD);
    assert_int_equal(rf_integer(gf_redis, "EXISTS it_lock:other"), 1);
    char owner[64];
    assert_string_equal(lt_owner(gf_redis, "it_lock:other", owner, sizeof owner), lc_lock_token(a));
    assert_int_equal(lc_lock_held(a), 1);
    assert_int_equal(lc_lock_held(b), 0);
    assert_status(lc_lock_try(b, NULL), LC_EBUSY);

    assert_ok(lc_lock_release(a));
    assert_int_equal(rf_integer(gf_redis, "EXISTS it_lock:other"), 0);
    lc_lock_free(a);
    lc_lock_free(b);
    lc_client_free(c);
}

/* A holder whose lease ran out and whose lock another owner took gets LC_ELOST from release,
 * and the new owner's lock is untouched. */
static void test_release_after_takeover(void **state)
{
    (void)state;
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *a = lt_lock(c, "it_lock:takeover", 200, 0);
    lc_lock *b = lt_lock(c, "it_lock:takeover", 30000, 0);
    assert_ok(lc_lock_acquire(a, 0, NULL));
    tu_sleep_ms(350);
    assert_ok(lc_lock_try(b, NULL));

    assert_status(lc_lock_release(a), LC_ELOST);
    assert_int_equal(lc_lock_held(a), 0);
    char owner[64];
    assert_string_equal(lt_owner(gf_redis, "it_lock:takeover", owner, sizeof owner),
                        lc_lock_token(b));
    assert_true(rf_integer(gf_redis, "PTTL it_lock:takeover") > 20000);
    /* The local hold was cleared by the failed release. */
    assert_status(lc_lock_release(a), LC_ENOTHELD);

    assert_ok(lc_lock_release(b));
    lc_lock_free(a);
    lc_lock_free(b);
    lc_client_free(c);
}

/* Acquire 3x / release 3x on one handle: the key goes away at the third release only. */
static void test_reentrant(void **state)
{
    (void)state;
    const char *name = "it_lock:reentrant";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *a = lt_lock(c, name, 30000, 0);
    lc_lock *b = lt_lock(c, name, 30000, 0);
    for (int i = 1; i <= 3; i++) {
        uint64_t fence = 0;
        assert_ok(lc_lock_acquire(a, 1000, &fence));
        assert_true(fence > 0);
        assert_int_equal(lc_lock_fence(a), fence);
        assert_int_equal(lc_lock_held(a), i);
        assert_int_equal(lt_hget_ll(gf_redis, name, "c"), i);
    }
    for (int i = 2; i >= 0; i--) {
        assert_status(lc_lock_try(b, NULL), LC_EBUSY);
        assert_ok(lc_lock_release(a));
        assert_int_equal(lc_lock_held(a), i);
        assert_int_equal(rf_integer(gf_redis, "EXISTS %s", name), i > 0 ? 1 : 0);
    }
    assert_int_equal(lc_lock_fence(a), 0);
    assert_status(lc_lock_release(a), LC_ENOTHELD);
    assert_ok(lc_lock_try(b, NULL));
    assert_ok(lc_lock_release(b));
    lc_lock_free(a);
    lc_lock_free(b);
    lc_client_free(c);
}

/* try-lock answers LC_EBUSY at once while another owner holds the lock, then LC_OK. */
static void test_try_busy(void **state)
{
    (void)state;
    const char *name = "it_lock:try";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *a = lt_lock(c, name, 30000, 1);
    lc_lock *b = lt_lock(c, name, 30000, 1);
    assert_ok(lc_lock_try(a, NULL));

    int64_t t0 = tu_now_ms();
    uint64_t fence = 12345;
    assert_status(lc_lock_try(b, &fence), LC_EBUSY);
    assert_status(lc_lock_acquire(b, 0, NULL), LC_EBUSY);
    lc_acquire_opts ao = {0};
    redisReply *values = (redisReply *)&ao; /* must be overwritten with NULL */
    assert_status(lc_lock_acquire_ex(b, &ao, NULL, &values), LC_EBUSY);
    assert_null(values);
    assert_true(tu_now_ms() - t0 < 100);
    assert_int_equal(lc_lock_held(b), 0);
    assert_int_equal(lc_lock_fence(b), 0);

    assert_ok(lc_lock_release(a));
    assert_ok(lc_lock_try(b, &fence));
    assert_true(fence > 0);
    assert_ok(lc_lock_release(b));
    lc_lock_free(a);
    lc_lock_free(b);
    lc_client_free(c);
}

/* acquire_ex returns the values of read_keys read in the same step as the acquire. */
static void test_acquire_ex_reads(void **state)
{
    (void)state;
    const char *name = "it_lock:ex";
    lc_client *c = lt_client(rf_url(gf_redis));
    redisReply *r = rf_command(gf_redis, "SET it_lock:ex:k1 %s", "v1");
    freeReplyObject(r);
    r = rf_command(gf_redis, "SET it_lock:ex:k3 %b", "a\0b", (size_t)3);
    freeReplyObject(r);

    lc_lock *a = lt_lock(c, name, 30000, 0);
    const char *keys[] = {"it_lock:ex:k1", "it_lock:ex:k2", "it_lock:ex:k3"};
    const size_t lens[] = {13, 13, 13};
    lc_acquire_opts ao = {.wait_ms = 500, .nread = 3, .read_keys = keys, .read_keylens = lens};
    redisReply *values = NULL;
    uint64_t fence = 0;
    assert_ok(lc_lock_acquire_ex(a, &ao, &fence, &values));
    assert_true(fence > 0);
    assert_non_null(values);
    assert_int_equal(values->type, REDIS_REPLY_ARRAY);
    assert_int_equal(values->elements, 3);
    assert_int_equal(values->element[0]->type, REDIS_REPLY_STRING);
    assert_string_equal(values->element[0]->str, "v1");
    assert_int_equal(values->element[1]->type, REDIS_REPLY_NIL);
    assert_int_equal(values->element[2]->type, REDIS_REPLY_STRING);
    assert_int_equal(values->element[2]->len, 3);
    assert_memory_equal(values->element[2]->str, "a\0b", 3);
    freeReplyObject(values);

    /* NUL-terminated keys (no lengths), by another owner once the lock is free. */
    lc_lock *b = lt_lock(c, name, 30000, 0);
    const char *keys2[] = {"it_lock:ex:k1"};
    lc_acquire_opts ao2 = {.wait_ms = 0, .nread = 1, .read_keys = keys2, .read_keylens = NULL};
    values = NULL;
    assert_status(lc_lock_acquire_ex(b, &ao2, NULL, &values), LC_EBUSY);
    assert_null(values);
    assert_ok(lc_lock_release(a));
    assert_ok(lc_lock_acquire_ex(b, &ao2, NULL, &values));
    assert_non_null(values);
    assert_int_equal(values->elements, 1);
    assert_string_equal(values->element[0]->str, "v1");
    freeReplyObject(values);
    /* A reentrant acquire reads too. */
    values = NULL;
    assert_ok(lc_lock_acquire_ex(b, &ao2, NULL, &values));
    assert_non_null(values);
    assert_int_equal(values->elements, 1);
    freeReplyObject(values);
    assert_int_equal(lc_lock_held(b), 2);
    assert_ok(lc_lock_release(b));
    assert_ok(lc_lock_release(b));

    lc_lock_free(a);
    lc_lock_free(b);
    lc_client_free(c);
}

/* The keys documented in lockcore.h: NAME hash {o, c, f} with the lease as TTL, NAME:fence. */
static void test_key_layout(void **state)
{
    (void)state;
    const char *name = "it_lock:layout";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *a = lt_lock(c, name, 5000, 0);
    assert_string_equal(lc_lock_name(a), name);
    const char *tok = lc_lock_token(a);
    assert_int_equal(strlen(tok), 32);
    assert_int_equal(strspn(tok, "0123456789abcdefABCDEF"), 32);
    assert_int_equal(lc_lock_held(a), 0);

    uint64_t fence = 0;
    assert_ok(lc_lock_acquire(a, 0, &fence));
    char buf[64];
    assert_int_equal(rf_string(gf_redis, buf, sizeof buf, "TYPE %s", name), 1); /* status reply */
    assert_string_equal(buf, "hash");
    assert_string_equal(lt_owner(gf_redis, name, buf, sizeof buf), tok);
    assert_int_equal(lt_hget_ll(gf_redis, name, "c"), 1);
    assert_int_equal(lt_hget_ll(gf_redis, name, "f"), (long long)fence);
    char fkey[64];
    snprintf(fkey, sizeof fkey, "%s:fence", name);
    assert_int_equal(lt_get_ll(gf_redis, fkey), (long long)fence);
    assert_between(rf_integer(gf_redis, "PTTL %s", name), 4000, 5000);
    assert_ok(lc_lock_release(a));
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", name), 0);
    /* The fencing counter outlives the lock and never expires. */
    assert_int_equal(rf_integer(gf_redis, "PTTL %s:fence", name), -1);
    lc_lock_free(a);
    lc_client_free(c);
}

/* Without the watchdog the lease runs out and another owner can take the lock. */
static void test_lease_expires(void **state)
{
    (void)state;
    const char *name = "it_lock:lease";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *a = lt_lock(c, name, 200, 0);
    lc_lock *b = lt_lock(c, name, 30000, 0);
    assert_ok(lc_lock_acquire(a, 0, NULL));
    assert_between(rf_integer(gf_redis, "PTTL %s", name), 1, 200);
    assert_status(lc_lock_try(b, NULL), LC_EBUSY);
    tu_sleep_ms(300);
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", name), 0);
    assert_ok(lc_lock_try(b, NULL));
    assert_ok(lc_lock_release(b));
    lc_lock_free(a);
    lc_lock_free(b);
    lc_client_free(c);
}

/* extend sets a new lease from now; LC_ENOTHELD for a non-holder, LC_ELOST once deleted. */
static void test_extend(void **state)
{
    (void)state;
    const char *name = "it_lock:extend";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *a = lt_lock(c, name, 300, 0);
    lc_lock *b = lt_lock(c, name, 300, 0);
    assert_ok(lc_lock_acquire(a, 0, NULL));
    assert_ok(lc_lock_extend(a, 2000));
    assert_between(rf_integer(gf_redis, "PTTL %s", name), 1500, 2000);
    tu_sleep_ms(400);
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", name), 1);
    assert_status(lc_lock_extend(b, 2000), LC_ENOTHELD);

    assert_int_equal(rf_integer(gf_redis, "DEL %s", name), 1);
    assert_status(lc_lock_extend(a, 2000), LC_ELOST);
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", name), 0);
    lc_lock_free(a);
    lc_lock_free(b);
    lc_client_free(c);
}

/* force_unlock deletes whoever's lock; the old holder then gets LC_ELOST and cannot harm the
 * next owner. */
static void test_force_unlock(void **state)
{
    (void)state;
    const char *name = "it_lock:force";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *a = lt_lock(c, name, 30000, 1);
    lc_lock *b = lt_lock(c, name, 30000, 0);
    assert_ok(lc_lock_acquire(a, 0, NULL));
    assert_ok(lc_lock_force_unlock(c, name));
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", name), 0);
    assert_ok(lc_lock_try(b, NULL));
    assert_status(lc_lock_release(a), LC_ELOST);
    char owner[64];
    assert_string_equal(lt_owner(gf_redis, name, owner, sizeof owner), lc_lock_token(b));
    assert_ok(lc_lock_release(b));
    assert_status(lc_lock_force_unlock(c, name), LC_ENOTHELD);
    lc_lock_free(a);
    lc_lock_free(b);
    lc_client_free(c);
}

/* Freeing a handle that still holds the lock releases it (all holds). */
static void test_free_releases(void **state)
{
    (void)state;
    const char *name = "it_lock:free";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *a = lt_lock(c, name, 30000, 1);
    assert_ok(lc_lock_acquire(a, 0, NULL));
    assert_ok(lc_lock_acquire(a, 0, NULL));
    lc_lock_free(a);
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", name), 0);
    lc_client_free(c);
}

/* One handle shared by 4 threads is one owner: its calls are serialised, the hold count adds
 * up, and the lock is gone once every thread released what it took. */
typedef struct shared_worker {
    lc_lock *lock;
    int errors;
    pthread_t tid;
} shared_worker;

/* 100 acquire/release pairs on the shared handle. */
static void *shared_main(void *arg)
{
    shared_worker *w = arg;
    for (int i = 0; i < 100; i++) {
        if (lc_lock_acquire(w->lock, 1000, NULL) != LC_OK)
            w->errors++;
        else if (lc_lock_release(w->lock) != LC_OK)
            w->errors++;
    }
    return NULL;
}

static void test_shared_handle_threads(void **state)
{
    (void)state;
    const char *name = "it_lock:shared";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *a = lt_lock(c, name, 30000, 1);
    shared_worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i].lock = a;
        w[i].errors = 0;
        assert_int_equal(pthread_create(&w[i].tid, NULL, shared_main, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(w[i].tid, NULL);
        assert_int_equal(w[i].errors, 0);
    }
    assert_int_equal(lc_lock_held(a), 0);
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", name), 0);
    lc_lock_free(a);
    lc_client_free(c);
}

/* A holder that is SIGKILLed (watchdog on, 500 ms lease) blocks others only until its last
 * lease runs out: the parent's lc_lock_acquire succeeds within lease + 200 ms of the kill. */
static void test_crashed_holder(void **state)
{
    (void)state;
    const char *name = "it_lock:crash";
    const int lease = 500;
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = lt_fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        lc_client *c = NULL;
        LT_CHILD_CHECK(lc_client_new(rf_url(gf_redis), lt_client_opts(), &c) == LC_OK);
        lc_lock_opts o = lt_opts(lease, 1);
        lc_lock *l = NULL;
        LT_CHILD_CHECK(lc_lock_new(c, name, &o, &l) == LC_OK);
        uint64_t fence = 0;
        LT_CHILD_CHECK(lc_lock_acquire(l, 2000, &fence) == LC_OK);
        LT_CHILD_CHECK(write(ready[1], &fence, sizeof fence) == (ssize_t)sizeof fence);
        for (;;)
            pause();
    }
    close(ready[1]);
    uint64_t child_fence = 0;
    ssize_t n = read(ready[0], &child_fence, sizeof child_fence);
    close(ready[0]);
    if (n != (ssize_t)sizeof child_fence) {
        int code = lt_wait_child(pid, 1000);
        fail_msg("child did not take the lock (exit %d)", code);
    }
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *b = lt_lock(c, name, 30000, 0);
    /* Past the first lease: only the child's watchdog can have kept it. */
    tu_sleep_ms(lease + 300);
    assert_status(lc_lock_try(b, NULL), LC_EBUSY);

    kill(pid, SIGKILL);
    int64_t t_kill = tu_now_ms();
    assert_int_equal(lt_wait_child(pid, 2000), 128 + SIGKILL);
    uint64_t fence = 0;
    assert_ok(lc_lock_acquire(b, 3000, &fence));
    int64_t took = tu_now_ms() - t_kill;
    print_message("acquired %lld ms after the kill\n", (long long)took);
    assert_between(took, 0, lease + 200);
    assert_true(fence > child_fence);
    assert_ok(lc_lock_release(b));
    lc_lock_free(b);
    lc_client_free(c);
}

/* A hold of this owner that the handle forgot (its reply was lost) is replaced by a fresh hold:
 * new fencing token, hold count 1, so one release frees the lock. */
static void test_forgotten_hold_replaced(void **state)
{
    (void)state;
    const char *name = "it_lock:forgotten";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *a = lt_lock(c, name, 30000, 0);
    rf_integer(gf_redis, "HSET %s o %s c 1 f 5", name, lc_lock_token(a));
    rf_integer(gf_redis, "PEXPIRE %s 30000", name);
    rf_integer(gf_redis, "SET %s:fence 5", name);
    uint64_t fence = 0;
    assert_ok(lc_lock_acquire(a, 0, &fence));
    assert_true(fence > 5);
    assert_int_equal(lc_lock_held(a), 1);
    char count[16];
    assert_int_equal(rf_string(gf_redis, count, sizeof(count), "HGET %s c", name), 1);
    assert_string_equal(count, "1");
    assert_ok(lc_lock_release(a));
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", name), 0);
    lc_lock_free(a);
    lc_client_free(c);
}

/* A read key of the wrong type fails the acquire before anything is written. */
static void test_bad_read_key_writes_nothing(void **state)
{
    (void)state;
    const char *name = "it_lock:badread";
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *a = lt_lock(c, name, 30000, 0);
    rf_integer(gf_redis, "HSET it_lock:ahash f v");
    const char *reads[1] = {"it_lock:ahash"};
    lc_acquire_opts ao = {.wait_ms = 0, .nread = 1, .read_keys = reads};
    redisReply *vals = NULL;
    assert_status(lc_lock_acquire_ex(a, &ao, NULL, &vals), LC_EREDIS);
    assert_null(vals);
    assert_int_equal(lc_lock_held(a), 0);
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s", name), 0);
    assert_int_equal(rf_integer(gf_redis, "EXISTS %s:fence", name), 0);
    lc_lock_free(a);
    lc_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_mutual_exclusion, gf_flush),
        cmocka_unit_test_setup(test_mutual_exclusion_control, gf_flush),
        cmocka_unit_test_setup(test_release_by_other_owner, gf_flush),
        cmocka_unit_test_setup(test_release_after_takeover, gf_flush),
        cmocka_unit_test_setup(test_reentrant, gf_flush),
        cmocka_unit_test_setup(test_try_busy, gf_flush),
        cmocka_unit_test_setup(test_acquire_ex_reads, gf_flush),
        cmocka_unit_test_setup(test_key_layout, gf_flush),
        cmocka_unit_test_setup(test_lease_expires, gf_flush),
        cmocka_unit_test_setup(test_extend, gf_flush),
        cmocka_unit_test_setup(test_force_unlock, gf_flush),
        cmocka_unit_test_setup(test_free_releases, gf_flush),
        cmocka_unit_test_setup(test_shared_handle_threads, gf_flush),
        cmocka_unit_test_setup(test_crashed_holder, gf_flush),
        cmocka_unit_test_setup(test_forgotten_hold_replaced, gf_flush),
        cmocka_unit_test_setup(test_bad_read_key_writes_nothing, gf_flush),
    };
    return cmocka_run_group_tests_name("it_lock", tests, gf_group_setup, gf_group_teardown);
}
