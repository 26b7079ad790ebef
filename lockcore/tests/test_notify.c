/*
 * Unit tests of the unlock listener's bookkeeping (notify.c) without Redis: a detached listener
 * queues the (UN)SUBSCRIBEs it would send (lc_notify_take plays the connection) and is fed the
 * confirmations Redis would send back, in order (lc_notify_push). A waiter may only count as
 * subscribed once Redis confirmed *its* SUBSCRIBE: a confirmation of an earlier one, followed by
 * an UNSUBSCRIBE still on its way, would let an unlock published in between go unnoticed.
 */
#include "lc_test.h"

#include "notify_internal.h"

static const char CH[] = "lock:unlock";

/* Feeds one push message {kind, channel, 1} as Redis sends it on a pub/sub connection. */
static void push(lc_notify *n, const char *kind, const char *channel)
{
    redisReply e[3];
    redisReply *els[3] = {&e[0], &e[1], &e[2]};
    memset(e, 0, sizeof e);
    e[0].type = REDIS_REPLY_STRING;
    e[0].str = (char *)kind;
    e[0].len = strlen(kind);
    e[1].type = REDIS_REPLY_STRING;
    e[1].str = (char *)channel;
    e[1].len = strlen(channel);
    e[2].type = REDIS_REPLY_INTEGER;
    e[2].integer = 1;
    redisReply r;
    memset(&r, 0, sizeof r);
    r.type = REDIS_REPLY_ARRAY;
    r.elements = 3;
    r.element = els;
    lc_notify_push(n, &r);
}

/* The listener's next command is (UN)SUBSCRIBE channel. */
static void expect_sent(lc_notify *n, int subscribe, const char *channel)
{
    int sub = -1;
    char name[64] = "";
    if (!lc_notify_take(n, &sub, name, sizeof name))
        fail_msg("expected %s %s, nothing queued", subscribe ? "SUBSCRIBE" : "UNSUBSCRIBE",
                 channel);
    if (sub != subscribe || strcmp(name, channel) != 0)
        fail_msg("expected %s %s, got %s %s", subscribe ? "SUBSCRIBE" : "UNSUBSCRIBE", channel,
                 sub ? "SUBSCRIBE" : "UNSUBSCRIBE", name);
}

static void expect_nothing_sent(lc_notify *n)
{
    int sub;
    char name[64];
    assert_false(lc_notify_take(n, &sub, name, sizeof name));
}

/* One waiter: subscribed once its SUBSCRIBE is confirmed; leaving sends the UNSUBSCRIBE. */
static void test_subscribe_confirmed(void **state)
{
    (void)state;
    lc_notify *n = lc_notify_new_detached();
    assert_non_null(n);
    lc_sub *a = lc_notify_sub_begin(n, CH);
    assert_non_null(a);
    expect_sent(n, 1, CH);
    assert_false(lc_notify_sub_ready(a));
    push(n, "subscribe", CH);
    assert_true(lc_notify_sub_ready(a));
    /* A second waiter shares the subscription: nothing to send, ready at once. */
    lc_sub *b = lc_notify_sub_begin(n, CH);
    expect_nothing_sent(n);
    assert_true(lc_notify_sub_ready(b));
    lc_notify_unsubscribe(a);
    expect_nothing_sent(n);
    lc_notify_unsubscribe(b);
    expect_sent(n, 0, CH);
    push(n, "unsubscribe", CH);
    expect_nothing_sent(n);
    lc_notify_free(n);
}

/*
 * The race: waiter A leaves (UNSUBSCRIBE 1 on the wire), waiter B comes (SUBSCRIBE 2) and gives
 * up before its confirmation (UNSUBSCRIBE 2). When UNSUBSCRIBE 1 is confirmed, waiter C comes
 * (SUBSCRIBE 3). The confirmation of SUBSCRIBE 2 must not make C ready: UNSUBSCRIBE 2 is still
 * ahead of C's own SUBSCRIBE, and an unlock published between them would be missed. Only the
 * confirmation of SUBSCRIBE 3 does. (Before the fix the channel was forgotten at the first
 * unsubscribe confirmation and C was ready after SUBSCRIBE 2's.)
 */
static void test_old_confirmation_does_not_count(void **state)
{
    (void)state;
    lc_notify *n = lc_notify_new_detached();
    assert_non_null(n);
    lc_sub *a = lc_notify_sub_begin(n, CH);
    expect_sent(n, 1, CH);
    push(n, "subscribe", CH);
    assert_true(lc_notify_sub_ready(a));
    lc_notify_unsubscribe(a);
    expect_sent(n, 0, CH); /* UNSUBSCRIBE 1 */

    lc_sub *b = lc_notify_sub_begin(n, CH);
    expect_sent(n, 1, CH); /* SUBSCRIBE 2 */
    assert_false(lc_notify_sub_ready(b));
    lc_notify_unsubscribe(b);
    expect_sent(n, 0, CH); /* UNSUBSCRIBE 2 */

    push(n, "unsubscribe", CH); /* confirms UNSUBSCRIBE 1 */
    lc_sub *c = lc_notify_sub_begin(n, CH);
    expect_sent(n, 1, CH); /* SUBSCRIBE 3 */
    assert_false(lc_notify_sub_ready(c));
    push(n, "subscribe", CH); /* confirms SUBSCRIBE 2 */
    assert_false(lc_notify_sub_ready(c));
    push(n, "unsubscribe", CH); /* confirms UNSUBSCRIBE 2 */
    assert_false(lc_notify_sub_ready(c));
    push(n, "subscribe", CH); /* confirms SUBSCRIBE 3 */
    assert_true(lc_notify_sub_ready(c));

    lc_notify_unsubscribe(c);
    expect_sent(n, 0, CH);
    push(n, "unsubscribe", CH);
    expect_nothing_sent(n);
    lc_notify_free(n);
}

/* A waiter that comes while the last one's UNSUBSCRIBE is on its way subscribes again and is
 * ready only after that SUBSCRIBE is confirmed, not at the unsubscribe confirmation. */
static void test_resubscribe_after_unsubscribe(void **state)
{
    (void)state;
    lc_notify *n = lc_notify_new_detached();
    assert_non_null(n);
    lc_sub *a = lc_notify_sub_begin(n, CH);
    expect_sent(n, 1, CH);
    push(n, "subscribe", CH);
    lc_notify_unsubscribe(a);
    expect_sent(n, 0, CH);
    lc_sub *b = lc_notify_sub_begin(n, CH);
    expect_sent(n, 1, CH);
    assert_false(lc_notify_sub_ready(b));
    push(n, "unsubscribe", CH);
    assert_false(lc_notify_sub_ready(b));
    push(n, "subscribe", CH);
    assert_true(lc_notify_sub_ready(b));
    lc_notify_unsubscribe(b);
    expect_sent(n, 0, CH);
    push(n, "unsubscribe", CH);
    lc_notify_free(n);
}

/* Messages wake the waiters of their channel only. */
static void test_message_wakes(void **state)
{
    (void)state;
    lc_notify *n = lc_notify_new_detached();
    assert_non_null(n);
    lc_sub *a = lc_notify_sub_begin(n, CH);
    lc_sub *b = lc_notify_sub_begin(n, "other:unlock");
    push(n, "subscribe", CH);
    push(n, "subscribe", "other:unlock");
    push(n, "message", CH);
    assert_int_equal(lc_notify_wait(a, 0), 1);
    assert_int_equal(lc_notify_wait(a, 0), 0);
    assert_int_equal(lc_notify_wait(b, 0), 0);
    lc_notify_unsubscribe(a);
    lc_notify_unsubscribe(b);
    lc_notify_free(n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_subscribe_confirmed),
        cmocka_unit_test(test_old_confirmation_does_not_count),
        cmocka_unit_test(test_resubscribe_after_unsubscribe),
        cmocka_unit_test(test_message_wakes),
    };
    return cmocka_run_group_tests_name("test_notify", tests, NULL, NULL);
}
