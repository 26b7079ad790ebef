/*
 * The SPEC §8 invariant checker (see svc_fixture.h). It knows nothing of the service's code:
 * it reads the keys of docs/design.md with its own hiredis connection, one MULTI/EXEC snapshot
 * per segment, and recomputes every counter from the order records.
 */
#include "svc_fixture.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <hiredis/hiredis.h>

static void sf_problem(sf_report *rep, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Records one failed check (the text of the first ones is kept). */
static void sf_problem(sf_report *rep, const char *fmt, ...)
{
    rep->ok = 0;
    rep->nproblems++;
    size_t used = strlen(rep->problems);
    if (used + 2 >= sizeof rep->problems)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rep->problems + used, sizeof rep->problems - used - 1, fmt, ap);
    va_end(ap);
    used = strlen(rep->problems);
    rep->problems[used] = '\n';
    rep->problems[used + 1] = '\0';
}

/* Connects to redis://[[user]:password@]host[:port][/db]. NULL with the reason in rep. */
static redisContext *sf_redis_connect(const char *url, sf_report *rep)
{
    char host[256] = "127.0.0.1", password[256] = "";
    int port = 6379, db = 0;
    const char *p = url;
    if (strncmp(p, "redis://", 8) != 0) {
        sf_problem(rep, "unsupported redis url %s", url);
        return NULL;
    }
    p += 8;
    const char *at = strchr(p, '@');
    if (at != NULL) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (colon != NULL)
            snprintf(password, sizeof password, "%.*s", (int)(at - colon - 1), colon + 1);
        p = at + 1;
    }
    size_t hl = strcspn(p, ":/");
    if (hl > 0)
        snprintf(host, sizeof host, "%.*s", (int)hl, p);
    p += hl;
    if (*p == ':')
        port = (int)strtol(p + 1, (char **)&p, 10);
    if (*p == '/')
        db = atoi(p + 1);

    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout(host, port, tv);
    if (c == NULL || c->err) {
        sf_problem(rep, "connect %s:%d: %s", host, port, c ? c->errstr : "out of memory");
        redisFree(c);
        return NULL;
    }
    struct timeval ctv = {10, 0};
    redisSetTimeout(c, ctv);
    redisReply *r = NULL;
    if (password[0] != '\0') {
        r = redisCommand(c, "AUTH %s", password);
        int ok = r != NULL && r->type == REDIS_REPLY_STATUS;
        freeReplyObject(r);
        if (!ok) {
            sf_problem(rep, "AUTH failed");
            redisFree(c);
            return NULL;
        }
    }
    if (db != 0) {
        r = redisCommand(c, "SELECT %d", db);
        int ok = r != NULL && r->type == REDIS_REPLY_STATUS;
        freeReplyObject(r);
        if (!ok) {
            sf_problem(rep, "SELECT %d failed", db);
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

/*
 * Where the keys live: one Redis, or a Redis Cluster (redis-cluster://seed[,…]: the first seed
 * is asked CLUSTER SLOTS, each master gets a connection, and each key's slot comes from the
 * server's own CLUSTER KEYSLOT, so the checker shares no code with the routing it checks).
 */
#define SF_MAX_NODES 16
typedef struct sf_keys {
    int cluster;
    redisContext *seed; /* the one Redis, or the seed node */
    int n;              /* cluster: masters */
    int start[SF_MAX_NODES * 8], end[SF_MAX_NODES * 8], of[SF_MAX_NODES * 8], nranges;
    redisContext *node[SF_MAX_NODES];
    char host[SF_MAX_NODES][64];
    int port[SF_MAX_NODES];
} sf_keys;

static void sf_redis_close(sf_keys *sr)
{
    redisFree(sr->seed);
    for (int i = 0; i < sr->n; i++)
        redisFree(sr->node[i]);
    memset(sr, 0, sizeof *sr);
}

/* Opens sr for url. 0, or -1 with the reason in rep. */
static int sf_redis_open(sf_keys *sr, const char *url, sf_report *rep)
{
    memset(sr, 0, sizeof *sr);
    if (strncmp(url, "redis-cluster://", 16) != 0) {
        sr->seed = sf_redis_connect(url, rep);
        return sr->seed ? 0 : -1;
    }
    char first[512];
    snprintf(first, sizeof first, "redis://%.*s", (int)strcspn(url + 16, ",/"), url + 16);
    sr->cluster = 1;
    if (!(sr->seed = sf_redis_connect(first, rep)))
        return -1;
    redisReply *r = redisCommand(sr->seed, "CLUSTER SLOTS");
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || sr->nranges == SF_MAX_NODES * 8)
            continue;
        const char *host = e->element[2]->element[0]->str;
        int port = (int)e->element[2]->element[1]->integer;
        int m = 0;
        while (m < sr->n && !(sr->port[m] == port && strcmp(sr->host[m], host) == 0))
            m++;
        if (m == sr->n && sr->n < SF_MAX_NODES) {
            char nurl[128];
            snprintf(sr->host[m], sizeof sr->host[m], "%s", host);
            sr->port[m] = port;
            snprintf(nurl, sizeof nurl, "redis://%s:%d", host, port);
            if (!(sr->node[m] = sf_redis_connect(nurl, rep))) {
                freeReplyObject(r);
                sf_redis_close(sr);
                return -1;
            }
            sr->n++;
        }
        sr->start[sr->nranges] = (int)e->element[0]->integer;
        sr->end[sr->nranges] = (int)e->element[1]->integer;
        sr->of[sr->nranges++] = m;
    }
    freeReplyObject(r);
    if (sr->n == 0) {
        sf_problem(rep, "CLUSTER SLOTS of %s named no master", first);
        sf_redis_close(sr);
        return -1;
    }
    return 0;
}

/* The connection holding key, or NULL (rep says why). */
static redisContext *sf_redis_for(sf_keys *sr, const char *key, sf_report *rep)
{
    if (!sr->cluster)
        return sr->seed;
    redisReply *r = redisCommand(sr->seed, "CLUSTER KEYSLOT %s", key);
    long long slot = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    for (int i = 0; i < sr->nranges; i++)
        if (sr->start[i] <= slot && slot <= sr->end[i])
            return sr->node[sr->of[i]];
    sf_problem(rep, "no master serves the slot of %s", key);
    return NULL;
}

/* The integer value of a bulk string or integer reply; *ok = 0 for anything else. */
static long long sf_reply_ll(const redisReply *r, int *ok)
{
    if (r != NULL && r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        char *end;
        long long v = strtoll(r->str, &end, 10);
        if (end != r->str && *end == '\0')
            return v;
    }
    *ok = 0;
    return 0;
}

/* Looks a field up in an HGETALL reply (flat array name, value, ...). Borrowed or NULL. */
static const redisReply *sf_hfield(const redisReply *h, const char *name)
{
    if (h == NULL || h->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < h->elements; i += 2) {
        if (h->element[i]->type == REDIS_REPLY_STRING && strcmp(h->element[i]->str, name) == 0)
            return h->element[i + 1];
    }
    return NULL;
}

/* Notes units of a live order of user (whose id's hex part is hex) in the report's per-user
 * table (SPEC §11's limit is checked against it once every segment is read). */
static void sf_note_user(sf_report *rep, const char *user, const char *hex, long long units)
{
    for (int i = 0; i < rep->nusers; i++)
        if (strcmp(rep->users[i].user, user) == 0) {
            rep->users[i].units += units;
            if (rep->users[i].nhex < SF_USER_ORDERS_MAX)
                snprintf(rep->users[i].hex[rep->users[i].nhex++], 33, "%.32s", hex);
            return;
        }
    if (rep->nusers == SF_MAX_USERS) {
        rep->users_overflow = 1;
        return;
    }
    struct sf_user *u = &rep->users[rep->nusers++];
    memset(u, 0, sizeof *u);
    snprintf(u->user, sizeof u->user, "%s", user);
    u->units = units;
    snprintf(u->hex[u->nhex++], 33, "%.32s", hex);
}

/* Status classes a part must share with its primary: created and reserved are both live. */
static int sf_status_class(int st)
{
    return st == 1 ? 0 : st;
}

#define SF_MAX_PARTS 64

/* A record of a multi-segment order (a primary, or a part), kept for the checks across
 * segments once every segment is read. */
struct sf_mrec {
    char id[256], of[256]; /* its id; a part's part_of ("" for a primary) */
    char status[16];
    int segment, st; /* st: index in statuses[] */
    long long quantity;
    int nparts; /* a primary's parts (its own included) */
    int pk[SF_MAX_PARTS];
    long long pq[SF_MAX_PARTS];
};

/* What the checks across segments need: the multi-segment records, the follow queues'
 * members (segment, "<part id>|<status>") and the intents (HGETALL inv:2:{S}:multi). */
struct sf_multi {
    struct sf_mrec *rec;
    size_t n, cap;
    char (*follow)[300];
    int *follow_seg;
    size_t nfollow, capfollow;
    redisReply *intents;
};

static void sf_multi_free(struct sf_multi *m)
{
    free(m->rec);
    free(m->follow);
    free(m->follow_seg);
    freeReplyObject(m->intents);
    memset(m, 0, sizeof *m);
}

/* A new slot in m->rec, or NULL (out of memory, reported). */
static struct sf_mrec *sf_multi_add(struct sf_multi *m, sf_report *rep)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        struct sf_mrec *r = realloc(m->rec, cap * sizeof *r);
        if (r == NULL) {
            sf_problem(rep, "out of memory keeping multi-segment records");
            return NULL;
        }
        m->rec = r;
        m->cap = cap;
    }
    struct sf_mrec *r = &m->rec[m->n++];
    memset(r, 0, sizeof *r);
    return r;
}

/* An integral JSON number >= 0 (cjson may write 2.0), or -1. */
static long long sf_json_whole(const json_t *v)
{
    if (!json_is_number(v))
        return -1;
    double d = json_number_value(v);
    return d >= 0 && d == (double)(long long)d ? (long long)d : -1;
}

/* Splits an order id "<32 hex>-<k>-<sku>": copies the hex into hex[33], sets *k; 0, or -1
 * when the id is not one of sku's. */
static int sf_split_id(const char *id, const char *sku, char *hex, int *k)
{
    const char *dash = strchr(id, '-');
    if (dash == NULL || dash - id != 32)
        return -1;
    char *end;
    long v = strtol(dash + 1, &end, 10);
    if (end == dash + 1 || *end != '-' || strcmp(end + 1, sku) != 0 || v < 0)
        return -1;
    snprintf(hex, 33, "%.32s", id);
    *k = (int)v;
    return 0;
}

/* A primary's parts: in index order, its own segment k first (the lowest), each quantity >= 1,
 * summing to q. Fills r's parts; returns the units of its own part, or -1 (reported). */
static long long sf_check_parts(sf_report *rep, int k, const char *id, const json_t *parts,
                                long long q, struct sf_mrec *r)
{
    size_t n = json_array_size(parts);
    if (!json_is_array(parts) || n < 2 || n > SF_MAX_PARTS) {
        sf_problem(rep, "segment %d: order %s: parts is not a list of 2..%d parts", k, id,
                   SF_MAX_PARTS);
        return -1;
    }
    long long sum = 0, own = -1;
    for (size_t i = 0; i < n; i++) {
        const json_t *p = json_array_get(parts, i);
        long long pk = sf_json_whole(json_object_get(p, "segment"));
        long long pq = sf_json_whole(json_object_get(p, "quantity"));
        if (!json_is_object(p) || pk < 0 || pq < 1) {
            sf_problem(rep, "segment %d: order %s: part %zu is not {segment, quantity >= 1}", k, id,
                       i);
            return -1;
        }
        if (i > 0 && pk <= r->pk[i - 1])
            sf_problem(rep, "segment %d: order %s: parts not in index order", k, id);
        r->pk[i] = (int)pk;
        r->pq[i] = pq;
        sum += pq;
        if (pk == k)
            own = pq;
    }
    r->nparts = (int)n;
    if (r->pk[0] != k)
        sf_problem(rep, "segment %d: order %s: first part in segment %d, not its own", k, id,
                   r->pk[0]);
    if (sum != q)
        sf_problem(rep, "segment %d: order %s: parts sum to %lld units, quantity %lld", k, id, sum,
                   q);
    if (own < 0)
        sf_problem(rep, "segment %d: order %s: no part in its own segment", k, id);
    return own;
}

/* Checks the order records of segment k; adds the live units and orders to *units, *live, and
 * the units of its holds (status reserved) to *held; keeps multi-segment records in *m. */
static void sf_check_records(sf_report *rep, const char *sku, int k, const redisReply *orders,
                             const redisReply *due, struct sf_multi *m, long long *units,
                             long long *live, long long *held)
{
    *units = 0;
    *live = 0;
    *held = 0;
    if (orders == NULL || orders->type != REDIS_REPLY_ARRAY)
        return;
    for (size_t i = 0; i + 1 < orders->elements; i += 2) {
        const char *id = orders->element[i]->str;
        const redisReply *rec = orders->element[i + 1];
        json_error_t jerr;
        json_t *o =
            rec->type == REDIS_REPLY_STRING ? json_loadb(rec->str, rec->len, 0, &jerr) : NULL;
        if (!json_is_object(o)) {
            sf_problem(rep, "segment %d: order %s: record is not a JSON object", k, id);
            json_decref(o);
            continue;
        }
        const char *oid = json_string_value(json_object_get(o, "order_id"));
        const char *osku = json_string_value(json_object_get(o, "sku"));
        const char *status = json_string_value(json_object_get(o, "status"));
        json_t *seg = json_object_get(o, "segment");
        json_t *qty = json_object_get(o, "quantity");
        json_t *parts = json_object_get(o, "parts");
        json_t *part_of = json_object_get(o, "part_of");
        /* Lua's cjson may write integers as reals (2.0) after a cancel: accept whole numbers. */
        double q = json_is_number(qty) ? json_number_value(qty) : -1;
        double s = json_is_number(seg) ? json_number_value(seg) : -1;
        if (oid == NULL || strcmp(oid, id) != 0)
            sf_problem(rep, "segment %d: order %s: order_id field is %s", k, id,
                       oid ? oid : "missing");
        if (osku == NULL || strcmp(osku, sku) != 0)
            sf_problem(rep, "segment %d: order %s: sku field is %s", k, id,
                       osku ? osku : "missing");
        if (s != (double)k)
            sf_problem(rep, "segment %d: order %s: segment field is %g", k, id, s);
        if (q < 1 || q != (double)(long long)q)
            sf_problem(rep, "segment %d: order %s: quantity is %g", k, id, q);
        static const char *const statuses[] = {"created", "reserved", "confirmed", "cancelled",
                                               "expired"};
        int st = -1;
        for (int j = 0; status && j < 5; j++)
            if (strcmp(status, statuses[j]) == 0)
                st = j;
        if (st < 0)
            sf_problem(rep, "segment %d: order %s: status is %s", k, id,
                       status ? status : "missing");
        int reserved = st == 1;
        int is_part = part_of != NULL;
        long long u = q >= 1 ? (long long)q : 0; /* its units in this segment (units.lua) */
        if (is_part || parts != NULL) {
            struct sf_mrec scratch, *r = sf_multi_add(m, rep);
            if (r == NULL)
                r = &scratch;
            snprintf(r->id, sizeof r->id, "%s", id);
            snprintf(r->status, sizeof r->status, "%s", status ? status : "");
            r->segment = k;
            r->st = st;
            r->quantity = u;
            if (is_part && parts != NULL)
                sf_problem(rep, "segment %d: order %s: both part_of and parts", k, id);
            if (is_part) {
                const char *of = json_string_value(part_of);
                if (of == NULL)
                    sf_problem(rep, "segment %d: order %s: part_of is not a string", k, id);
                snprintf(r->of, sizeof r->of, "%s", of ? of : "");
                if (json_object_get(o, "user_id") || json_object_get(o, "expires_at"))
                    sf_problem(rep, "segment %d: part %s carries a user_id or expires_at", k, id);
                if (st != 3 && st != 4)
                    rep->live_parts++;
            } else {
                u = sf_check_parts(rep, k, id, parts, u, r);
                if (u < 0)
                    u = 0;
                rep->multi_orders++;
            }
        }
        if (!is_part && reserved != (json_object_get(o, "expires_at") != NULL) && st != 4 &&
            st != 3)
            sf_problem(rep, "segment %d: order %s: status %s %s expires_at", k, id, status,
                       reserved ? "without" : "with");
        /* a hold's record is in the due set; a part's never is (its primary's entry ends it) */
        int in_due = 0;
        for (size_t j = 0; due && due->type == REDIS_REPLY_ARRAY && j + 1 < due->elements; j += 2)
            in_due |= strcmp(due->element[j]->str, id) == 0;
        if (reserved && !is_part && !in_due)
            sf_problem(rep, "segment %d: hold %s is not in the due set (it would never expire)", k,
                       id);
        if (in_due && (is_part || !reserved))
            sf_problem(rep, "segment %d: due set names %s, not a reserved order of the segment", k,
                       id);
        if (st == 3) {
            rep->cancelled += !is_part;
        } else if (st == 4) {
            rep->expired += !is_part;
        } else if (q >= 1) {
            *units += u;
            *live += !is_part; /* cnt.o counts orders: a part is none */
            if (reserved)
                *held += u;
            if (!is_part) {
                rep->reserved_orders += reserved;
                rep->confirmed_orders += st == 2;
                /* a user's units in an order are its quantity, every part's (SPEC §11) */
                const char *user = json_string_value(json_object_get(o, "user_id"));
                if (user)
                    sf_note_user(rep, user, id, (long long)q);
            }
        }
        json_decref(o);
    }
}

/* Keeps segment k's follow queue (ZRANGE WITHSCORES) in m. */
static void sf_note_follows(sf_report *rep, int k, const redisReply *follow, struct sf_multi *m)
{
    for (size_t i = 0; follow && follow->type == REDIS_REPLY_ARRAY && i + 1 < follow->elements;
         i += 2) {
        rep->follows++;
        if (m->nfollow == m->capfollow) {
            size_t cap = m->capfollow ? 2 * m->capfollow : 64;
            char(*f)[300] = realloc(m->follow, cap * sizeof *f);
            if (f != NULL)
                m->follow = f;
            int *fs = realloc(m->follow_seg, cap * sizeof *fs);
            if (fs != NULL)
                m->follow_seg = fs;
            if (f == NULL || fs == NULL) {
                sf_problem(rep, "out of memory keeping follows");
                return;
            }
            m->capfollow = cap;
        }
        snprintf(m->follow[m->nfollow], sizeof m->follow[0], "%s", follow->element[i]->str);
        m->follow_seg[m->nfollow++] = k;
    }
}

/* The record of m with this id, or NULL. */
static const struct sf_mrec *sf_multi_find(const struct sf_multi *m, const char *id)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->rec[i].id, id) == 0)
            return &m->rec[i];
    return NULL;
}

/* Is "<part>|<status>" queued in segment k's follow queue? */
static int sf_follow_queued(const struct sf_multi *m, int k, const char *part, const char *status)
{
    char want[320];
    snprintf(want, sizeof want, "%s|%s", part, status);
    for (size_t i = 0; i < m->nfollow; i++)
        if (m->follow_seg[i] == k && strcmp(m->follow[i], want) == 0)
            return 1;
    return 0;
}

/* SPEC §8 "every part of a multi-segment order is sold or none is", across segments. */
/* HGET key field now, from the key's master: the new reply (a string, or nil) or NULL. */
static redisReply *sf_hget_now(sf_keys *sr, const char *key, const char *field, sf_report *rep)
{
    redisContext *c = sf_redis_for(sr, key, rep);
    redisReply *r = c ? redisCommand(c, "HGET %s %s", key, field) : NULL;
    if (r != NULL && r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL) {
        freeReplyObject(r);
        r = NULL;
    }
    return r;
}

/* The status class of order id in segment k now (-1: no record, -2: unreadable). */
static int sf_class_now(sf_keys *sr, const char *sku, int k, const char *id, sf_report *rep)
{
    char key[512];
    snprintf(key, sizeof key, "inv:2:{%s/%d}:orders", sku, k);
    redisReply *r = sf_hget_now(sr, key, id, rep);
    if (r == NULL)
        return -2;
    int cls = -1;
    if (r->type == REDIS_REPLY_STRING) {
        json_t *o = json_loadb(r->str, r->len, 0, NULL);
        const char *st = json_string_value(json_object_get(o, "status"));
        static const char *const statuses[] = {"created", "reserved", "confirmed", "cancelled",
                                               "expired"};
        cls = -2;
        for (int j = 0; st && j < 5; j++)
            if (strcmp(st, statuses[j]) == 0)
                cls = sf_status_class(j);
        json_decref(o);
    }
    freeReplyObject(r);
    return cls;
}

/* A part read without its primary (read earlier: the primary's segment is the lower index) and
 * without an intent (read before every segment) may be an order made or rolled back while the
 * segments were read: it is half an order only if now, still, the part exists while neither
 * its primary nor an intent does. */
static int sf_orphan_now(sf_keys *sr, const char *sku, const char *part, int k, const char *of,
                         int pk, const char *hex, sf_report *rep)
{
    char key[512];
    snprintf(key, sizeof key, "inv:2:{%s}:multi", sku);
    redisReply *intent = sf_hget_now(sr, key, hex, rep);
    int still = sf_class_now(sr, sku, k, part, rep) != -1 &&
                sf_class_now(sr, sku, pk, of, rep) == -1 && intent != NULL &&
                intent->type == REDIS_REPLY_NIL;
    freeReplyObject(intent);
    return still;
}

static void sf_check_multi(sf_report *rep, const char *sku, const struct sf_multi *m, sf_keys *sr)
{
    for (size_t i = 0; i < m->n; i++) {
        const struct sf_mrec *r = &m->rec[i];
        char hex[33];
        int k;
        if (sf_split_id(r->id, sku, hex, &k) != 0 || k != r->segment) {
            sf_problem(rep, "segment %d: order %s: id is not <32 hex>-%d-%s", r->segment, r->id,
                       r->segment, sku);
            continue;
        }
        if (r->of[0] != '\0') { /* a part: its primary exists and lists it */
            char phex[33];
            int pk;
            if (sf_split_id(r->of, sku, phex, &pk) != 0 || strcmp(phex, hex) != 0 || pk == k) {
                sf_problem(rep, "segment %d: part %s: part_of %s is not its order's id", k, r->id,
                           r->of);
                continue;
            }
            const struct sf_mrec *p = sf_multi_find(m, r->of);
            if (p == NULL || p->of[0] != '\0' || p->nparts == 0) {
                if (sf_hfield(m->intents, hex) == NULL &&
                    sf_orphan_now(sr, sku, r->id, k, r->of, pk, hex, rep))
                    sf_problem(rep,
                               "segment %d: part %s: its primary %s is not a record of segment "
                               "%d and no intent for %s is left: half an order",
                               k, r->id, r->of, pk, hex);
                continue;
            }
            int listed = 0;
            for (int j = 0; j < p->nparts; j++)
                listed |= p->pk[j] == k && p->pq[j] == r->quantity;
            if (!listed)
                sf_problem(rep,
                           "segment %d: part %s of %lld units: its primary's parts do not list "
                           "segment %d with %lld",
                           k, r->id, r->quantity, k, r->quantity);
            continue;
        }
        /* a primary: every other part exists, with its quantity and an agreeing status */
        for (int j = 0; j < r->nparts; j++) {
            if (r->pk[j] == k)
                continue;
            char pid[300];
            snprintf(pid, sizeof pid, "%s-%d-%s", hex, r->pk[j], sku);
            const struct sf_mrec *p = sf_multi_find(m, pid);
            if (p == NULL || strcmp(p->of, r->id) != 0) {
                sf_problem(rep,
                           "order %s: its part %s (segment %d, %lld units) is %s: half an "
                           "order",
                           r->id, pid, r->pk[j], r->pq[j], p ? "another order's" : "missing");
                continue;
            }
            if (p->quantity != r->pq[j])
                sf_problem(rep, "order %s: part %s holds %lld units, the order says %lld", r->id,
                           pid, p->quantity, r->pq[j]);
            /* a part lags behind its primary under a follow queued with it (read in the same
             * MULTI); a part ahead of the primary read earlier (the sweeper ended both since)
             * agrees with the primary read again now */
            if (sf_status_class(p->st) != sf_status_class(r->st) &&
                !sf_follow_queued(m, k, pid, r->status) &&
                sf_class_now(sr, sku, k, r->id, rep) != sf_status_class(p->st))
                sf_problem(rep, "order %s is %s, its part %s is %s (and no follow queued)", r->id,
                           r->status, pid, p->status);
        }
    }
}

/* Checks one segment snapshot: EXEC's reply {stock, sver, cnt, orders, idem, due, follow}. */
static void sf_check_segment(sf_report *rep, const char *sku, int k, const redisReply *x,
                             struct sf_multi *m)
{
    const redisReply *stock = x->element[0], *sver = x->element[1], *cnt = x->element[2],
                     *orders = x->element[3], *idem = x->element[4], *due = x->element[5],
                     *follow = x->element[6];
    int ok = 1;
    long long n = sf_reply_ll(stock, &ok);
    if (!ok) {
        sf_problem(rep, "segment %d: stock key missing or not an integer", k);
        n = 0;
    }
    ok = 1;
    long long v = sf_reply_ll(sver, &ok);
    if (!ok || v != rep->version)
        sf_problem(rep, "segment %d: sver %lld, meta.version %lld", k, ok ? v : -1, rep->version);
    ok = 1;
    long long t = sf_reply_ll(sf_hfield(cnt, "t"), &ok);
    long long s = sf_reply_ll(sf_hfield(cnt, "s"), &ok);
    long long o = sf_reply_ll(sf_hfield(cnt, "o"), &ok);
    if (!ok)
        sf_problem(rep, "segment %d: cnt hash lacks t, s or o", k);
    if (n < 0) {
        rep->negative_segments++;
        sf_problem(rep, "segment %d: stock %lld < 0", k, n);
    }
    if (t != n + s)
        sf_problem(rep, "segment %d: t %lld != stock %lld + s %lld", k, t, n, s);
    long long units, live, held;
    sf_check_records(rep, sku, k, orders, due, m, &units, &live, &held);
    sf_note_follows(rep, k, follow, m);
    int rok = 1;
    const redisReply *rf = sf_hfield(cnt, "r");
    long long r = rf ? sf_reply_ll(rf, &rok) : 0;
    if (!rok || r != held)
        sf_problem(rep, "segment %d: r %lld != %lld units in reserved order records", k, r, held);
    rep->reserved += held;
    /* every entry of the due set names a hold of the segment (checked with the records) */
    for (size_t i = 0; due && due->type == REDIS_REPLY_ARRAY && i + 1 < due->elements; i += 2)
        if (sf_hfield(orders, due->element[i]->str) == NULL)
            sf_problem(rep, "segment %d: due set names %s, not a reserved order of the segment", k,
                       due->element[i]->str);
    if (s != units)
        sf_problem(rep, "segment %d: s %lld != %lld units in live order records", k, s, units);
    if (o != live)
        sf_problem(rep, "segment %d: o %lld != %lld live order records", k, o, live);
    if (idem != NULL && idem->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i + 1 < idem->elements; i += 2) {
            const char *id = idem->element[i + 1]->str;
            if (sf_hfield(orders, id) == NULL)
                sf_problem(rep,
                           "segment %d: Idempotency-Key %s names order %s, not a record "
                           "of the segment",
                           k, idem->element[i]->str, id);
        }
    }
    rep->seg_stock[k] = n;
    rep->seg_sold[k] = s;
    rep->stock_total += t;
    rep->remaining += n;
    rep->sold += s;
    rep->orders += o;
    rep->live_units += units;
    rep->live_orders += live;
}

/* Reports segment keys of sku with an index >= rep->segments. */
static int sf_check_strays(redisContext *c, const char *sku, sf_report *rep)
{
    char pattern[256];
    snprintf(pattern, sizeof pattern, "inv:2:{%s/*}:*", sku);
    size_t prefix = strlen("inv:2:{") + strlen(sku) + 1;
    char cursor[32] = "0";
    do {
        redisReply *r = redisCommand(c, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
        if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            sf_problem(rep, "SCAN failed: %s", r ? (r->str ? r->str : "bad reply") : c->errstr);
            freeReplyObject(r);
            return -1;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        const redisReply *keys = r->element[1];
        for (size_t i = 0; i < keys->elements; i++) {
            const char *key = keys->element[i]->str;
            const char *p = key + prefix;
            char *end;
            long idx = strtol(p, &end, 10);
            if (end == p || strncmp(end, "}:", 2) != 0)
                continue; /* not a segment key */
            if (strcmp(end, "}:lock") == 0 || strncmp(end, "}:lock:", 7) == 0)
                continue; /* lock keys are lockcore's and outlive layouts */
            if (strcmp(end, "}:sver") == 0)
                continue; /* a dropped segment keeps its version as a tombstone */
            if (strcmp(end, "}:log") == 0)
                continue; /* its order log stays until the sink has drained it */
            if (strcmp(end, "}:undone") == 0)
                continue; /* undone parts' tombstones (part_undo.lua) expire by their TTL */
            if (idx >= rep->segments)
                sf_problem(rep, "stray key %s (segment %ld >= %d segments)", key, idx,
                           rep->segments);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    return 0;
}

/* SPEC §11, with a limit: no user holds more than the limit in live orders, and every live
 * order of a user is counted in the user's entries (inv:2:{S}:users, field the user: a JSON
 * object keyed by the order id's hex part), so the count can never let a user past it. */
static int sf_check_users(sf_keys *sr, const char *sku, sf_report *rep)
{
    char key[512];
    snprintf(key, sizeof key, "inv:2:{%s}:users", sku);
    redisContext *c = sf_redis_for(sr, key, rep);
    redisReply *h = c ? redisCommand(c, "HGETALL %s", key) : NULL;
    if (h == NULL || h->type != REDIS_REPLY_ARRAY) {
        sf_problem(rep, "HGETALL %s failed", key);
        freeReplyObject(h);
        return -1;
    }
    if (rep->users_overflow)
        sf_problem(rep, "more than %d users: not all checked", SF_MAX_USERS);
    for (int i = 0; i < rep->nusers; i++) {
        const struct sf_user *u = &rep->users[i];
        if (u->units > rep->limit)
            sf_problem(rep, "user %s holds %lld units in live orders, over the limit %lld", u->user,
                       u->units, rep->limit);
        rep->max_user_units = u->units > rep->max_user_units ? u->units : rep->max_user_units;
        const redisReply *v = sf_hfield(h, u->user);
        json_t *e = v && v->type == REDIS_REPLY_STRING ? json_loadb(v->str, v->len, 0, NULL) : NULL;
        for (int j = 0; j < u->nhex; j++)
            if (!json_object_get(e, u->hex[j]))
                sf_problem(rep, "user %s: live order %s... not in the user's entries", u->user,
                           u->hex[j]);
        json_decref(e);
    }
    freeReplyObject(h);
    return 0;
}

static int sf_check(const char *redis_url, const char *sku, sf_report *rep, int quiescent)
{
    memset(rep, 0, sizeof *rep);
    rep->ok = 1;
    sf_keys sr;
    struct sf_multi m;
    memset(&m, 0, sizeof m);
    if (sf_redis_open(&sr, redis_url, rep) != 0)
        return -1;
    int rc = -1;
    char key[512];
    snprintf(key, sizeof key, "inv:2:{%s}:meta", sku);
    redisContext *c = sf_redis_for(&sr, key, rep);
    redisReply *meta = c ? redisCommand(c, "HMGET %s version segments state limit", key) : NULL;
    if (meta == NULL || meta->type != REDIS_REPLY_ARRAY || meta->elements != 4) {
        sf_problem(rep, "HMGET meta failed: %s", meta ? "bad reply" : c ? c->errstr : "");
        freeReplyObject(meta);
        goto out;
    }
    int ok = 1;
    rep->version = sf_reply_ll(meta->element[0], &ok);
    rep->segments = (int)sf_reply_ll(meta->element[1], &ok);
    int rolling =
        meta->element[2]->type == REDIS_REPLY_STRING && strcmp(meta->element[2]->str, "p") == 0;
    int lok = 1;
    rep->limit =
        meta->element[3]->type == REDIS_REPLY_STRING ? sf_reply_ll(meta->element[3], &lok) : 0;
    freeReplyObject(meta);
    if (ok && rolling)
        sf_problem(rep, "meta.state p: version %lld not rolled out to every segment", rep->version);
    if (!ok) {
        rep->found = 0;
        sf_problem(rep, "no SKU %s (meta missing or incomplete)", sku);
        rc = 0;
        goto out;
    }
    rep->found = 1;
    if (rep->segments < 1 || rep->segments > SF_MAX_SEGMENTS) {
        sf_problem(rep, "meta.segments %d out of range", rep->segments);
        rc = 0;
        goto out;
    }
    /* the intents first: an orphan part read later is covered by an intent read earlier (a
     * request deletes its intent only after its parts are made whole or undone) */
    snprintf(key, sizeof key, "inv:2:{%s}:multi", sku);
    if (!(c = sf_redis_for(&sr, key, rep)))
        goto out;
    m.intents = redisCommand(c, "HGETALL %s", key);
    if (m.intents == NULL || m.intents->type != REDIS_REPLY_ARRAY) {
        sf_problem(rep, "HGETALL %s failed: %s", key, m.intents ? "bad reply" : c->errstr);
        goto out;
    }
    rep->intents = (long long)m.intents->elements / 2;
    for (int k = 0; k < rep->segments; k++) {
        char stock[512], sver[512], cnt[512], orders[512], idem[512];
        snprintf(stock, sizeof stock, "inv:2:{%s/%d}:stock", sku, k);
        snprintf(sver, sizeof sver, "inv:2:{%s/%d}:sver", sku, k);
        snprintf(cnt, sizeof cnt, "inv:2:{%s/%d}:cnt", sku, k);
        snprintf(orders, sizeof orders, "inv:2:{%s/%d}:orders", sku, k);
        snprintf(idem, sizeof idem, "inv:2:{%s/%d}:idem", sku, k);
        if (!(c = sf_redis_for(&sr, stock, rep)))
            goto out;
        redisAppendCommand(c, "MULTI");
        redisAppendCommand(c, "GET %s", stock);
        redisAppendCommand(c, "GET %s", sver);
        redisAppendCommand(c, "HGETALL %s", cnt);
        redisAppendCommand(c, "HGETALL %s", orders);
        redisAppendCommand(c, "HGETALL %s", idem);
        redisAppendCommand(c, "ZRANGE inv:2:{%s/%d}:due 0 -1 WITHSCORES", sku, k);
        redisAppendCommand(c, "ZRANGE inv:2:{%s/%d}:follow 0 -1 WITHSCORES", sku, k);
        redisAppendCommand(c, "EXEC");
        redisReply *x = NULL;
        int io = 0;
        for (int i = 0; i < 9; i++) {
            void *r = NULL;
            if (redisGetReply(c, &r) != REDIS_OK) {
                io = 1;
                break;
            }
            if (i == 8)
                x = r;
            else
                freeReplyObject(r);
        }
        if (io || x == NULL || x->type != REDIS_REPLY_ARRAY || x->elements != 7) {
            sf_problem(rep, "segment %d: MULTI/EXEC failed: %s", k, io ? c->errstr : "bad reply");
            freeReplyObject(x);
            goto out;
        }
        sf_check_segment(rep, sku, k, x, &m);
        freeReplyObject(x);
    }
    for (int i = 0; i < (sr.cluster ? sr.n : 1); i++)
        if (sf_check_strays(sr.cluster ? sr.node[i] : sr.seed, sku, rep) != 0)
            goto out;
    if (rep->sold != rep->stock_total - rep->remaining)
        sf_problem(rep, "sold %lld != stock_total %lld - remaining %lld", rep->sold,
                   rep->stock_total, rep->remaining);
    sf_check_multi(rep, sku, &m, &sr);
    if (quiescent && (rep->follows > 0 || rep->intents > 0))
        sf_problem(rep, "not quiescent: %lld follow(s) queued, %lld intent(s) left", rep->follows,
                   rep->intents);
    if (rep->limit > 0 && sf_check_users(&sr, sku, rep) != 0)
        goto out;
    rc = 0;
out:
    sf_multi_free(&m);
    sf_redis_close(&sr);
    return rc;
}

int sf_check_invariants(const char *redis_url, const char *sku, sf_report *rep)
{
    return sf_check(redis_url, sku, rep, 0);
}

int sf_check_invariants_quiescent(const char *redis_url, const char *sku, sf_report *rep)
{
    return sf_check(redis_url, sku, rep, 1);
}

long long sf_wait_multi_drained(const char *redis_url, const char *sku, int timeout_ms)
{
    struct timeval t0, t;
    gettimeofday(&t0, NULL);
    for (;;) {
        sf_report rep;
        long long left = -1;
        if (sf_check(redis_url, sku, &rep, 0) == 0 && rep.found)
            left = rep.follows + rep.intents;
        gettimeofday(&t, NULL);
        long long ms = (t.tv_sec - t0.tv_sec) * 1000LL + (t.tv_usec - t0.tv_usec) / 1000;
        if (left == 0 || ms >= timeout_ms)
            return left;
        struct timespec nap = {0, 100 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
}

void sf_report_print(const char *what, const sf_report *rep)
{
    fprintf(stderr,
            "---- invariants %s: %s; found %d version %lld segments %d stock_total %lld "
            "remaining %lld sold %lld orders %lld (records: %lld live units, %lld live, %lld "
            "cancelled, %lld expired; %lld units reserved in %lld holds, %lld confirmed), "
            "negative segments %d, limit %lld (most units of a user %lld); multi-segment orders "
            "%lld (%lld live parts), follows queued %lld, intents %lld\n",
            what, rep->ok ? "ok" : "FAILED", rep->found, rep->version, rep->segments,
            rep->stock_total, rep->remaining, rep->sold, rep->orders, rep->live_units,
            rep->live_orders, rep->cancelled, rep->expired, rep->reserved, rep->reserved_orders,
            rep->confirmed_orders, rep->negative_segments, rep->limit, rep->max_user_units,
            rep->multi_orders, rep->live_parts, rep->follows, rep->intents);
    if (rep->nproblems > 0)
        fprintf(stderr, "%d problem(s):\n%s", rep->nproblems, rep->problems);
}
