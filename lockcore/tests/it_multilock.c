/*
 * Integration tests of multilock.c: all-or-nothing acquisition (nothing stays held when one
 * name is busy), duplicates removed and names in sorted byte order, release of every name,
 * and two threads locking overlapping name sets given in opposite orders without deadlock.
 */
#include "lc_test.h"

#include <pthread.h>
#include <stdatomic.h>

/* A new multi-lock over names with the given lease; fails the test otherwise. */
static lc_multilock *multilock(lc_client *c, int n, const char *const *names, int lease)
{
    lc_lock_opts o = lt_opts(lease, 1);
    lc_multilock *ml = NULL;
    assert_ok(lc_multilock_new(c, n, names, &o, &ml));
    assert_non_null(ml);
    return ml;
}

/* EXISTS name. */
static long long exists(const char *name)
{
    return rf_integer(gf_redis, "EXISTS %s", name);
}

/* One name held by another owner: try and wait both fail, and none of the other names stays
 * held, in Redis or in the handles. Once it is free, all are taken. */
static void test_all_or_nothing(void **state)
{
    (void)state;
    const char *names[] = {"it_ml:a", "it_ml:b", "it_ml:c"};
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *other = lt_lock(c, "it_ml:b", 30000, 0);
    assert_ok(lc_lock_acquire(other, 0, NULL));
    lc_multilock *ml = multilock(c, 3, names, 30000);

    assert_status(lc_multilock_acquire(ml, 0), LC_EBUSY);
    assert_int_equal(exists("it_ml:a"), 0);
    assert_int_equal(exists("it_ml:c"), 0);
    int64_t t0 = tu_now_ms();
    assert_status(lc_multilock_acquire(ml, 200), LC_ETIMEOUT);
    assert_between(tu_now_ms() - t0, 190, 700);
    assert_int_equal(exists("it_ml:a"), 0);
    assert_int_equal(exists("it_ml:c"), 0);
    for (int i = 0; i < lc_multilock_count(ml); i++)
        assert_int_equal(lc_lock_held(lc_multilock_get(ml, i)), 0);
    char owner[64];
    assert_string_equal(lt_owner(gf_redis, "it_ml:b", owner, sizeof owner), lc_lock_token(other));

    assert_ok(lc_lock_release(other));
    assert_ok(lc_multilock_acquire(ml, 0));
    for (int i = 0; i < 3; i++) {
        lc_lock *l = lc_multilock_get(ml, i);
        assert_int_equal(lc_lock_held(l), 1);
        assert_true(lc_lock_fence(l) > 0);
        assert_string_equal(lt_owner(gf_redis, lc_lock_name(l), owner, sizeof owner),
                            lc_lock_token(l));
    }
    assert_status(lc_lock_try(other, NULL), LC_EBUSY);
    assert_ok(lc_multilock_release(ml));
    assert_int_equal(rf_integer(gf_redis, "EXISTS it_ml:a it_ml:b it_ml:c"), 0);
    assert_true(lc_multilock_release(ml) != LC_OK);

    lc_multilock_free(ml);
    lc_lock_free(other);
    lc_client_free(c);
}

/* The names before the busy one (in sorted order) were taken first: they must be given back,
 * so another owner can take them at once. */
static void test_partial_rolled_back(void **state)
{
    (void)state;
    const char *names[] = {"it_ml:z", "it_ml:m", "it_ml:a"};
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_lock *other = lt_lock(c, "it_ml:z", 30000, 0);
    assert_ok(lc_lock_acquire(other, 0, NULL));
    lc_multilock *ml = multilock(c, 3, names, 30000);
    assert_status(lc_multilock_acquire(ml, 0), LC_EBUSY);
    assert_int_equal(rf_integer(gf_redis, "EXISTS it_ml:a it_ml:m"), 0);
    lc_lock *probe = lt_lock(c, "it_ml:a", 30000, 0);
    assert_ok(lc_lock_try(probe, NULL));
    assert_ok(lc_lock_release(probe));
    assert_ok(lc_lock_release(other));
    lc_lock_free(probe);
    lc_multilock_free(ml);
    lc_lock_free(other);
    lc_client_free(c);
}

/* Duplicates are removed and the locks come in sorted byte order. */
static void test_dedup_sorted(void **state)
{
    (void)state;
    const char *names[] = {"it_ml:c", "it_ml:a", "it_ml:b", "it_ml:a", "it_ml:c", "it_ml:B"};
    const char *want[] = {"it_ml:B", "it_ml:a", "it_ml:b", "it_ml:c"};
    lc_client *c = lt_client(rf_url(gf_redis));
    lc_multilock *ml = multilock(c, 6, names, 30000);
    assert_int_equal(lc_multilock_count(ml), 4);
    for (int i = 0; i < 4; i++)
        assert_string_equal(lc_lock_name(lc_multilock_get(ml, i)), want[i]);
    assert_ok(lc_multilock_acquire(ml, 0));
    assert_int_equal(rf_integer(gf_redis, "EXISTS it_ml:B it_ml:a it_ml:b it_ml:c"), 4);
    /* Each name taken once (hold count 1), not twice for the duplicate. */
    for (int i = 0; i < 4; i++)
        assert_int_equal(lc_lock_held(lc_multilock_get(ml, i)), 1);
    assert_ok(lc_multilock_release(ml));
    assert_int_equal(rf_integer(gf_redis, "EXISTS it_ml:B it_ml:a it_ml:b it_ml:c"), 0);
    lc_multilock_free(ml);
    lc_client_free(c);
}

/* Two threads with overlapping multi-locks given in opposite name order, 100 rounds each:
 * both finish (no deadlock, no timeout) and their critical sections never overlap. */
typedef struct ml_worker {
    lc_client *client;
    const char *const *names;
    int n;
    atomic_int *inside;
    atomic_int *overlaps;
    int rounds_done;
    lc_status st;
    pthread_t tid;
} ml_worker;

/* 100 rounds of acquire (10 s), a short critical section, release. */
static void *ml_main(void *arg)
{
    ml_worker *w = arg;
    lc_lock_opts o = lt_opts(10000, 1);
    lc_multilock *ml = NULL;
    w->st = lc_multilock_new(w->client, w->n, w->names, &o, &ml);
    if (w->st != LC_OK)
        return NULL;
    for (int i = 0; i < 100; i++) {
        w->st = lc_multilock_acquire(ml, 10000);
        if (w->st != LC_OK)
            break;
        if (atomic_fetch_add(w->inside, 1) != 0)
            atomic_fetch_add(w->overlaps, 1);
        tu_sleep_us(200);
        atomic_fetch_sub(w->inside, 1);
        w->st = lc_multilock_release(ml);
        if (w->st != LC_OK)
            break;
        w->rounds_done++;
    }
    lc_multilock_free(ml);
    return NULL;
}

static void test_opposite_order_no_deadlock(void **state)
{
    (void)state;
    const char *fwd[] = {"it_ml:x", "it_ml:y", "it_ml:z"};
    const char *rev[] = {"it_ml:z", "it_ml:y", "it_ml:w"};
    lc_client *c = lt_client(rf_url(gf_redis));
    atomic_int inside = 0, overlaps = 0;
    ml_worker w[2] = {
        {.client = c, .names = fwd, .n = 3, .inside = &inside, .overlaps = &overlaps},
        {.client = c, .names = rev, .n = 3, .inside = &inside, .overlaps = &overlaps},
    };
    int64_t t0 = tu_now_ms();
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&w[i].tid, NULL, ml_main, &w[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(w[i].tid, NULL);
    print_message("200 multi-lock rounds in %lld ms\n", (long long)(tu_now_ms() - t0));
    for (int i = 0; i < 2; i++) {
        assert_status(w[i].st, LC_OK);
        assert_int_equal(w[i].rounds_done, 100);
    }
    assert_int_equal(atomic_load(&overlaps), 0);
    assert_int_equal(rf_integer(gf_redis, "EXISTS it_ml:w it_ml:x it_ml:y it_ml:z"), 0);
    lc_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_all_or_nothing, gf_flush),
        cmocka_unit_test_setup(test_partial_rolled_back, gf_flush),
        cmocka_unit_test_setup(test_dedup_sorted, gf_flush),
        cmocka_unit_test_setup(test_opposite_order_no_deadlock, gf_flush),
    };
    return cmocka_run_group_tests_name("it_multilock", tests, gf_group_setup, gf_group_teardown);
}
