/*
 * Unit tests of the Redis Cluster routing's pure parts (no server): cluster_slots.c (CRC16, key
 * slots and hash tags, CLUSTER SLOTS parsing, redirection errors, command keys), cluster_route.c
 * (the routing table) and the redis-cluster:// URL form of url.c. The same functions are checked
 * against a real cluster by it_cluster.c.
 */
#include "lc_test.h"

#include "base_internal.h"
#include "cluster_internal.h"

/* ---- hand-built replies (freed with freeReplyObject, as hiredis' own) ---- */

static redisReply *mk(int type)
{
    redisReply *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    r->type = type;
    return r;
}

static redisReply *mk_int(long long v)
{
    redisReply *r = mk(REDIS_REPLY_INTEGER);
    r->integer = v;
    return r;
}

static redisReply *mk_str(const char *s)
{
    redisReply *r = mk(REDIS_REPLY_STRING);
    r->str = strdup(s);
    r->len = strlen(s);
    return r;
}

/* An array of n replies given as arguments. */
static redisReply *mk_arr(size_t n, ...)
{
    redisReply *r = mk(REDIS_REPLY_ARRAY);
    r->elements = n;
    r->element = calloc(n ? n : 1, sizeof(*r->element));
    va_list ap;
    va_start(ap, n);
    for (size_t i = 0; i < n; i++)
        r->element[i] = va_arg(ap, redisReply *);
    va_end(ap);
    return r;
}

/* A node entry as Redis 7 sends it: host, port, id, metadata (an empty array in RESP2). */
static redisReply *mk_node(const char *host, long long port, const char *id)
{
    return mk_arr(4, mk_str(host), mk_int(port), mk_str(id), mk_arr(0));
}

/* ---- CRC16 and slots ---- */

/* The check value of CRC-16/XMODEM, and slots that Redis's documentation and CLUSTER KEYSLOT
 * give for these keys. */
static void test_crc16_and_known_slots(void **state)
{
    (void)state;
    assert_int_equal(lc_crc16("123456789", 9), 0x31C3);
    assert_int_equal(lc_crc16("", 0), 0);
    assert_int_equal(lc_key_slot("foo", 3), 12182);
    assert_int_equal(lc_key_slot("somekey", 7), 11058);
    assert_int_equal(lc_key_slot("foo{hash_tag}", 13), 2515);
    assert_int_equal(lc_key_slot("", 0), 0);
}

static int slot_of(const char *k)
{
    return lc_key_slot(k, strlen(k));
}

/* Hash tags: the first {…} that is not empty decides; otherwise the whole key. */
static void test_hash_tags(void **state)
{
    (void)state;
    assert_int_equal(slot_of("{user1000}.following"), slot_of("user1000"));
    assert_int_equal(slot_of("{user1000}.followers"), slot_of("user1000"));
    assert_int_equal(slot_of("foo{bar}{zap}"), slot_of("bar"));
    assert_int_equal(slot_of("foo{{bar}}zap"), slot_of("{bar"));
    assert_int_equal(slot_of("foo{}{bar}"), lc_crc16("foo{}{bar}", 10) & 16383);
    assert_int_equal(slot_of("foo{bar"), lc_crc16("foo{bar", 7) & 16383);
    assert_int_equal(slot_of("foo}bar{"), lc_crc16("foo}bar{", 8) & 16383);
    /* inventoryd's segment keys: every key of a segment in one slot, segments apart. */
    int lock = slot_of("inv:2:{sku-1/3}:lock");
    assert_int_equal(slot_of("inv:2:{sku-1/3}:stock"), lock);
    assert_int_equal(slot_of("inv:2:{sku-1/3}:lock:fence"), lock);
    assert_int_equal(slot_of("inv:2:{sku-1/3}:orders"), lock);
    assert_int_not_equal(slot_of("inv:2:{sku-1/4}:stock"), lock);
    /* A binary key with a NUL inside: the length counts, not strlen. */
    assert_int_equal(lc_key_slot("a\0b", 3), lc_crc16("a\0b", 3) & 16383);
    assert_int_not_equal(lc_key_slot("a\0b", 3), lc_key_slot("a", 1));
}

/* ---- CLUSTER SLOTS ---- */

static void test_slotmap_parse(void **state)
{
    (void)state;
    redisReply *r = mk_arr(3,
                           mk_arr(4, mk_int(0), mk_int(5460), mk_node("127.0.0.1", 7001, "a"),
                                  mk_node("127.0.0.1", 7004, "d")),
                           mk_arr(4, mk_int(5461), mk_int(10922), mk_node("", 7002, "b"),
                                  mk_node("127.0.0.1", 7005, "e")),
                           mk_arr(3, mk_int(10923), mk_int(16383), mk_node("?", 7003, "c")));
    lc_slotmap m;
    assert_ok(lc_slotmap_parse(r, "10.0.0.9", &m));
    assert_int_equal(m.n, 3);
    assert_int_equal(m.ranges[0].start, 0);
    assert_int_equal(m.ranges[0].end, 5460);
    assert_string_equal(m.ranges[0].host, "127.0.0.1");
    assert_int_equal(m.ranges[0].port, 7001);
    assert_string_equal(m.ranges[1].host, "10.0.0.9"); /* "" = the node that answered */
    assert_int_equal(m.ranges[1].port, 7002);
    assert_string_equal(m.ranges[2].host, "10.0.0.9"); /* "?" likewise */
    assert_int_equal(m.ranges[2].start, 10923);
    assert_int_equal(m.ranges[2].end, 16383);
    lc_slotmap_clear(&m);
    assert_int_equal(m.n, 0);
    assert_null(m.ranges);
    freeReplyObject(r);

    /* No slot assigned yet: an empty map, not an error. */
    r = mk_arr(0);
    assert_ok(lc_slotmap_parse(r, "h", &m));
    assert_int_equal(m.n, 0);
    lc_slotmap_clear(&m);
    freeReplyObject(r);
}

/* Every malformed reply is LC_EINVAL and leaves the map empty. */
static void test_slotmap_parse_bad(void **state)
{
    (void)state;
    redisReply *bad[] = {
        mk_str("not an array"),
        mk_arr(1, mk_arr(2, mk_int(0), mk_int(10))),                          /* no node */
        mk_arr(1, mk_arr(3, mk_int(10), mk_int(5), mk_node("h", 1, "x"))),    /* start > end */
        mk_arr(1, mk_arr(3, mk_int(0), mk_int(16384), mk_node("h", 1, "x"))), /* past 16383 */
        mk_arr(1, mk_arr(3, mk_int(-1), mk_int(5), mk_node("h", 1, "x"))),    /* negative */
        mk_arr(1, mk_arr(3, mk_int(0), mk_int(5), mk_node("h", 0, "x"))),     /* port 0 */
        mk_arr(1, mk_arr(3, mk_int(0), mk_int(5), mk_node("h", 65536, "x"))), /* port too big */
        mk_arr(1, mk_arr(3, mk_int(0), mk_int(5), mk_arr(2, mk_int(1), mk_int(2)))), /* host */
        mk_arr(1, mk_arr(3, mk_str("0"), mk_int(5), mk_node("h", 1, "x"))), /* start a string */
        mk_arr(1, mk_arr(3, mk_int(0), mk_int(5), mk_arr(1, mk_str("h")))), /* no port */
        mk_arr(2, mk_arr(3, mk_int(0), mk_int(5), mk_node("h", 1, "x")), mk_int(3)),
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lc_slotmap m = {7, (lc_slot_range *)&m};
        if (lc_slotmap_parse(bad[i], "h", &m) != LC_EINVAL)
            fail_msg("malformed reply %zu was accepted", i);
        assert_int_equal(m.n, 0);
        assert_null(m.ranges);
        freeReplyObject(bad[i]);
    }
    lc_slotmap m;
    assert_status(lc_slotmap_parse(NULL, "h", &m), LC_EINVAL);
    /* An empty host with no host to fall back on. */
    redisReply *r = mk_arr(1, mk_arr(3, mk_int(0), mk_int(5), mk_node("", 1, "x")));
    assert_status(lc_slotmap_parse(r, NULL, &m), LC_EINVAL);
    freeReplyObject(r);
}

/* ---- redirections ---- */

static lc_redirect_kind redirect(const char *err, lc_redirect *out)
{
    return lc_redirect_parse(err, strlen(err), "10.1.1.1", out);
}

static void test_redirect_parse(void **state)
{
    (void)state;
    lc_redirect rd;
    assert_int_equal(redirect("MOVED 3999 127.0.0.1:6381", &rd), LC_REDIRECT_MOVED);
    assert_int_equal(rd.slot, 3999);
    assert_string_equal(rd.host, "127.0.0.1");
    assert_int_equal(rd.port, 6381);
    assert_int_equal(redirect("ASK 16383 redis-3.local:7000", &rd), LC_REDIRECT_ASK);
    assert_int_equal(rd.slot, 16383);
    assert_string_equal(rd.host, "redis-3.local");
    assert_int_equal(rd.port, 7000);
    assert_int_equal(redirect("MOVED 0 :6380", &rd), LC_REDIRECT_MOVED); /* unknown endpoint */
    assert_string_equal(rd.host, "10.1.1.1");
    assert_int_equal(rd.port, 6380);
    assert_int_equal(redirect("MOVED 12 ::1:6380", &rd), LC_REDIRECT_MOVED); /* IPv6 */
    assert_string_equal(rd.host, "::1");
    assert_int_equal(rd.port, 6380);
    assert_int_equal(redirect("ASK 12 [fe80::1]:7001\r\n", &rd), LC_REDIRECT_ASK);
    assert_string_equal(rd.host, "fe80::1");
    assert_int_equal(rd.port, 7001);
    assert_int_equal(redirect("TRYAGAIN Multiple keys request during rehashing of slot", &rd),
                     LC_REDIRECT_TRYAGAIN);
    assert_int_equal(redirect("TRYAGAIN", &rd), LC_REDIRECT_TRYAGAIN);
    assert_int_equal(redirect("CLUSTERDOWN The cluster is down", &rd), LC_REDIRECT_CLUSTERDOWN);
    assert_int_equal(redirect("CLUSTERDOWN Hash slot not served", &rd), LC_REDIRECT_CLUSTERDOWN);

    static const char *const none[] = {
        "ERR unknown command",
        "MOVED",
        "MOVED 3999",
        "MOVED 3999 host",
        "MOVED 16384 h:1",
        "MOVED x h:1",
        "MOVED 1 h:",
        "MOVED 1 h:70000",
        "MOVED 1 h:0",
        "MOVED 1 h:12a",
        "MOVED -1 h:1",
        "MOVEDX 1 h:1",
        "ASK 1",
        "TRYAGAINX",
        "CLUSTERDOWNX",
        "NOSCRIPT No matching",
        "WRONGTYPE Operation",
        "moved 1 h:1",
        "",
    };
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        if (redirect(none[i], &rd) != LC_REDIRECT_NONE)
            fail_msg("\"%s\" taken for a redirection", none[i]);
    assert_int_equal(lc_redirect_parse(NULL, 0, "h", &rd), LC_REDIRECT_NONE);
    /* An empty host and nothing to fall back on. */
    assert_int_equal(lc_redirect_parse("MOVED 1 :7000", 13, NULL, &rd), LC_REDIRECT_NONE);
}

/* ---- command keys ---- */

static int key_of(int argc, ...)
{
    const char *argv[16];
    va_list ap;
    va_start(ap, argc);
    for (int i = 0; i < argc; i++)
        argv[i] = va_arg(ap, const char *);
    va_end(ap);
    return lc_command_key(argc, argv, NULL);
}

static void test_command_key(void **state)
{
    (void)state;
    assert_int_equal(key_of(2, "GET", "k"), 1);
    assert_int_equal(key_of(3, "hset", "k", "f"), 1);
    assert_int_equal(key_of(5, "EVALSHA", "abc", "2", "k1", "k2"), 3);
    assert_int_equal(key_of(4, "eval", "return 1", "1", "k1"), 3);
    assert_int_equal(key_of(4, "FCALL", "f", "1", "k1"), 3);
    assert_int_equal(key_of(4, "EVALSHA", "abc", "0", "a"), -1);
    assert_int_equal(key_of(3, "EVALSHA", "abc", "1"), -1);  /* numkeys but no key */
    assert_int_equal(key_of(4, "EVAL", "s", "x1", "k"), -1); /* numkeys not a number */
    assert_int_equal(key_of(1, "PING"), -1);
    assert_int_equal(key_of(3, "wait", "1", "100"), -1);
    assert_int_equal(key_of(2, "CLUSTER", "SLOTS"), -1);
    assert_int_equal(key_of(3, "PUBLISH", "ch", "m"), -1);
    assert_int_equal(key_of(2, "INFO", "replication"), -1);
    assert_int_equal(key_of(3, "OBJECT", "ENCODING", "k"), 2);
    assert_int_equal(key_of(2, "OBJECT", "HELP"), -1);
    assert_int_equal(key_of(1, "DEL"), -1);
    const char *bin[2] = {"GETX", "k"};
    size_t lens[2] = {3, 1}; /* "GET", not "GETX" */
    assert_int_equal(lc_command_key(2, bin, lens), 1);
    assert_int_equal(lc_command_key(0, bin, NULL), -1);
}

/* ---- the routing table ---- */

static void test_route(void **state)
{
    (void)state;
    const char *hosts[2] = {"127.0.0.1", "127.0.0.1"};
    int ports[2] = {7001, 7002};
    lc_route *rt = lc_route_new(2, hosts, ports);
    assert_non_null(rt);
    assert_int_equal(lc_route_nodes(rt), 2);
    assert_int_equal(lc_route_node(rt, "127.0.0.1", 7002), 1); /* known: same index */
    assert_int_equal(lc_route_known(rt), 0);
    assert_int_equal(lc_route_slot(rt, 5), -1);
    assert_int_equal(lc_route_slot(rt, -1), -1);
    assert_int_equal(lc_route_slot(rt, 16384), -1);

    lc_slot_range ranges[2] = {{0, 8191, "127.0.0.1", 7002}, {8192, 16000, "127.0.0.1", 7003}};
    lc_slotmap m = {2, ranges};
    assert_int_equal(lc_route_apply(rt, &m), 16001);
    assert_int_equal(lc_route_nodes(rt), 3); /* 7003 added */
    assert_int_equal(lc_route_known(rt), 16001);
    assert_int_equal(lc_route_slot(rt, 0), 1);
    assert_int_equal(lc_route_slot(rt, 8192), 2);
    assert_int_equal(lc_route_port(rt, 2), 7003);
    assert_int_equal(lc_route_slot(rt, 16001), -1); /* not covered */

    /* The same map again changes nothing; a failover moves one range to a new node. */
    assert_int_equal(lc_route_apply(rt, &m), 0);
    lc_slot_range after[2] = {{0, 8191, "127.0.0.1", 7005}, {8192, 16383, "127.0.0.1", 7003}};
    lc_slotmap m2 = {2, after};
    assert_int_equal(lc_route_apply(rt, &m2), 8192 + 383);
    assert_int_equal(lc_route_slot(rt, 100), 3);
    assert_string_equal(lc_route_host(rt, 3), "127.0.0.1");
    assert_int_equal(lc_route_port(rt, 3), 7005);

    /* The masters: nodes 2 (7003, from 8192) and 3 (7005, from 0); 0 and 1 serve nothing. */
    int slots[8];
    assert_int_equal(lc_route_master_slots(rt, slots, 8), 2);
    assert_int_equal(slots[0], 8192);
    assert_int_equal(slots[1], 0);
    assert_int_equal(lc_route_master_slots(rt, slots, 1), 1); /* at most max */

    /* A MOVED corrects one slot. */
    lc_route_set_slot(rt, 100, 0);
    assert_int_equal(lc_route_slot(rt, 100), 0);
    assert_int_equal(lc_route_slot(rt, 101), 3);
    assert_int_equal(lc_route_master_slots(rt, slots, 8), 3); /* node 0 serves slot 100 now */
    assert_int_equal(slots[0], 100);
    lc_route_set_slot(rt, 100, 99); /* no such node: ignored */
    assert_int_equal(lc_route_slot(rt, 100), 0);

    /* An empty map forgets every slot. */
    lc_slotmap none = {0, NULL};
    assert_int_equal(lc_route_apply(rt, &none), 16384);
    assert_int_equal(lc_route_known(rt), 0);
    assert_int_equal(lc_route_master_slots(rt, slots, 8), 0);
    lc_route_free(rt);
    lc_route_free(NULL);
    assert_null(lc_route_new(0, hosts, ports));
}

/* ---- redis-cluster:// URLs ---- */

static void test_cluster_url(void **state)
{
    (void)state;
    lc_url u;
    assert_ok(lc_url_parse("redis-cluster://127.0.0.1:7001,127.0.0.1:7002,[::1]:7003,h", &u));
    assert_int_equal(u.cluster, 1);
    assert_int_equal(u.nseeds, 4);
    assert_string_equal(u.seeds[0].host, "127.0.0.1");
    assert_int_equal(u.seeds[0].port, 7001);
    assert_int_equal(u.seeds[1].port, 7002);
    assert_string_equal(u.seeds[2].host, "::1");
    assert_int_equal(u.seeds[2].port, 7003);
    assert_string_equal(u.seeds[3].host, "h");
    assert_int_equal(u.seeds[3].port, 6379);
    assert_string_equal(u.host, "127.0.0.1"); /* the first seed */
    assert_int_equal(u.port, 7001);

    assert_ok(lc_url_parse("redis-cluster://us%40r:p%3Aw@10.0.0.1:7000/0", &u));
    assert_string_equal(u.user, "us@r");
    assert_string_equal(u.password, "p:w");
    assert_int_equal(u.nseeds, 1);
    assert_int_equal(u.db, 0);
    assert_ok(lc_url_parse("redis-cluster://:secret@a:1,b:2/", &u));
    assert_string_equal(u.password, "secret");
    assert_int_equal(u.nseeds, 2);

    assert_ok(lc_url_parse("redis://127.0.0.1:6379/2", &u));
    assert_int_equal(u.cluster, 0);
    assert_int_equal(u.db, 2);

    static const char *const bad[] = {
        "redis-cluster://",        "redis-cluster://a:1,",      "redis-cluster://a:1,,b:2",
        "redis-cluster://a:1/1",   "redis-cluster://a:0",       "redis-cluster://a:1,b:x",
        "redis-cluster://a b:1",   "redis-cluster://[::1:7000", "rediscluster://a:1",
        "redis-cluster://a:1/0/x",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (lc_url_parse(bad[i], &u) != LC_EINVAL)
            fail_msg("bad URL %s accepted", bad[i]);
    char many[1024] = "redis-cluster://";
    for (int i = 0; i <= LC_URL_SEEDS_MAX; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%sh%d:1", i ? "," : "", i);
    assert_status(lc_url_parse(many, &u), LC_EINVAL);

    /* The blocking client speaks to one Redis: it refuses cluster URLs. */
    lc_client *c = (lc_client *)&u;
    assert_status(lc_client_new("redis-cluster://127.0.0.1:7001", NULL, &c), LC_EINVAL);
    assert_null(c);
    assert_non_null(strstr(lc_errmsg(), "asynchronous"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc16_and_known_slots),
        cmocka_unit_test(test_hash_tags),
        cmocka_unit_test(test_slotmap_parse),
        cmocka_unit_test(test_slotmap_parse_bad),
        cmocka_unit_test(test_redirect_parse),
        cmocka_unit_test(test_command_key),
        cmocka_unit_test(test_route),
        cmocka_unit_test(test_cluster_url),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
