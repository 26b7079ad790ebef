/*
 * Unit tests of service/src/store/store.c's asynchronous calls (no Redis: a lockcore client on a
 * closed port, and calls lockcore refuses to start): a call that could not start calls back on
 * the loop's next turn, never from inside itself, with the status and message of its own
 * failure (not a later one's), in its request's log context; a batch whose calls all failed to
 * start and a WAIT on no connection answer on the next turn too. A segment's key names are what
 * snprintf of the schema would write, for SKUs short and too long.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/event.h>

#include "areq.h"
#include "config.h"
#include "log.h"
#include "store.h"

struct fixture {
    struct event_base *base;
    lc_async_client *lc;
    struct store *store;
    struct areq ar;
};

/* What a callback saw. */
static struct seen {
    int calls;
    int inside; /* called while the starting call had not returned */
    lc_status st;
    char why[STORE_WHY_MAX];
    char request_id[64]; /* the log context during the callback */
    long long acks;
} seen;

static int in_call; /* set around each starting call */

static void note_context(void)
{
    seen.calls++;
    seen.inside |= in_call;
    const char *id = log_request_id();
    snprintf(seen.request_id, sizeof(seen.request_id), "%s", id ? id : "(none)");
}

static void on_reply(lc_status st, const redisReply *r, const char *errstr, void *arg)
{
    (void)r;
    (void)arg;
    note_context();
    seen.st = st;
    snprintf(seen.why, sizeof(seen.why), "%s", errstr ? errstr : "(null)");
}

static void on_batch(void *arg, const char *failed, const struct store_item *items, int n)
{
    (void)arg;
    (void)items;
    (void)n;
    note_context();
    snprintf(seen.why, sizeof(seen.why), "%s", failed ? failed : "(null)");
}

static void on_acked(void *arg, long long acks)
{
    (void)arg;
    note_context();
    seen.acks = acks;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->base = event_base_new();
    assert_non_null(f->base);
    /* Nothing listens on port 1: the client never connects, and no call here needs it. */
    assert_int_equal(lc_async_client_new(f->base, "redis://127.0.0.1:1", NULL, &f->lc), LC_OK);
    struct config cfg;
    config_defaults(&cfg);
    char err[256];
    assert_int_equal(store_new(&cfg, &f->store, err, sizeof(err)), 0);
    f->ar.lc = f->lc;
    areq_log_reader(); /* the store's callbacks read the request's id through log (log.h) */
    f->ar.base = f->base;
    f->ar.req.request_id = "req-19";
    memset(&seen, 0, sizeof(seen));
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    lc_async_client_free(f->lc);
    store_free(f->store);
    event_base_free(f->base);
    free(f);
    return 0;
}

/* One turn of the loop (what is due now, nothing waited for). */
static void next_turn(struct fixture *f)
{
    assert_int_equal(event_base_loop(f->base, EVLOOP_ONCE | EVLOOP_NONBLOCK), 0);
}

static void test_script_start_failure_deferred(void **state)
{
    struct fixture *f = *state;
    in_call = 1;
    /* One key and no key array: lockcore refuses to start the call. */
    store_script_async(f->store, f->lc, &f->ar, SCRIPT_PUT_META, 1, NULL, 0, NULL, on_reply, NULL);
    in_call = 0;
    assert_int_equal(seen.calls, 0); /* not from inside the call */
    /* Another failure before the loop turns: the first callback still gets its own message. */
    const char *argv[2] = {"GET", NULL};
    assert_int_not_equal(lc_async_command(f->lc, 2, argv, NULL, on_reply, NULL), LC_OK);
    assert_null(log_request_id());
    next_turn(f);
    assert_int_equal(seen.calls, 1);
    assert_false(seen.inside);
    assert_int_equal(seen.st, LC_EINVAL);
    assert_string_equal(seen.why, "async script: bad arguments");
    assert_string_equal(seen.request_id, "req-19"); /* the request's log context */
    assert_null(log_request_id());                  /* and only during the callback */
}

static void test_command_start_failure_deferred(void **state)
{
    struct fixture *f = *state;
    const char *argv[2] = {"PING", NULL};
    in_call = 1;
    store_command_async(f->lc, &f->ar, 2, argv, on_reply, NULL);
    in_call = 0;
    assert_int_equal(seen.calls, 0);
    next_turn(f);
    assert_int_equal(seen.calls, 1);
    assert_false(seen.inside);
    assert_int_equal(seen.st, LC_EINVAL);
    assert_string_equal(seen.why, "async command: argument 1 is NULL");
    assert_string_equal(seen.request_id, "req-19");
}

static void test_command_without_request(void **state)
{
    struct fixture *f = *state;
    const char *argv[1] = {NULL};
    store_command_async(f->lc, NULL, 1, argv, on_reply, NULL);
    assert_int_equal(seen.calls, 0);
    next_turn(f);
    assert_int_equal(seen.calls, 1);
    assert_string_equal(seen.request_id, "(none)"); /* no request: no log context */
}

static void test_batch_start_failures_deferred(void **state)
{
    struct fixture *f = *state;
    in_call = 1;
    store_batch_async(f->store, f->lc, &f->ar, SCRIPT_SEG_STATUS, 3, 1, NULL, 0, NULL, NULL,
                      on_batch, NULL);
    in_call = 0;
    assert_int_equal(seen.calls, 0);
    next_turn(f);
    assert_int_equal(seen.calls, 1);
    assert_false(seen.inside);
    assert_string_equal(seen.why, "async script: bad arguments");
    assert_string_equal(seen.request_id, "req-19");
}

static void test_wait_ref_start_failure_deferred(void **state)
{
    struct fixture *f = *state;
    lc_async_conn_ref ref = {.node = 7, .gen = 1}; /* not a connection of this client */
    in_call = 1;
    store_replica_wait_ref_async(f->lc, &ref, 1, 1000, on_reply, NULL);
    in_call = 0;
    assert_int_equal(seen.calls, 0);
    next_turn(f);
    assert_int_equal(seen.calls, 1);
    assert_false(seen.inside);
    assert_int_equal(seen.st, LC_EIO); /* a WAIT not sent vouches for nothing */
    assert_string_equal(seen.why, "async wait: not a connection of this client");
}

static void test_wait_conns_answered_next_turn(void **state)
{
    struct fixture *f = *state;
    struct store_conns cs = {.n = 0};
    in_call = 1;
    store_replica_wait_conns_async(f->lc, &f->ar, &cs, 2, 1000, on_acked, NULL);
    in_call = 0;
    assert_int_equal(seen.calls, 0);
    next_turn(f);
    assert_int_equal(seen.calls, 1);
    assert_int_equal(seen.acks, 2); /* nothing was carried: nothing to wait for */
    assert_string_equal(seen.request_id, "req-19");

    memset(&seen, 0, sizeof(seen));
    cs.n = 1;
    cs.ref[0] = (lc_async_conn_ref){.node = 7, .gen = 1};
    in_call = 1;
    store_replica_wait_conns_async(f->lc, &f->ar, &cs, 2, 1000, on_acked, NULL);
    in_call = 0;
    assert_int_equal(seen.calls, 0);
    next_turn(f);
    assert_int_equal(seen.calls, 1);
    assert_false(seen.inside);
    assert_int_equal(seen.acks, -1); /* its WAIT could not start */
}

/* store_seg_keys writes what snprintf of "inv:2:{<sku>/<k>}:<name>" would, cut where it cuts. */
static void test_seg_keys(void **state)
{
    (void)state;
    char long_sku[301];
    memset(long_sku, 'x', 300);
    long_sku[300] = '\0';
    const char *skus[] = {"lc",
                          "a",
                          "sku.with-dots_1",
                          long_sku + 300 - 64,
                          long_sku + 300 - 240,
                          long_sku + 300 - 245,
                          long_sku};
    const int ks[] = {0, 7, 1023};
    for (size_t i = 0; i < sizeof(skus) / sizeof(skus[0]); i++)
        for (size_t j = 0; j < sizeof(ks) / sizeof(ks[0]); j++) {
            struct seg_keys sk;
            memset(&sk, '?', sizeof(sk));
            store_seg_keys(skus[i], ks[j], &sk);
            char want[STORE_KEY_MAX];
#define SAME(field)                                                                                \
    snprintf(want, sizeof(want), "inv:2:{%s/%d}:%s", skus[i], ks[j], #field);                      \
    assert_string_equal(sk.field, want)
            SAME(stock);
            SAME(sver);
            SAME(cnt);
            SAME(orders);
            SAME(idem);
            SAME(rst);
            SAME(lock);
            SAME(due);
            SAME(give);
            SAME(log);
            SAME(follow);
            SAME(rver);
            SAME(undone);
#undef SAME
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_script_start_failure_deferred, setup, teardown),
        cmocka_unit_test_setup_teardown(test_command_start_failure_deferred, setup, teardown),
        cmocka_unit_test_setup_teardown(test_command_without_request, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_start_failures_deferred, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_ref_start_failure_deferred, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_conns_answered_next_turn, setup, teardown),
        cmocka_unit_test(test_seg_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
