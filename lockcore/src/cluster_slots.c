/*
 * The pure parts of Redis Cluster routing (cluster_internal.h): the CRC16 key slot with hash
 * tags, the CLUSTER SLOTS reply parser, the MOVED/ASK/TRYAGAIN/CLUSTERDOWN classifier and the
 * key position of a command. No I/O, no state: tested on their own (test_cluster_slots.c) and
 * against a real cluster (it_cluster.c: CLUSTER KEYSLOT of 10,000 random keys).
 */
#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cluster_internal.h"
#include "base_internal.h"

static uint16_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

/* The table of the XMODEM CRC: entry b is the CRC of the byte b alone, shifted into the high
 * byte, computed bit by bit once. */
static void crc_init(void)
{
    for (unsigned b = 0; b < 256; b++) {
        uint16_t crc = (uint16_t)(b << 8);
        for (int bit = 0; bit < 8; bit++)
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
        crc_table[b] = crc;
    }
}

uint16_t lc_crc16(const char *buf, size_t len)
{
    pthread_once(&crc_once, crc_init);
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++)
        crc = (uint16_t)((crc << 8) ^ crc_table[((crc >> 8) ^ (unsigned char)buf[i]) & 0xff]);
    return crc;
}

int lc_key_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t rest = len - (size_t)(open - key) - 1;
        const char *close = memchr(open + 1, '}', rest);
        if (close && close > open + 1)
            return lc_crc16(open + 1, (size_t)(close - open - 1)) & (LC_CLUSTER_SLOTS - 1);
    }
    return lc_crc16(key, len) & (LC_CLUSTER_SLOTS - 1);
}

void lc_slotmap_clear(lc_slotmap *m)
{
    if (!m)
        return;
    free(m->ranges);
    m->ranges = NULL;
    m->n = 0;
}

/* Copies the node's host (element 0 of a node array) into dst; "" or "?" become from_host. 0,
 * or -1 when it is not a string or too long. */
static int node_host(const redisReply *h, const char *from_host, char *dst)
{
    if (h->type != REDIS_REPLY_STRING)
        return -1;
    const char *s = h->str;
    size_t n = h->len;
    if (n == 0 || (n == 1 && s[0] == '?')) {
        s = from_host ? from_host : "";
        n = strlen(s);
    }
    if (n == 0 || n >= LC_CLUSTER_HOST_MAX || memchr(s, '\0', n))
        return -1;
    memcpy(dst, s, n);
    dst[n] = '\0';
    return 0;
}

lc_status lc_slotmap_parse(const redisReply *r, const char *from_host, lc_slotmap *out)
{
    out->n = 0;
    out->ranges = NULL;
    if (!r || r->type != REDIS_REPLY_ARRAY)
        return lc_fail(LC_EINVAL, "cluster slots: not an array");
    if (r->elements == 0)
        return LC_OK; /* a cluster with no slot assigned yet */
    if (r->elements > LC_CLUSTER_SLOTS)
        return lc_fail(LC_EINVAL, "cluster slots: %zu ranges", r->elements);
    out->ranges = calloc(r->elements, sizeof(*out->ranges));
    if (!out->ranges)
        return lc_fail(LC_ENOMEM, "cluster slots: out of memory");
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        lc_slot_range *g = &out->ranges[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2) {
            lc_slotmap_clear(out);
            return lc_fail(LC_EINVAL,
                           "cluster slots: range %zu is not [start, end, [host, port…]…]", i);
        }
        long long start = e->element[0]->integer, end = e->element[1]->integer;
        const redisReply *node = e->element[2];
        if (start < 0 || end >= LC_CLUSTER_SLOTS || start > end) {
            lc_slotmap_clear(out);
            return lc_fail(LC_EINVAL, "cluster slots: bad range %lld-%lld", start, end);
        }
        if (node_host(node->element[0], from_host, g->host) != 0 ||
            node->element[1]->type != REDIS_REPLY_INTEGER || node->element[1]->integer < 1 ||
            node->element[1]->integer > 65535) {
            lc_slotmap_clear(out);
            return lc_fail(LC_EINVAL, "cluster slots: bad master address in range %lld-%lld", start,
                           end);
        }
        g->start = (int)start;
        g->end = (int)end;
        g->port = (int)node->element[1]->integer;
        out->n = (int)i + 1;
    }
    return LC_OK;
}

/* Parses "<slot> <host>:<port>" (the host may be empty, or an IPv6 address: the port follows
 * the last ':'). 0, or -1. */
static int parse_target(const char *s, const char *end, const char *from_host, lc_redirect *out)
{
    long slot = 0;
    const char *p = s;
    if (p == end || !isdigit((unsigned char)*p))
        return -1;
    while (p < end && isdigit((unsigned char)*p) && slot < LC_CLUSTER_SLOTS)
        slot = slot * 10 + (*p++ - '0');
    if (slot >= LC_CLUSTER_SLOTS || p == end || *p != ' ')
        return -1;
    const char *addr = p + 1;
    const char *colon = NULL;
    for (const char *q = addr; q < end; q++)
        if (*q == ':')
            colon = q;
    if (!colon || colon + 1 == end)
        return -1;
    long port = 0;
    for (const char *q = colon + 1; q < end; q++) {
        if (!isdigit((unsigned char)*q) || port > 65535)
            return -1;
        port = port * 10 + (*q - '0');
    }
    if (port < 1 || port > 65535)
        return -1;
    const char *h = addr;
    size_t hlen = (size_t)(colon - addr);
    if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    }
    if (hlen == 0 || (hlen == 1 && h[0] == '?')) {
        if (!from_host)
            return -1;
        h = from_host;
        hlen = strlen(from_host);
    }
    if (hlen == 0 || hlen >= LC_CLUSTER_HOST_MAX)
        return -1;
    memcpy(out->host, h, hlen);
    out->host[hlen] = '\0';
    out->slot = (int)slot;
    out->port = (int)port;
    return 0;
}

lc_redirect_kind lc_redirect_parse(const char *err, size_t len, const char *from_host,
                                   lc_redirect *out)
{
    memset(out, 0, sizeof(*out));
    out->slot = -1;
    if (!err)
        return LC_REDIRECT_NONE;
    const char *end = err + len;
    /* Trailing whitespace (a CRLF kept by some reader) is no part of the port. */
    while (end > err && isspace((unsigned char)end[-1]))
        end--;
    len = (size_t)(end - err);
    if (len >= 6 && memcmp(err, "MOVED ", 6) == 0) {
        if (parse_target(err + 6, end, from_host, out) == 0)
            out->kind = LC_REDIRECT_MOVED;
    } else if (len >= 4 && memcmp(err, "ASK ", 4) == 0) {
        if (parse_target(err + 4, end, from_host, out) == 0)
            out->kind = LC_REDIRECT_ASK;
    } else if (len >= 8 && memcmp(err, "TRYAGAIN", 8) == 0 && (len == 8 || err[8] == ' ')) {
        out->kind = LC_REDIRECT_TRYAGAIN;
    } else if (len >= 11 && memcmp(err, "CLUSTERDOWN", 11) == 0 && (len == 11 || err[11] == ' ')) {
        out->kind = LC_REDIRECT_CLUSTERDOWN;
    }
    return out->kind;
}

/* argv[i] equals word, ignoring case. */
static int arg_is(const char *const *argv, const size_t *lens, int i, const char *word)
{
    size_t n = lens ? lens[i] : strlen(argv[i]);
    return n == strlen(word) && strncasecmp(argv[i], word, n) == 0;
}

int lc_command_key(int argc, const char *const *argv, const size_t *lens)
{
    static const char *const scripts[] = {"EVAL",       "EVALSHA", "EVAL_RO",
                                          "EVALSHA_RO", "FCALL",   "FCALL_RO"};
    static const char *const keyless[] = {
        "PING",      "ECHO",        "INFO",         "TIME",         "WAIT",      "WAITAOF",
        "CLUSTER",   "ASKING",      "READONLY",     "READWRITE",    "PUBLISH",   "SCRIPT",
        "FUNCTION",  "FLUSHALL",    "FLUSHDB",      "DBSIZE",       "CONFIG",    "CLIENT",
        "COMMAND",   "AUTH",        "HELLO",        "SELECT",       "DEBUG",     "LASTSAVE",
        "SAVE",      "BGSAVE",      "BGREWRITEAOF", "ROLE",         "RANDOMKEY", "SCAN",
        "KEYS",      "MULTI",       "EXEC",         "DISCARD",      "QUIT",      "RESET",
        "SUBSCRIBE", "UNSUBSCRIBE", "PSUBSCRIBE",   "PUNSUBSCRIBE", "SLOWLOG",   "LATENCY",
        "MONITOR",   "SHUTDOWN",    "REPLICAOF",    "SLAVEOF",      "FAILOVER",  "ACL"};
    if (argc < 1)
        return -1;
    for (size_t i = 0; i < sizeof scripts / sizeof scripts[0]; i++)
        if (arg_is(argv, lens, 0, scripts[i])) {
            if (argc < 4)
                return -1;
            size_t n = lens ? lens[2] : strlen(argv[2]);
            long nk = 0;
            for (size_t j = 0; j < n && j < 9; j++) {
                if (!isdigit((unsigned char)argv[2][j]))
                    return -1;
                nk = nk * 10 + (argv[2][j] - '0');
            }
            return nk > 0 ? 3 : -1;
        }
    for (size_t i = 0; i < sizeof keyless / sizeof keyless[0]; i++)
        if (arg_is(argv, lens, 0, keyless[i]))
            return -1;
    /* OBJECT ENCODING key, MEMORY USAGE key, XINFO STREAM key: a subcommand first. */
    if (arg_is(argv, lens, 0, "OBJECT") || arg_is(argv, lens, 0, "MEMORY") ||
        arg_is(argv, lens, 0, "XINFO"))
        return argc > 2 ? 2 : -1;
    return argc > 1 ? 1 : -1;
}
