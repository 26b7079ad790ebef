/*
 * Order-log entries as inventory-sink reads them (service/src/sink/sink_entry.c): the fields of
 * orderlog.h parsed; a malformed entry is marked (not ok, with the reason) rather than written;
 * a stream id is "<ms>-<seq>"; an extension's entry ("extended", with its new expiry) leaves
 * its order reserved.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "sink_entry.h"

static redisReply *reply_str(const char *s)
{
    redisReply *r = calloc(1, sizeof *r);
    r->type = REDIS_REPLY_STRING;
    r->str = strdup(s);
    r->len = strlen(s);
    return r;
}

/* [id, [k1, v1, ...]] from a NULL-terminated list; fields NULL: a nil (deleted entry). */
static redisReply *entry(const char *id, const char *const *fields)
{
    redisReply *e = calloc(1, sizeof *e);
    e->type = REDIS_REPLY_ARRAY;
    e->elements = 2;
    e->element = calloc(2, sizeof *e->element);
    e->element[0] = reply_str(id);
    redisReply *f = calloc(1, sizeof *f);
    if (fields == NULL) {
        f->type = REDIS_REPLY_NIL;
    } else {
        f->type = REDIS_REPLY_ARRAY;
        size_t n = 0;
        while (fields[n] != NULL)
            n++;
        f->elements = n;
        f->element = calloc(n ? n : 1, sizeof *f->element);
        for (size_t i = 0; i < n; i++)
            f->element[i] = reply_str(fields[i]);
    }
    e->element[1] = f;
    return e;
}

static void test_stream_ids(void **state)
{
    (void)state;
    unsigned long long ms, seq;
    assert_int_equal(sink_entry_parse_id("1764000000000-12", &ms, &seq), 0);
    assert_true(ms == 1764000000000ULL && seq == 12);
    static const char *const bad[] = {"", "12", "-1-2", "1-", "1-x", "a-1", "1-2-3", " 1-2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(sink_entry_parse_id(bad[i], &ms, &seq), -1);
}

static void test_a_good_entry(void **state)
{
    (void)state;
    const char *f[] = {"event",   "confirmed", "order", "abc-1-S",  "sku", "S",  "segment",
                       "1",       "user",      "u7",    "quantity", "3",   "at", "1764000000123",
                       "version", "42",        NULL};
    redisReply *e = entry("1764000000123-0", f);
    struct sink_entry out;
    assert_int_equal(sink_entry_parse(e, 5, "S", 1, &out), 0);
    assert_int_equal(out.ok, 1);
    assert_int_equal(out.stream, 5);
    assert_string_equal(out.event, "confirmed");
    assert_string_equal(out.order, "abc-1-S");
    assert_string_equal(out.user, "u7");
    assert_int_equal(out.quantity, 3);
    assert_true(out.at == 1764000000123LL && out.version == 42);
    assert_string_equal(out.id, "1764000000123-0");
    freeReplyObject(e);
    /* no user field at all: none */
    const char *g[] = {"event", "created", "order",   "o", "quantity", "1",
                       "at",    "1",       "version", "1", NULL};
    e = entry("1-1", g);
    assert_int_equal(sink_entry_parse(e, 0, "S", 0, &out), 0);
    assert_int_equal(out.ok, 1);
    assert_string_equal(out.user, "");
    freeReplyObject(e);
}

static void test_malformed_entries_are_marked(void **state)
{
    (void)state;
    static const struct {
        const char *f[13];
        const char *why;
    } bad[] = {
        {{"event", "shipped", "order", "o", "quantity", "1", "at", "1", "version", "1"},
         "unknown event"},
        {{"event", "created", "order", "o", "quantity", "1.0", "at", "1", "version", "1"},
         "quantity"},
        {{"event", "created", "order", "o", "quantity", "-1", "at", "1", "version", "1"},
         "quantity"},
        {{"event", "created", "order", "o", "quantity", "1", "at", "1e3", "version", "1"}, "at"},
        {{"event", "created", "order", "", "quantity", "1", "at", "1", "version", "1"}, "order"},
        {{"event", "created", "quantity", "1", "at", "1", "version", "1"}, "missing"},
        {{"event", "created", "order", "o", "quantity", "1", "at", "1"}, "missing"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        redisReply *e = entry("5-0", bad[i].f);
        struct sink_entry out;
        assert_int_equal(sink_entry_parse(e, 0, "S", 0, &out), 0);
        if (out.ok || strstr(out.why, bad[i].why) == NULL)
            fail_msg("case %zu: ok %d, why \"%s\" (expected \"%s\")", i, out.ok, out.why,
                     bad[i].why);
        assert_string_equal(out.id, "5-0"); /* still acknowledged by its id */
        freeReplyObject(e);
    }
    redisReply *e = entry("6-0", NULL); /* deleted from the stream: nil fields */
    struct sink_entry out;
    assert_int_equal(sink_entry_parse(e, 0, "S", 0, &out), 0);
    assert_int_equal(out.ok, 0);
    freeReplyObject(e);
    redisReply *s = reply_str("not an entry");
    assert_int_equal(sink_entry_parse(s, 0, "S", 0, &out), -1);
    freeReplyObject(s);
}

/* A hold's extension (extend.lua's log_extended): event "extended" with the new expiry in
 * `expires`; its order's status stays reserved. An extension without `expires`, a bad one, or
 * `expires` on another event is malformed. */
static void test_extended(void **state)
{
    (void)state;
    const char *f[] = {"event", "extended", "order", "o-1-S",   "quantity",      "2", "at",
                       "1000",  "version",  "7",     "expires", "1764000060123", NULL};
    redisReply *e = entry("1-0", f);
    struct sink_entry out;
    assert_int_equal(sink_entry_parse(e, 0, "S", 1, &out), 0);
    assert_int_equal(out.ok, 1);
    assert_string_equal(out.event, "extended");
    assert_true(out.expires == 1764000060123LL);
    assert_string_equal(sink_entry_status(&out), "reserved");
    freeReplyObject(e);
    const char *g[] = {"event", "reserved", "order",   "o-1-S", "quantity", "2",
                       "at",    "1000",     "version", "7",     NULL};
    e = entry("1-1", g);
    assert_int_equal(sink_entry_parse(e, 0, "S", 1, &out), 0);
    assert_true(out.ok && out.expires == 0);
    assert_string_equal(sink_entry_status(&out), "reserved");
    freeReplyObject(e);
    static const struct {
        const char *f[13];
        const char *why;
    } bad[] = {
        {{"event", "extended", "order", "o", "quantity", "1", "at", "1", "version", "1"},
         "without its expires"},
        {{"event", "extended", "order", "o", "quantity", "1", "at", "1", "version", "1", "expires",
          "soon"},
         "expires"},
        {{"event", "extended", "order", "o", "quantity", "1", "at", "1", "version", "1", "expires",
          "0"},
         "expires"},
        {{"event", "confirmed", "order", "o", "quantity", "1", "at", "1", "version", "1", "expires",
          "5"},
         "not extended"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        e = entry("5-0", bad[i].f);
        assert_int_equal(sink_entry_parse(e, 0, "S", 0, &out), 0);
        if (out.ok || strstr(out.why, bad[i].why) == NULL)
            fail_msg("case %zu: ok %d, why \"%s\" (expected \"%s\")", i, out.ok, out.why,
                     bad[i].why);
        freeReplyObject(e);
    }
}

/* A multi-segment order's entry: parts "k:q,..." kept and turned into the orders row's JSON; a
 * one-segment order's JSON is its one part; parts out of order, not from the entry's segment,
 * not summing to its quantity or badly written make the entry malformed. */
static void test_parts(void **state)
{
    (void)state;
    const char *f[] = {"event",       "created", "order", "o-2-S",   "quantity", "12", "parts",
                       "2:5,4:4,9:3", "at",      "1",     "version", "1",        NULL};
    redisReply *e = entry("7-0", f);
    struct sink_entry out;
    char json[SINK_PARTS_JSON_MAX];
    assert_int_equal(sink_entry_parse(e, 0, "S", 2, &out), 0);
    assert_int_equal(out.ok, 1);
    assert_string_equal(out.parts, "2:5,4:4,9:3");
    sink_entry_parts_json(&out, json, sizeof json);
    assert_string_equal(json, "[{\"segment\":2,\"quantity\":5},{\"segment\":4,\"quantity\":4},"
                              "{\"segment\":9,\"quantity\":3}]");
    freeReplyObject(e);
    const char *g[] = {"event", "created", "order",   "o-3-S", "quantity", "7",
                       "at",    "1",       "version", "1",     NULL};
    e = entry("7-1", g);
    assert_int_equal(sink_entry_parse(e, 0, "S", 3, &out), 0);
    assert_int_equal(out.ok, 1);
    assert_string_equal(out.parts, "");
    sink_entry_parts_json(&out, json, sizeof json);
    assert_string_equal(json, "[{\"segment\":3,\"quantity\":7}]");
    freeReplyObject(e);
    /* one part, the entry's own segment and quantity: the same as no field */
    const char *h1[] = {"event", "created", "order", "o-2-S",   "quantity", "12", "parts",
                        "2:12",  "at",      "1",     "version", "1",        NULL};
    e = entry("7-2", h1);
    assert_int_equal(sink_entry_parse(e, 0, "S", 2, &out), 0);
    assert_int_equal(out.ok, 1);
    sink_entry_parts_json(&out, json, sizeof json);
    assert_string_equal(json, "[{\"segment\":2,\"quantity\":12}]");
    freeReplyObject(e);
    static const char *const bad[] = {
        "2:5,4:4,9:2",  "4:4,2:5,9:3", "3:5,4:4,9:3", "2:11",        "3:12", "2:5,,4:4,9:3",
        "2:5,4:4,9:3,", "2:5,4:0,9:7", "2:5,4:x,9:3", "2:5;4:4;9:3", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *h[] = {"event", "created", "order", "o-2-S",   "quantity", "12", "parts",
                           bad[i],  "at",      "1",     "version", "1",        NULL};
        e = entry("8-0", h);
        assert_int_equal(sink_entry_parse(e, 0, "S", 2, &out), 0);
        if (out.ok || strstr(out.why, "parts") == NULL)
            fail_msg("parts \"%s\": ok %d, why \"%s\"", bad[i], out.ok, out.why);
        freeReplyObject(e);
    }
}

/* A cart's entry (orderlog.h items): kept, and its parts read back as order_items rows in
 * every SKU; a single-SKU entry's rows are its parts, or its segment and quantity; items that
 * do not start with the entry's own part, whose home parts are not the entry's parts, that name
 * a part twice or are badly written make the entry malformed. */
static void test_items(void **state)
{
    (void)state;
    const char *f[] = {"event", "created", "order",   "o-2-S", "quantity",
                       "5",     "parts",   "2:4,3:1", "items", "S:2:4,S:3:1,T:x:0:2",
                       "at",    "1",       "version", "1",     NULL};
    redisReply *e = entry("9-0", f);
    struct sink_entry out;
    assert_int_equal(sink_entry_parse(e, 0, "S", 2, &out), 0);
    assert_int_equal(out.ok, 1);
    assert_string_equal(out.items, "S:2:4,S:3:1,T:x:0:2");
    const char *pos = NULL;
    char sku[65], got[256] = "";
    int k, n = 0;
    long long q;
    while (sink_entry_next_item(&out, &pos, sku, sizeof sku, &k, &q) == 1)
        n += snprintf(got + n, sizeof got - (size_t)n, "%s/%d/%lld;", sku, k, q);
    assert_string_equal(got, "S/2/4;S/3/1;T:x/0/2;");
    freeReplyObject(e);
    /* single-SKU: its parts, or its one segment */
    const char *g[] = {"event",   "created", "order", "o-2-S",   "quantity", "5", "parts",
                       "2:4,3:1", "at",      "1",     "version", "1",        NULL};
    e = entry("9-1", g);
    assert_int_equal(sink_entry_parse(e, 0, "S", 2, &out), 0);
    assert_int_equal(out.ok, 1);
    assert_string_equal(out.items, "");
    pos = NULL;
    n = 0;
    while (sink_entry_next_item(&out, &pos, sku, sizeof sku, &k, &q) == 1)
        n += snprintf(got + n, sizeof got - (size_t)n, "%s/%d/%lld;", sku, k, q);
    assert_string_equal(got, "S/2/4;S/3/1;");
    freeReplyObject(e);
    const char *h[] = {"event", "created", "order",   "o-2-S", "quantity", "5",
                       "at",    "1",       "version", "1",     NULL};
    e = entry("9-2", h);
    assert_int_equal(sink_entry_parse(e, 0, "S", 2, &out), 0);
    pos = NULL;
    n = 0;
    while (sink_entry_next_item(&out, &pos, sku, sizeof sku, &k, &q) == 1)
        n += snprintf(got + n, sizeof got - (size_t)n, "%s/%d/%lld;", sku, k, q);
    assert_string_equal(got, "S/2/5;");
    freeReplyObject(e);
    static const char *const bad[] = {"T:0:2,S:2:4,S:3:1",
                                      "S:3:1,S:2:4,T:0:2",
                                      "S:2:4,T:0:2",
                                      "S:2:4,S:3:2,T:0:2",
                                      "S:2:4,S:3:1,T:0:2,T:0:1",
                                      "S:2:4,S:3:1,T:0:2,",
                                      "S:2:4,S:3:1,T:0:0",
                                      "S:2:4;S:3:1",
                                      ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *b[] = {"event", "created", "order",   "o-2-S", "quantity",
                           "5",     "parts",   "2:4,3:1", "items", bad[i],
                           "at",    "1",       "version", "1",     NULL};
        e = entry("9-3", b);
        assert_int_equal(sink_entry_parse(e, 0, "S", 2, &out), 0);
        if (out.ok || strstr(out.why, "items") == NULL)
            fail_msg("items \"%s\": ok %d, why \"%s\"", bad[i], out.ok, out.why);
        freeReplyObject(e);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_ids),
        cmocka_unit_test(test_a_good_entry),
        cmocka_unit_test(test_malformed_entries_are_marked),
        cmocka_unit_test(test_parts),
        cmocka_unit_test(test_extended),
        cmocka_unit_test(test_items),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
