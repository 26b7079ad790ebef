/*
 * The SPEC §8 invariant checker (invcheck.h). It knows nothing of the service's code but the
 * key schema (service/store_keys.txt, whose names store_keys_gen.h gives): it reads the keys
 * with its own hiredis connections, one MULTI/EXEC snapshot per segment, and recomputes every
 * counter from the order records.
 */
#include "invcheck.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "store_keys_gen.h"

static void ic_problem(ic_report *rep, const char *check, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records one failed check of group check (invcheck.h): its text in rep->problems while there is
 * room, and in rep->problem[] for the first IC_MAX_PROBLEMS. */
static void ic_problem(ic_report *rep, const char *check, const char *fmt, ...)
{
    rep->ok = 0;
    rep->nproblems++;
    char text[sizeof rep->problem[0].text];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (rep->nlisted < IC_MAX_PROBLEMS) {
        struct ic_problem *p = &rep->problem[rep->nlisted++];
        snprintf(p->check, sizeof p->check, "%s", check);
        snprintf(p->text, sizeof p->text, "%s", text);
    }
    size_t used = strlen(rep->problems);
    if (used + 2 >= sizeof rep->problems)
        return;
    snprintf(rep->problems + used, sizeof rep->problems - used - 1, "%s", text);
    used = strlen(rep->problems);
    rep->problems[used] = '\n';
    rep->problems[used + 1] = '\0';
}

/* The names of sku's keys under schema opt->key_schema (invcheck.h): a SKU-wide key and
 * segment k's, name being a row of store_keys.txt (STORE_KEY_SKU_*, STORE_KEY_SEG_*). */
/* RFC 3339 "YYYY-MM-DDTHH:MM:SS.mmmZ" (as iso_time.lua writes it) -> ms since the epoch, or
 * -1 (NULL, or another shape). */
static long long ic_iso_ms(const char *s)
{
    int y, mo, d, h, mi, sec, ms;
    if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &y, &mo, &d, &h, &mi, &sec, &ms) != 7)
        return -1;
    /* days since 1970-01-01 of the civil date (H. Hinnant's days_from_civil) */
    y -= mo <= 2;
    long long era = (y >= 0 ? y : y - 399) / 400;
    long long yoe = y - era * 400;
    long long doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    long long days = era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
    return ((days * 24 + h) * 60 + mi) * 60000LL + sec * 1000LL + ms;
}

static void ic_sku_key(char *buf, size_t len, const ic_options *opt, const char *sku,
                       const char *name)
{
    snprintf(buf, len, "%s{%s}:%s", opt->key_schema == 1 ? "inv:" : STORE_KEYS_PREFIX, sku, name);
}

static void ic_seg_key(char *buf, size_t len, const ic_options *opt, const char *sku, int k,
                       const char *name)
{
    if (opt->key_schema == 1)
        snprintf(buf, len, "inv:{%s:%d}:%s", sku, k, name);
    else
        snprintf(buf, len, STORE_KEYS_PREFIX "{%s" STORE_KEYS_SEG_SEP "%d}:%s", sku, k, name);
}

/* Connects to redis://[[user]:password@]host[:port][/db]. NULL with the reason in err. */
static redisContext *ic_redis_connect(const char *url, char *err, size_t errlen)
{
    char host[256] = "127.0.0.1", password[256] = "";
    int port = 6379, db = 0;
    const char *p = url;
    if (strncmp(p, "redis://", 8) != 0) {
        snprintf(err, errlen, "unsupported redis url %s", url);
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
        snprintf(err, errlen, "connect %s:%d: %s", host, port, c ? c->errstr : "out of memory");
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
            snprintf(err, errlen, "%s:%d: AUTH failed", host, port);
            redisFree(c);
            return NULL;
        }
    }
    if (db != 0) {
        r = redisCommand(c, "SELECT %d", db);
        int ok = r != NULL && r->type == REDIS_REPLY_STATUS;
        freeReplyObject(r);
        if (!ok) {
            snprintf(err, errlen, "%s:%d: SELECT %d failed", host, port, db);
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

/*
 * Where the keys live: one Redis, or a Redis Cluster (redis-cluster://seed[,…]: the first seed
 * that answers is asked CLUSTER SLOTS, each master gets a connection, and each key's slot comes
 * from the server's own CLUSTER KEYSLOT, so the checker shares no code with the routing it
 * checks).
 */
#define IC_MAX_NODES 16
typedef struct ic_keys {
    int cluster;
    redisContext *seed; /* the one Redis, or the seed node */
    int n;              /* cluster: masters */
    int start[IC_MAX_NODES * 8], end[IC_MAX_NODES * 8], of[IC_MAX_NODES * 8], nranges;
    redisContext *node[IC_MAX_NODES];
    char host[IC_MAX_NODES][64];
    int port[IC_MAX_NODES];
    const ic_options *opt; /* the key schema */
} ic_keys;

static void ic_redis_close(ic_keys *sr)
{
    redisFree(sr->seed);
    for (int i = 0; i < sr->n; i++)
        redisFree(sr->node[i]);
    memset(sr, 0, sizeof *sr);
}

/* Reads the slot map from seed (a redis://… url) into sr, connecting to each master. 0, or -1
 * with the reason in err (sr closed). */
static int ic_cluster_map(ic_keys *sr, const char *seed, char *err, size_t errlen)
{
    memset(sr, 0, sizeof *sr);
    sr->cluster = 1;
    if (!(sr->seed = ic_redis_connect(seed, err, errlen)))
        return -1;
    redisReply *r = redisCommand(sr->seed, "CLUSTER SLOTS");
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || sr->nranges == IC_MAX_NODES * 8)
            continue;
        const char *host = e->element[2]->element[0]->str;
        int port = (int)e->element[2]->element[1]->integer;
        int m = 0;
        while (m < sr->n && !(sr->port[m] == port && strcmp(sr->host[m], host) == 0))
            m++;
        if (m == sr->n && sr->n < IC_MAX_NODES) {
            char nurl[128];
            snprintf(sr->host[m], sizeof sr->host[m], "%s", host);
            sr->port[m] = port;
            snprintf(nurl, sizeof nurl, "redis://%s:%d", host, port);
            if (!(sr->node[m] = ic_redis_connect(nurl, err, errlen))) {
                freeReplyObject(r);
                ic_redis_close(sr);
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
        snprintf(err, errlen, "CLUSTER SLOTS of %.300s named no master", seed);
        ic_redis_close(sr);
        return -1;
    }
    return 0;
}

/* Opens sr for url: a seed that is down (a master killed by a fault test) is passed over for
 * the next. 0, or -1 with the reason in rep. */
static int ic_redis_open(ic_keys *sr, const char *url, ic_report *rep)
{
    char err[512] = "";
    memset(sr, 0, sizeof *sr);
    if (strncmp(url, "redis-cluster://", 16) != 0) {
        sr->seed = ic_redis_connect(url, err, sizeof err);
        if (sr->seed == NULL)
            ic_problem(rep, "read", "%s", err);
        return sr->seed ? 0 : -1;
    }
    for (const char *p = url + 16; *p != '\0' && *p != '/';) {
        size_t len = strcspn(p, ",/");
        char seed[512];
        snprintf(seed, sizeof seed, "redis://%.*s", (int)len, p);
        if (len > 0 && ic_cluster_map(sr, seed, err, sizeof err) == 0)
            return 0;
        p += len;
        if (*p == ',')
            p++;
    }
    ic_problem(rep, "read", "no seed of %s gave a slot map: %s", url, err);
    return -1;
}

/* The connection holding key, or NULL (rep says why). */
static redisContext *ic_redis_for(ic_keys *sr, const char *key, ic_report *rep)
{
    if (!sr->cluster)
        return sr->seed;
    redisReply *r = redisCommand(sr->seed, "CLUSTER KEYSLOT %s", key);
    long long slot = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    for (int i = 0; i < sr->nranges; i++)
        if (sr->start[i] <= slot && slot <= sr->end[i])
            return sr->node[sr->of[i]];
    ic_problem(rep, "read", "no master serves the slot of %s", key);
    return NULL;
}

/* The integer value of a bulk string or integer reply; *ok = 0 for anything else. */
static long long ic_reply_ll(const redisReply *r, int *ok)
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
static const redisReply *ic_hfield(const redisReply *h, const char *name)
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
static void ic_note_user(ic_report *rep, const char *user, const char *hex, long long units)
{
    for (int i = 0; i < rep->nusers; i++)
        if (strcmp(rep->users[i].user, user) == 0) {
            rep->users[i].units += units;
            if (rep->users[i].nhex < IC_USER_ORDERS_MAX)
                snprintf(rep->users[i].hex[rep->users[i].nhex++], 33, "%.32s", hex);
            return;
        }
    if (rep->nusers == IC_MAX_USERS) {
        rep->users_overflow = 1;
        return;
    }
    struct ic_user *u = &rep->users[rep->nusers++];
    memset(u, 0, sizeof *u);
    snprintf(u->user, sizeof u->user, "%s", user);
    u->units = units;
    snprintf(u->hex[u->nhex++], 33, "%.32s", hex);
}

/* Status classes a part must share with its primary: created and reserved are both live. */
static int ic_status_class(int st)
{
    return st == 1 ? 0 : st;
}

#define IC_MAX_PARTS 64

/* A record of a multi-segment order (a primary, or a part), kept for the checks across
 * segments once every segment is read. */
struct ic_mrec {
    char id[256], of[256]; /* its id; a part's part_of ("" for a primary) */
    char status[16];
    int segment, st; /* st: index in statuses[] */
    long long quantity;
    int nparts; /* a primary's parts (its own included) */
    int pk[IC_MAX_PARTS];
    long long pq[IC_MAX_PARTS];
    json_t *items;  /* a cart's primary: its items (docs/design.md "Ending and healing a cart") */
    char user[136]; /* a cart's part carrying its item's user count (lim 1): the user */
};

/* What the checks across segments need: the multi-segment records, the follow queues'
 * members (segment, "<part id>|<status>") and the intents (HGETALL inv:2:{S}:multi). */
struct ic_multi {
    struct ic_mrec *rec;
    size_t n, cap;
    char (*follow)[300];
    int *follow_seg;
    size_t nfollow, capfollow;
    redisReply *intents;
};

static void ic_multi_free(struct ic_multi *m)
{
    for (size_t i = 0; i < m->n; i++)
        json_decref(m->rec[i].items);
    free(m->rec);
    free(m->follow);
    free(m->follow_seg);
    freeReplyObject(m->intents);
    memset(m, 0, sizeof *m);
}

/* A new slot in m->rec, or NULL (out of memory, reported). */
static struct ic_mrec *ic_multi_add(struct ic_multi *m, ic_report *rep)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        struct ic_mrec *r = realloc(m->rec, cap * sizeof *r);
        if (r == NULL) {
            ic_problem(rep, "read", "out of memory keeping multi-segment records");
            return NULL;
        }
        m->rec = r;
        m->cap = cap;
    }
    struct ic_mrec *r = &m->rec[m->n++];
    memset(r, 0, sizeof *r);
    return r;
}

/* An integral JSON number >= 0 (cjson may write 2.0), or -1. */
static long long ic_json_whole(const json_t *v)
{
    if (!json_is_number(v))
        return -1;
    double d = json_number_value(v);
    return d >= 0 && d == (double)(long long)d ? (long long)d : -1;
}

/* Splits an order id "<32 hex>-<k>-<sku>": copies the hex into hex[33], sets *k; 0, or -1
 * when the id is not one of sku's. */
static int ic_split_id(const char *id, const char *sku, char *hex, int *k)
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

/* Splits any order id "<32 hex>-<k>-<sku>" (a cart's part names another SKU's primary):
 * the hex into hex[33], *k, the SKU into sku[len]; 0, or -1 when it is not an order id. */
static int ic_split_any(const char *id, char *hex, int *k, char *sku, size_t len)
{
    const char *dash = strchr(id, '-');
    if (dash == NULL || dash - id != 32)
        return -1;
    char *end;
    long v = strtol(dash + 1, &end, 10);
    if (end == dash + 1 || *end != '-' || end[1] == '\0' || v < 0 || strlen(end + 1) >= len)
        return -1;
    snprintf(hex, 33, "%.32s", id);
    snprintf(sku, len, "%s", end + 1);
    *k = (int)v;
    return 0;
}

/* A primary's parts: in index order, its own segment k first (the lowest), each quantity >= 1,
 * summing to q (at least 2 parts; a cart's home item, min 1). Fills r's parts; returns the
 * units of its own part, or -1 (reported). */
static long long ic_check_parts(ic_report *rep, int k, const char *id, const json_t *parts,
                                long long q, struct ic_mrec *r, size_t min)
{
    size_t n = json_array_size(parts);
    if (!json_is_array(parts) || n < min || n > IC_MAX_PARTS) {
        ic_problem(rep, "multi", "segment %d: order %s: parts is not a list of %zu..%d parts", k,
                   id, min, IC_MAX_PARTS);
        return -1;
    }
    long long sum = 0, own = -1;
    for (size_t i = 0; i < n; i++) {
        const json_t *p = json_array_get(parts, i);
        long long pk = ic_json_whole(json_object_get(p, "segment"));
        long long pq = ic_json_whole(json_object_get(p, "quantity"));
        if (!json_is_object(p) || pk < 0 || pq < 1) {
            ic_problem(rep, "multi",
                       "segment %d: order %s: part %zu is not {segment, quantity >= 1}", k, id, i);
            return -1;
        }
        if (i > 0 && pk <= r->pk[i - 1])
            ic_problem(rep, "multi", "segment %d: order %s: parts not in index order", k, id);
        r->pk[i] = (int)pk;
        r->pq[i] = pq;
        sum += pq;
        if (pk == k)
            own = pq;
    }
    r->nparts = (int)n;
    if (r->pk[0] != k)
        ic_problem(rep, "multi", "segment %d: order %s: first part in segment %d, not its own", k,
                   id, r->pk[0]);
    if (sum != q)
        ic_problem(rep, "multi", "segment %d: order %s: parts sum to %lld units, quantity %lld", k,
                   id, sum, q);
    if (own < 0)
        ic_problem(rep, "multi", "segment %d: order %s: no part in its own segment", k, id);
    return own;
}

/* Checks the order records of segment k; adds the live units and orders to *units, *live, and
 * the units of its holds (status reserved) to *held; keeps multi-segment records in *m. */
static void ic_check_records(ic_report *rep, const char *sku, int k, const redisReply *orders,
                             const redisReply *due, struct ic_multi *m, long long *units,
                             long long *live, long long *held)
{
    *units = 0;
    *live = 0;
    *held = 0;
    if (orders == NULL || orders->type != REDIS_REPLY_ARRAY)
        return;
    for (size_t i = 0; i + 1 < orders->elements; i += 2) {
        rep->records++;
        const char *id = orders->element[i]->str;
        const redisReply *rec = orders->element[i + 1];
        json_error_t jerr;
        json_t *o =
            rec->type == REDIS_REPLY_STRING ? json_loadb(rec->str, rec->len, 0, &jerr) : NULL;
        if (!json_is_object(o)) {
            ic_problem(rep, "record", "segment %d: order %s: record is not a JSON object", k, id);
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
        json_t *items = json_object_get(o, "items");
        /* Lua's cjson may write integers as reals (2.0) after a cancel: accept whole numbers. */
        double q = json_is_number(qty) ? json_number_value(qty) : -1;
        double s = json_is_number(seg) ? json_number_value(seg) : -1;
        if (oid == NULL || strcmp(oid, id) != 0)
            ic_problem(rep, "record", "segment %d: order %s: order_id field is %s", k, id,
                       oid ? oid : "missing");
        if (osku == NULL || strcmp(osku, sku) != 0)
            ic_problem(rep, "record", "segment %d: order %s: sku field is %s", k, id,
                       osku ? osku : "missing");
        if (s != (double)k)
            ic_problem(rep, "record", "segment %d: order %s: segment field is %g", k, id, s);
        if (q < 1 || q != (double)(long long)q)
            ic_problem(rep, "record", "segment %d: order %s: quantity is %g", k, id, q);
        static const char *const statuses[] = {"created", "reserved", "confirmed", "cancelled",
                                               "expired"};
        int st = -1;
        for (int j = 0; status && j < 5; j++)
            if (strcmp(status, statuses[j]) == 0)
                st = j;
        if (st < 0)
            ic_problem(rep, "record", "segment %d: order %s: status is %s", k, id,
                       status ? status : "missing");
        int reserved = st == 1;
        int is_part = part_of != NULL;
        long long u = q >= 1 ? (long long)q : 0; /* its units in this segment (units.lua) */
        if (is_part || parts != NULL) {
            struct ic_mrec scratch, *r = ic_multi_add(m, rep);
            if (r == NULL)
                r = &scratch;
            snprintf(r->id, sizeof r->id, "%s", id);
            snprintf(r->status, sizeof r->status, "%s", status ? status : "");
            r->segment = k;
            r->st = st;
            r->quantity = u;
            if (is_part && parts != NULL)
                ic_problem(rep, "record", "segment %d: order %s: both part_of and parts", k, id);
            if (is_part) {
                const char *of = json_string_value(part_of);
                if (of == NULL)
                    ic_problem(rep, "record", "segment %d: order %s: part_of is not a string", k,
                               id);
                snprintf(r->of, sizeof r->of, "%s", of ? of : "");
                if (json_object_get(o, "user_id") || json_object_get(o, "expires_at"))
                    ic_problem(rep, "record", "segment %d: part %s carries a user_id or expires_at",
                               k, id);
                /* a cart's item in a SKU with a limit: its first part carries the user */
                const char *cu = json_string_value(json_object_get(o, "user"));
                if (cu && json_integer_value(json_object_get(o, "lim")) == 1)
                    snprintf(r->user, sizeof r->user, "%s", cu);
                if (st != 3 && st != 4)
                    rep->live_parts++;
            } else {
                u = ic_check_parts(rep, k, id, parts, u, r, items ? 1 : 2);
                if (u < 0)
                    u = 0;
                if (items && (!json_is_array(items) || json_array_size(items) < 1))
                    ic_problem(rep, "multi", "segment %d: cart %s: items is not a list of items", k,
                               id);
                else if (items)
                    r->items = json_incref(items);
                rep->multi_orders++;
            }
        }
        if (!is_part && reserved != (json_object_get(o, "expires_at") != NULL) && st != 4 &&
            st != 3)
            ic_problem(rep, "record", "segment %d: order %s: status %s %s expires_at", k, id,
                       status, reserved ? "without" : "with");
        /* a hold's record is in the due set; a part's never is (its primary's entry ends it) */
        int in_due = 0;
        const char *due_ms = NULL;
        for (size_t j = 0; due && due->type == REDIS_REPLY_ARRAY && j + 1 < due->elements; j += 2)
            if (strcmp(due->element[j]->str, id) == 0) {
                in_due = 1;
                due_ms = due->element[j + 1]->str;
            }
        if (reserved && !is_part && !in_due)
            ic_problem(rep, "record",
                       "segment %d: hold %s is not in the due set (it would never expire)", k, id);
        /* the due set's score is the record's expires_at (the commit and an extension,
         * extend.lua, write both in one step): the sweeper ends a hold when its record says */
        const char *exp_text = json_string_value(json_object_get(o, "expires_at"));
        if (reserved && !is_part && due_ms && ic_iso_ms(exp_text) != atoll(due_ms))
            ic_problem(rep, "record", "segment %d: hold %s: expires_at %s, the due set %s ms", k,
                       id, exp_text ? exp_text : "(none)", due_ms);
        if (in_due && (is_part || !reserved))
            ic_problem(rep, "record",
                       "segment %d: due set names %s, not a reserved order of the segment", k, id);
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
                    ic_note_user(rep, user, id, (long long)q);
            }
        }
        json_decref(o);
    }
}

/* Keeps segment k's follow queue (ZRANGE WITHSCORES) in m. */
static void ic_note_follows(ic_report *rep, int k, const redisReply *follow, struct ic_multi *m)
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
                ic_problem(rep, "read", "out of memory keeping follows");
                return;
            }
            m->capfollow = cap;
        }
        snprintf(m->follow[m->nfollow], sizeof m->follow[0], "%s", follow->element[i]->str);
        m->follow_seg[m->nfollow++] = k;
    }
}

/* The record of m with this id, or NULL. */
static const struct ic_mrec *ic_multi_find(const struct ic_multi *m, const char *id)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->rec[i].id, id) == 0)
            return &m->rec[i];
    return NULL;
}

/* Is "<part>|<status>" queued in segment k's follow queue? */
static int ic_follow_queued(const struct ic_multi *m, int k, const char *part, const char *status)
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
static redisReply *ic_hget_now(ic_keys *sr, const char *key, const char *field, ic_report *rep)
{
    redisContext *c = ic_redis_for(sr, key, rep);
    redisReply *r = c ? redisCommand(c, "HGET %s %s", key, field) : NULL;
    if (r != NULL && r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL) {
        freeReplyObject(r);
        r = NULL;
    }
    return r;
}

/* The status class of order id in segment k now (-1: no record, -2: unreadable). */
static int ic_class_now(ic_keys *sr, const char *sku, int k, const char *id, ic_report *rep)
{
    char key[512];
    ic_seg_key(key, sizeof key, sr->opt, sku, k, STORE_KEY_SEG_orders);
    redisReply *r = ic_hget_now(sr, key, id, rep);
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
                cls = ic_status_class(j);
        json_decref(o);
    }
    freeReplyObject(r);
    return cls;
}

/* A part read without its primary (read earlier: the primary's segment is the lower index) and
 * without an intent (read before every segment) may be an order made or rolled back while the
 * segments were read: it is half an order only if now, still, the part exists while neither
 * its primary nor an intent does. */
static int ic_orphan_now(ic_keys *sr, const char *sku, const char *part, int k, const char *of,
                         int pk, const char *hex, ic_report *rep)
{
    char key[512];
    ic_sku_key(key, sizeof key, sr->opt, sku, STORE_KEY_SKU_multi);
    redisReply *intent = ic_hget_now(sr, key, hex, rep);
    int still = ic_class_now(sr, sku, k, part, rep) != -1 &&
                ic_class_now(sr, sku, pk, of, rep) == -1 && intent != NULL &&
                intent->type == REDIS_REPLY_NIL;
    freeReplyObject(intent);
    return still;
}

/* The status class (ic_status_class) of a record's JSON text, -2 when it has none known. */
static int ic_class_of(const json_t *o)
{
    static const char *const statuses[] = {"created", "reserved", "confirmed", "cancelled",
                                           "expired"};
    const char *st = json_string_value(json_object_get(o, "status"));
    for (int j = 0; st && j < 5; j++)
        if (strcmp(st, statuses[j]) == 0)
            return ic_status_class(j);
    return -2;
}

/* Is member queued in sku's segment k's follow set now (ZSCORE on its master)? */
static int ic_follow_now(ic_keys *sr, const char *sku, int k, const char *member, ic_report *rep)
{
    char key[512];
    ic_seg_key(key, sizeof key, sr->opt, sku, k, STORE_KEY_SEG_follow);
    redisContext *c = ic_redis_for(sr, key, rep);
    redisReply *r = c ? redisCommand(c, "ZSCORE %s %s", key, member) : NULL;
    int there = r != NULL && r->type == REDIS_REPLY_STRING;
    freeReplyObject(r);
    return there;
}

/* The record id of sku's segment k now, parsed (NULL: none); *unread when it could not be
 * read. */
static json_t *ic_record_now(ic_keys *sr, const char *sku, int k, const char *id, int *unread,
                             ic_report *rep)
{
    char key[512];
    ic_seg_key(key, sizeof key, sr->opt, sku, k, STORE_KEY_SEG_orders);
    redisReply *r = ic_hget_now(sr, key, id, rep);
    *unread = r == NULL;
    json_t *o = r && r->type == REDIS_REPLY_STRING ? json_loadb(r->str, r->len, 0, NULL) : NULL;
    freeReplyObject(r);
    return o;
}

/* SPEC §8 for carts: a part of this SKU whose part_of names a primary in another SKU (psku's
 * segment pk). The primary exists and lists it in the item of this SKU, their statuses agree
 * (or the change is queued in the primary's follow set); or the primary is gone and either its
 * intent is left in psku's :cart hash, or the part is gone too (read again now). Notes a
 * limited item's user units (its SKU's count holds the item's units). */
static void ic_check_cart_part(ic_report *rep, const char *sku, const struct ic_mrec *r,
                               const char *hex, const char *psku, int pk, ic_keys *sr)
{
    int unread = 0, live = r->st >= 0 && r->st <= 2;
    json_t *p = ic_record_now(sr, psku, pk, r->of, &unread, rep);
    if (unread)
        return; /* reported by the read */
    if (p == NULL) {
        char key[512];
        ic_sku_key(key, sizeof key, sr->opt, psku, STORE_KEY_SKU_cart);
        redisReply *intent = ic_hget_now(sr, key, hex, rep);
        int no_intent = intent != NULL && intent->type == REDIS_REPLY_NIL;
        freeReplyObject(intent);
        if (no_intent && ic_class_now(sr, sku, r->segment, r->id, rep) != -1)
            ic_problem(rep, "multi",
                       "segment %d: cart part %s: its primary %s is not a record of %s segment "
                       "%d and no cart intent for %s is left: half a cart",
                       r->segment, r->id, r->of, psku, pk, hex);
        if (live && r->user[0])
            ic_note_user(rep, r->user, r->id, r->quantity);
        return;
    }
    json_t *item = NULL, *items = json_object_get(p, "items");
    for (size_t j = 0; j < json_array_size(items); j++) {
        const char *isku = json_string_value(json_object_get(json_array_get(items, j), "sku"));
        if (isku && strcmp(isku, sku) == 0)
            item = json_array_get(items, j);
    }
    int listed = 0;
    json_t *ps = json_object_get(item, "parts");
    for (size_t j = 0; j < json_array_size(ps); j++) {
        json_t *e = json_array_get(ps, j);
        listed |= ic_json_whole(json_object_get(e, "segment")) == r->segment &&
                  ic_json_whole(json_object_get(e, "quantity")) == r->quantity;
    }
    if (!listed)
        ic_problem(rep, "multi",
                   "segment %d: cart part %s of %lld units: its primary %s lists no such part "
                   "of %s",
                   r->segment, r->id, r->quantity, r->of, sku);
    if (live && r->user[0]) {
        long long units = ic_json_whole(json_object_get(item, "quantity"));
        ic_note_user(rep, r->user, r->id, units > 0 ? units : r->quantity);
    }
    int pcls = ic_class_of(p);
    const char *pst = json_string_value(json_object_get(p, "status"));
    char member[600];
    snprintf(member, sizeof member, "%s|%s", r->id, pst ? pst : "");
    if (pcls != ic_status_class(r->st) && !ic_follow_now(sr, psku, pk, member, rep) &&
        ic_class_now(sr, sku, r->segment, r->id, rep) != pcls) {
        /* the primary may have changed since: read once more, with its queue */
        json_t *again = ic_record_now(sr, psku, pk, r->of, &unread, rep);
        const char *ast = json_string_value(json_object_get(again, "status"));
        snprintf(member, sizeof member, "%s|%s", r->id, ast ? ast : "");
        if (!unread && ic_class_of(again) != ic_class_now(sr, sku, r->segment, r->id, rep) &&
            !ic_follow_now(sr, psku, pk, member, rep))
            ic_problem(rep, "multi", "cart %s is %s, its part %s is %s (and no follow queued)",
                       r->of, ast ? ast : "gone", r->id, r->status);
        json_decref(again);
    }
    json_decref(p);
}

/* SPEC §8 for carts: each part of the items of the cart primary r (this SKU's segment k) in
 * other SKUs exists now, names r, holds its units and agrees with r's status (or the change is
 * queued in k's follow set, or r read again now agrees). */
static void ic_check_cart_items(ic_report *rep, const char *sku, int k, const struct ic_mrec *r,
                                const char *hex, const struct ic_multi *m, ic_keys *sr)
{
    for (size_t j = 0; j < json_array_size(r->items); j++) {
        json_t *it = json_array_get(r->items, j);
        const char *isku = json_string_value(json_object_get(it, "sku"));
        json_t *ps = json_object_get(it, "parts");
        long long iq = ic_json_whole(json_object_get(it, "quantity")), sum = 0;
        if (!isku || !json_is_array(ps) || json_array_size(ps) < 1 || iq < 1) {
            ic_problem(rep, "multi", "cart %s: item %zu is not {sku, quantity, parts}", r->id, j);
            continue;
        }
        for (size_t i = 0; i < json_array_size(ps); i++)
            sum += ic_json_whole(json_object_get(json_array_get(ps, i), "quantity"));
        if (sum != iq)
            ic_problem(rep, "multi", "cart %s: item %s: parts sum to %lld units, quantity %lld",
                       r->id, isku, sum, iq);
        if (strcmp(isku, sku) == 0) { /* the home item: the primary's own parts */
            long long own = 0;
            for (int i = 0; i < r->nparts; i++)
                own += r->pq[i];
            if (j != 0 || own != iq)
                ic_problem(rep, "multi",
                           "cart %s: the home item %s is not its first item with its parts", r->id,
                           sku);
            continue;
        }
        for (size_t i = 0; i < json_array_size(ps); i++) {
            json_t *e = json_array_get(ps, i);
            long long pk = ic_json_whole(json_object_get(e, "segment"));
            long long pq = ic_json_whole(json_object_get(e, "quantity"));
            char pid[600];
            snprintf(pid, sizeof pid, "%s-%lld-%s", hex, pk, isku);
            int unread = 0;
            json_t *p = ic_record_now(sr, isku, (int)pk, pid, &unread, rep);
            if (unread)
                continue;
            const char *of = json_string_value(json_object_get(p, "part_of"));
            if (p == NULL || !of || strcmp(of, r->id) != 0) {
                ic_problem(rep, "multi",
                           "cart %s: its part %s (%s segment %lld, %lld units) is %s: "
                           "half a cart",
                           r->id, pid, isku, pk, pq, p ? "another order's" : "missing");
                json_decref(p);
                continue;
            }
            if (ic_json_whole(json_object_get(p, "quantity")) != pq)
                ic_problem(rep, "multi", "cart %s: part %s holds %lld units, the cart says %lld",
                           r->id, pid, ic_json_whole(json_object_get(p, "quantity")), pq);
            int cls = ic_class_of(p);
            if (cls != ic_status_class(r->st) && !ic_follow_queued(m, k, pid, r->status) &&
                ic_class_now(sr, sku, k, r->id, rep) != cls) {
                json_t *again = ic_record_now(sr, isku, (int)pk, pid, &unread, rep);
                if (!unread && ic_class_of(again) != ic_class_now(sr, sku, k, r->id, rep))
                    ic_problem(rep, "multi",
                               "cart %s is %s, its part %s is %s (and no follow queued)", r->id,
                               r->status, pid, json_string_value(json_object_get(p, "status")));
                json_decref(again);
            }
            json_decref(p);
        }
    }
}

static void ic_check_multi(ic_report *rep, const char *sku, const struct ic_multi *m, ic_keys *sr)
{
    for (size_t i = 0; i < m->n; i++) {
        const struct ic_mrec *r = &m->rec[i];
        char hex[33];
        int k;
        if (ic_split_id(r->id, sku, hex, &k) != 0 || k != r->segment) {
            ic_problem(rep, "multi", "segment %d: order %s: id is not <32 hex>-%d-%s", r->segment,
                       r->id, r->segment, sku);
            continue;
        }
        if (r->of[0] != '\0') { /* a part: its primary exists and lists it */
            char phex[33], psku[256];
            int pk;
            if (ic_split_id(r->of, sku, phex, &pk) != 0 &&
                ic_split_any(r->of, phex, &pk, psku, sizeof psku) == 0 && strcmp(psku, sku) != 0 &&
                strcmp(phex, hex) == 0) {
                ic_check_cart_part(rep, sku, r, hex, psku, pk, sr); /* a cart's, in this SKU */
                continue;
            }
            if (ic_split_id(r->of, sku, phex, &pk) != 0 || strcmp(phex, hex) != 0 || pk == k) {
                ic_problem(rep, "multi", "segment %d: part %s: part_of %s is not its order's id", k,
                           r->id, r->of);
                continue;
            }
            const struct ic_mrec *p = ic_multi_find(m, r->of);
            if (p == NULL || p->of[0] != '\0' || p->nparts == 0) {
                if (ic_hfield(m->intents, hex) == NULL &&
                    ic_orphan_now(sr, sku, r->id, k, r->of, pk, hex, rep))
                    ic_problem(rep, "multi",
                               "segment %d: part %s: its primary %s is not a record of segment "
                               "%d and no intent for %s is left: half an order",
                               k, r->id, r->of, pk, hex);
                continue;
            }
            int listed = 0;
            for (int j = 0; j < p->nparts; j++)
                listed |= p->pk[j] == k && p->pq[j] == r->quantity;
            if (!listed)
                ic_problem(rep, "multi",
                           "segment %d: part %s of %lld units: its primary's parts do not list "
                           "segment %d with %lld",
                           k, r->id, r->quantity, k, r->quantity);
            continue;
        }
        /* a primary: every other part exists, with its quantity and an agreeing status */
        if (r->items)
            ic_check_cart_items(rep, sku, k, r, hex, m, sr);
        for (int j = 0; j < r->nparts; j++) {
            if (r->pk[j] == k)
                continue;
            char pid[300];
            snprintf(pid, sizeof pid, "%s-%d-%s", hex, r->pk[j], sku);
            const struct ic_mrec *p = ic_multi_find(m, pid);
            if (p == NULL || strcmp(p->of, r->id) != 0) {
                ic_problem(rep, "multi",
                           "order %s: its part %s (segment %d, %lld units) is %s: half an "
                           "order",
                           r->id, pid, r->pk[j], r->pq[j], p ? "another order's" : "missing");
                continue;
            }
            if (p->quantity != r->pq[j])
                ic_problem(rep, "multi", "order %s: part %s holds %lld units, the order says %lld",
                           r->id, pid, p->quantity, r->pq[j]);
            /* a part lags behind its primary under a follow queued with it (read in the same
             * MULTI); a part ahead of the primary read earlier (the sweeper ended both since)
             * agrees with the primary read again now */
            if (ic_status_class(p->st) != ic_status_class(r->st) &&
                !ic_follow_queued(m, k, pid, r->status) &&
                ic_class_now(sr, sku, k, r->id, rep) != ic_status_class(p->st))
                ic_problem(rep, "multi", "order %s is %s, its part %s is %s (and no follow queued)",
                           r->id, r->status, pid, p->status);
        }
    }
}

/* Checks one segment snapshot: EXEC's reply {stock, sver, cnt, orders, idem, due, follow, lock
 * exists}; its version against meta's unless live (a PUT may be rolling out). */
static void ic_check_segment(ic_report *rep, const char *sku, int k, const redisReply *x,
                             struct ic_multi *m, int versioned)
{
    const redisReply *stock = x->element[0], *sver = x->element[1], *cnt = x->element[2],
                     *orders = x->element[3], *idem = x->element[4], *due = x->element[5],
                     *follow = x->element[6];
    rep->locks_held += x->element[7]->type == REDIS_REPLY_INTEGER && x->element[7]->integer > 0;
    int ok = 1;
    long long n = ic_reply_ll(stock, &ok);
    if (!ok) {
        ic_problem(rep, "segment", "segment %d: stock key missing or not an integer", k);
        n = 0;
    }
    ok = 1;
    long long v = ic_reply_ll(sver, &ok);
    if (versioned && (!ok || v != rep->version))
        ic_problem(rep, "segment", "segment %d: sver %lld, meta.version %lld", k, ok ? v : -1,
                   rep->version);
    ok = 1;
    long long t = ic_reply_ll(ic_hfield(cnt, "t"), &ok);
    long long s = ic_reply_ll(ic_hfield(cnt, "s"), &ok);
    long long o = ic_reply_ll(ic_hfield(cnt, "o"), &ok);
    if (!ok)
        ic_problem(rep, "segment", "segment %d: cnt hash lacks t, s or o", k);
    if (n < 0) {
        rep->negative_segments++;
        ic_problem(rep, "segment", "segment %d: stock %lld < 0", k, n);
    }
    if (t != n + s)
        ic_problem(rep, "segment", "segment %d: t %lld != stock %lld + s %lld", k, t, n, s);
    long long units, live, held;
    ic_check_records(rep, sku, k, orders, due, m, &units, &live, &held);
    ic_note_follows(rep, k, follow, m);
    int rok = 1;
    const redisReply *rf = ic_hfield(cnt, "r");
    long long r = rf ? ic_reply_ll(rf, &rok) : 0;
    if (!rok || r != held)
        ic_problem(rep, "segment", "segment %d: r %lld != %lld units in reserved order records", k,
                   r, held);
    rep->reserved += held;
    /* every entry of the due set names a hold of the segment (checked with the records) */
    for (size_t i = 0; due && due->type == REDIS_REPLY_ARRAY && i + 1 < due->elements; i += 2)
        if (ic_hfield(orders, due->element[i]->str) == NULL)
            ic_problem(rep, "segment",
                       "segment %d: due set names %s, not a reserved order of the segment", k,
                       due->element[i]->str);
    if (s != units)
        ic_problem(rep, "segment", "segment %d: s %lld != %lld units in live order records", k, s,
                   units);
    if (o != live)
        ic_problem(rep, "segment", "segment %d: o %lld != %lld live order records", k, o, live);
    if (idem != NULL && idem->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i + 1 < idem->elements; i += 2) {
            const char *id = idem->element[i + 1]->str;
            if (ic_hfield(orders, id) == NULL)
                ic_problem(rep, "segment",
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

/* Is name (what follows a segment key's tag) one that outlives a drop of the segment: a "kept"
 * row of store_keys.txt, or a key under one (lockcore's lock:fence, lock:unlock)? */
static int ic_kept_name(const char *name)
{
    static const struct {
        const char *name;
        int kept;
    } rows[] = {
#define IC_SEG_ROW(scope, name, type, kept) {(scope) == STORE_KEYS_SEG ? (name) : "", (kept)},
        STORE_KEYS_ROWS(IC_SEG_ROW)
#undef IC_SEG_ROW
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        size_t len = strlen(rows[i].name);
        if (rows[i].kept && len > 0 && strncmp(name, rows[i].name, len) == 0 &&
            (name[len] == '\0' || name[len] == ':'))
            return 1;
    }
    return 0;
}

/* Reports segment keys of sku with an index >= rep->segments that a drop deletes (or that the
 * schema does not know): the sver tombstone, the order log until the sink has drained it, the
 * undone tombstones (expiring by their TTL), the rules version and lockcore's keys stay. */
static int ic_check_strays(redisContext *c, const char *sku, ic_report *rep)
{
    char pattern[256];
    snprintf(pattern, sizeof pattern, STORE_KEYS_PREFIX "{%s" STORE_KEYS_SEG_SEP "*}:*", sku);
    size_t prefix = strlen(STORE_KEYS_PREFIX "{" STORE_KEYS_SEG_SEP) + strlen(sku);
    char cursor[32] = "0";
    do {
        redisReply *r = redisCommand(c, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
        if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            ic_problem(rep, "read", "SCAN failed: %s",
                       r ? (r->str ? r->str : "bad reply") : c->errstr);
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
            if (idx >= rep->segments && !ic_kept_name(end + 2))
                ic_problem(rep, "sku", "stray key %s (segment %ld >= %d segments)", key, idx,
                           rep->segments);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    return 0;
}

/* SPEC §11, with a limit: no user holds more than the limit in live orders, and every live
 * order of a user is counted in the user's entries (inv:2:{S}:users, field the user: a JSON
 * object keyed by the order id's hex part), so the count can never let a user past it. h: the
 * entries (HGETALL), read before the segments. */
static void ic_check_users(const redisReply *h, ic_report *rep)
{
    if (rep->users_overflow)
        ic_problem(rep, "users", "more than %d users: not all checked", IC_MAX_USERS);
    for (int i = 0; i < rep->nusers; i++) {
        const struct ic_user *u = &rep->users[i];
        if (u->units > rep->limit)
            ic_problem(rep, "users", "user %s holds %lld units in live orders, over the limit %lld",
                       u->user, u->units, rep->limit);
        rep->max_user_units = u->units > rep->max_user_units ? u->units : rep->max_user_units;
        const redisReply *v = ic_hfield(h, u->user);
        json_t *e = v && v->type == REDIS_REPLY_STRING ? json_loadb(v->str, v->len, 0, NULL) : NULL;
        for (int j = 0; j < u->nhex; j++)
            if (!json_object_get(e, u->hex[j]))
                ic_problem(rep, "users", "user %s: live order %s... not in the user's entries",
                           u->user, u->hex[j]);
        json_decref(e);
    }
}

/* Reads segment k of sku in one MULTI/EXEC on c: {stock, sver, cnt, orders, idem, due, follow,
 * lock exists}. The EXEC reply, or NULL (rep says why). */
static redisReply *ic_read_segment(redisContext *c, const ic_options *opt, const char *sku, int k,
                                   ic_report *rep)
{
    static const char *const cmd[] = {"GET",     "GET",    "HGETALL", "HGETALL",
                                      "HGETALL", "ZRANGE", "ZRANGE",  "EXISTS"};
    static const char *const name[] = {STORE_KEY_SEG_stock,  STORE_KEY_SEG_sver, STORE_KEY_SEG_cnt,
                                       STORE_KEY_SEG_orders, STORE_KEY_SEG_idem, STORE_KEY_SEG_due,
                                       STORE_KEY_SEG_follow, STORE_KEY_SEG_lock};
    redisAppendCommand(c, "MULTI");
    for (int i = 0; i < 8; i++) {
        char key[512];
        ic_seg_key(key, sizeof key, opt, sku, k, name[i]);
        if (strcmp(cmd[i], "ZRANGE") == 0)
            redisAppendCommand(c, "ZRANGE %s 0 -1 WITHSCORES", key);
        else
            redisAppendCommand(c, "%s %s", cmd[i], key);
    }
    redisAppendCommand(c, "EXEC");
    redisReply *x = NULL;
    int io = 0;
    for (int i = 0; i < 10; i++) {
        void *r = NULL;
        if (redisGetReply(c, &r) != REDIS_OK) {
            io = 1;
            break;
        }
        if (i == 9)
            x = r;
        else
            freeReplyObject(r);
    }
    if (io || x == NULL || x->type != REDIS_REPLY_ARRAY || x->elements != 8) {
        ic_problem(rep, "read", "segment %d: MULTI/EXEC failed: %s", k,
                   io                                  ? c->errstr
                   : x && x->type == REDIS_REPLY_ERROR ? x->str
                                                       : "bad reply");
        freeReplyObject(x);
        return NULL;
    }
    return x;
}

/* A hash of sku read whole (HGETALL), or NULL (rep says why). */
static redisReply *ic_read_hash(ic_keys *sr, const char *sku, const char *name, ic_report *rep)
{
    char key[512];
    ic_sku_key(key, sizeof key, sr->opt, sku, name);
    redisContext *c = ic_redis_for(sr, key, rep);
    redisReply *h = c ? redisCommand(c, "HGETALL %s", key) : NULL;
    if (c != NULL && (h == NULL || h->type != REDIS_REPLY_ARRAY)) {
        ic_problem(rep, "read", "HGETALL %s failed: %s", key,
                   h ? (h->str ? h->str : "bad reply") : c->errstr);
        freeReplyObject(h);
        return NULL;
    }
    return h;
}

int ic_check(const char *redis_url, const char *sku, const ic_options *opt_in, ic_report *rep)
{
    static const ic_options defaults;
    const ic_options *opt = opt_in ? opt_in : &defaults;
    memset(rep, 0, sizeof *rep);
    rep->ok = 1;
    ic_keys sr;
    struct ic_multi m;
    memset(&m, 0, sizeof m);
    redisReply *users = NULL;
    if (ic_redis_open(&sr, redis_url, rep) != 0)
        return -1;
    sr.opt = opt;
    int rc = -1;
    char key[512];
    ic_sku_key(key, sizeof key, opt, sku, STORE_KEY_SKU_meta);
    redisContext *c = ic_redis_for(&sr, key, rep);
    redisReply *meta = c ? redisCommand(c, "HMGET %s version segments state limit", key) : NULL;
    if (meta == NULL || meta->type != REDIS_REPLY_ARRAY || meta->elements != 4) {
        if (c != NULL)
            ic_problem(rep, "read", "HMGET %s failed: %s", key,
                       meta ? (meta->str ? meta->str : "bad reply") : c->errstr);
        freeReplyObject(meta);
        goto out;
    }
    int ok = 1;
    rep->version = ic_reply_ll(meta->element[0], &ok);
    rep->segments = (int)ic_reply_ll(meta->element[1], &ok);
    int rolling =
        meta->element[2]->type == REDIS_REPLY_STRING && strcmp(meta->element[2]->str, "p") == 0;
    int lok = 1;
    rep->limit =
        meta->element[3]->type == REDIS_REPLY_STRING ? ic_reply_ll(meta->element[3], &lok) : 0;
    freeReplyObject(meta);
    if (ok && rolling && !opt->live)
        ic_problem(rep, "sku", "meta.state p: version %lld not rolled out to every segment",
                   rep->version);
    if (!ok) {
        rep->found = 0;
        ic_problem(rep, "sku", "no SKU %s (meta missing or incomplete)", sku);
        rc = 0;
        goto out;
    }
    rep->found = 1;
    if (rep->segments < 1 || rep->segments > IC_MAX_SEGMENTS) {
        ic_problem(rep, "sku", "meta.segments %d out of range", rep->segments);
        rc = 0;
        goto out;
    }
    /* the users' entries before the segments: an entry goes only after its order has ended,
     * and no order becomes live without a request, so an order read live below was in its
     * user's entries when they were read (the sweeper may end holds meanwhile) */
    int check_users = rep->limit > 0 && !opt->skip_users && !opt->live;
    if (check_users && !(users = ic_read_hash(&sr, sku, STORE_KEY_SKU_users, rep)))
        goto out;
    /* the intents first: an orphan part read later is covered by an intent read earlier (a
     * request deletes its intent only after its parts are made whole or undone) */
    if (!(m.intents = ic_read_hash(&sr, sku, STORE_KEY_SKU_multi, rep)))
        goto out;
    rep->intents = (long long)m.intents->elements / 2;
    { /* the carts being made whose home is this SKU (their parts are checked from each side) */
        redisReply *carts = ic_read_hash(&sr, sku, STORE_KEY_SKU_cart, rep);
        if (!carts)
            goto out;
        rep->intents += (long long)carts->elements / 2;
        freeReplyObject(carts);
    }
    for (int k = 0; k < rep->segments; k++) {
        ic_seg_key(key, sizeof key, opt, sku, k, STORE_KEY_SEG_stock);
        if (!(c = ic_redis_for(&sr, key, rep)))
            goto out;
        redisReply *x = ic_read_segment(c, opt, sku, k, rep);
        if (x == NULL)
            goto out;
        ic_check_segment(rep, sku, k, x, &m, !opt->live);
        freeReplyObject(x);
    }
    if (!opt->live && opt->key_schema != 1)
        for (int i = 0; i < (sr.cluster ? sr.n : 1); i++)
            if (ic_check_strays(sr.cluster ? sr.node[i] : sr.seed, sku, rep) != 0)
                goto out;
    if (rep->sold != rep->stock_total - rep->remaining)
        ic_problem(rep, "sku", "sold %lld != stock_total %lld - remaining %lld", rep->sold,
                   rep->stock_total, rep->remaining);
    if (!opt->live)
        ic_check_multi(rep, sku, &m, &sr);
    if (opt->quiescent && (rep->follows > 0 || rep->intents > 0))
        ic_problem(rep, "multi", "not quiescent: %lld follow(s) queued, %lld intent(s) left",
                   rep->follows, rep->intents);
    if (check_users)
        ic_check_users(users, rep);
    rc = 0;
out:
    freeReplyObject(users);
    ic_multi_free(&m);
    ic_redis_close(&sr);
    return rc;
}

long long ic_wait_drained(const char *redis_url, const char *sku, const ic_options *opt,
                          int timeout_ms)
{
    ic_options o = opt ? *opt : (ic_options){0};
    o.quiescent = 0;
    o.live = 0;
    o.skip_users = 1;
    ic_report *rep = malloc(sizeof *rep);
    if (rep == NULL)
        return -1;
    struct timeval t0, t;
    gettimeofday(&t0, NULL);
    for (;;) {
        long long left = -1;
        if (ic_check(redis_url, sku, &o, rep) == 0)
            left = rep->found ? rep->follows + rep->intents : 0; /* no SKU: nothing to drain */
        gettimeofday(&t, NULL);
        long long ms = (t.tv_sec - t0.tv_sec) * 1000LL + (t.tv_usec - t0.tv_usec) / 1000;
        if (left <= 0 || ms >= timeout_ms) { /* drained, or unreadable: the caller's to judge */
            free(rep);
            return left;
        }
        struct timespec nap = {0, 100 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
}

void ic_report_print(const char *what, const ic_report *rep)
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

json_t *ic_report_json(const char *sku, const ic_report *rep)
{
    json_t *segs = json_array(), *problems = json_array();
    for (int k = 0; segs && rep->found && k < rep->segments && k < IC_MAX_SEGMENTS; k++)
        json_array_append_new(segs, json_pack("{sI sI}", "stock", (json_int_t)rep->seg_stock[k],
                                              "sold", (json_int_t)rep->seg_sold[k]));
    for (int i = 0; problems && i < rep->nlisted; i++)
        json_array_append_new(problems, json_pack("{ss ss}", "check", rep->problem[i].check, "text",
                                                  rep->problem[i].text));
    json_t *o = json_pack(
        "{ss sb sb sI si sI sI sI sI sI sI sI sI sI sI sI sI sI sI si si sI sI "
        "sI sI}",
        "sku", sku, "ok", rep->ok, "found", rep->found, "version", (json_int_t)rep->version,
        "segments", rep->segments, "stock_total", (json_int_t)rep->stock_total, "remaining",
        (json_int_t)rep->remaining, "sold", (json_int_t)rep->sold, "orders",
        (json_int_t)rep->orders, "records", (json_int_t)rep->records, "live_units",
        (json_int_t)rep->live_units, "live_orders", (json_int_t)rep->live_orders, "cancelled",
        (json_int_t)rep->cancelled, "expired", (json_int_t)rep->expired, "reserved",
        (json_int_t)rep->reserved, "reserved_orders", (json_int_t)rep->reserved_orders,
        "confirmed_orders", (json_int_t)rep->confirmed_orders, "limit", (json_int_t)rep->limit,
        "max_user_units", (json_int_t)rep->max_user_units, "negative_segments",
        rep->negative_segments, "locks_held", rep->locks_held, "multi_orders",
        (json_int_t)rep->multi_orders, "live_parts", (json_int_t)rep->live_parts, "follows",
        (json_int_t)rep->follows, "intents", (json_int_t)rep->intents);
    if (o == NULL || segs == NULL || problems == NULL) {
        json_decref(o);
        json_decref(segs);
        json_decref(problems);
        return NULL;
    }
    json_object_set_new(o, "segment", segs);
    json_object_set_new(o, "nproblems", json_integer(rep->nproblems));
    json_object_set_new(o, "problems", problems);
    return o;
}

int ic_check_group(const char *redis_url, const char *group, const char *const *skus, int nskus,
                   ic_report *rep)
{
    static const ic_options opt;
    memset(rep, 0, sizeof *rep);
    rep->ok = 1;
    ic_keys sr;
    if (ic_redis_open(&sr, redis_url, rep) != 0)
        return -1;
    sr.opt = &opt;
    int rc = -1;
    redisReply *lim = NULL, *entries = NULL;
    char key[512], ukey[512];
    snprintf(key, sizeof key, STORE_KEYS_PREFIX "{G=%s}:%s", group, STORE_KEY_GROUP_meta);
    snprintf(ukey, sizeof ukey, STORE_KEYS_PREFIX "{G=%s}:%s", group, STORE_KEY_GROUP_users);
    redisContext *c = ic_redis_for(&sr, key, rep);
    /* the limit and the users' entries (one slot) before the segments, as ic_check does: an
     * entry goes only after its order has ended */
    lim = c ? redisCommand(c, "HGET %s limit", key) : NULL;
    entries = c ? redisCommand(c, "HGETALL %s", ukey) : NULL;
    if (!lim || !entries || entries->type != REDIS_REPLY_ARRAY ||
        (lim->type != REDIS_REPLY_STRING && lim->type != REDIS_REPLY_NIL)) {
        if (c)
            ic_problem(rep, "read", "group %s: HGET/HGETALL failed: %s", group,
                       c->err ? c->errstr : "bad reply");
        goto out;
    }
    if (lim->type == REDIS_REPLY_NIL) { /* no such group (deleted): it caps nothing */
        rc = 0;
        goto out;
    }
    int ok = 1;
    rep->found = 1;
    rep->limit = ic_reply_ll(lim, &ok);
    if (!ok || rep->limit < 1)
        ic_problem(rep, "users", "group %s: limit %s is not a positive integer", group, lim->str);
    for (int s = 0; s < nskus; s++) {
        ic_sku_key(key, sizeof key, &opt, skus[s], STORE_KEY_SKU_meta);
        redisContext *mc = ic_redis_for(&sr, key, rep);
        redisReply *m = mc ? redisCommand(mc, "HMGET %s segments hwm", key) : NULL;
        int segs = 0, hwm = 0, sok = 1;
        if (m && m->type == REDIS_REPLY_ARRAY && m->elements == 2) {
            segs = m->element[0]->type == REDIS_REPLY_STRING ? (int)ic_reply_ll(m->element[0], &sok)
                                                             : 0;
            hwm = m->element[1]->type == REDIS_REPLY_STRING ? (int)ic_reply_ll(m->element[1], &sok)
                                                            : 0;
        }
        freeReplyObject(m);
        if (!mc)
            goto out;
        segs = hwm > segs ? hwm : segs;
        for (int k = 0; k < segs && k < IC_MAX_SEGMENTS; k++) {
            ic_seg_key(key, sizeof key, &opt, skus[s], k, STORE_KEY_SEG_orders);
            redisContext *sc = ic_redis_for(&sr, key, rep);
            redisReply *h = sc ? redisCommand(sc, "HGETALL %s", key) : NULL;
            if (!h || h->type != REDIS_REPLY_ARRAY) {
                if (sc)
                    ic_problem(rep, "read", "HGETALL %s failed", key);
                freeReplyObject(h);
                goto out;
            }
            for (size_t i = 0; i + 1 < h->elements; i += 2) {
                const redisReply *v = h->element[i + 1];
                json_t *o =
                    v->type == REDIS_REPLY_STRING ? json_loadb(v->str, v->len, 0, NULL) : NULL;
                const char *st = json_string_value(json_object_get(o, "status"));
                const char *user = json_string_value(json_object_get(o, "user_id"));
                json_t *units = json_object_get(json_object_get(o, "grp"), group);
                int live = st && (strcmp(st, "created") == 0 || strcmp(st, "reserved") == 0 ||
                                  strcmp(st, "confirmed") == 0);
                if (live && user && json_is_integer(units) && !json_object_get(o, "part_of"))
                    ic_note_user(rep, user, h->element[i]->str, json_integer_value(units));
                json_decref(o);
            }
            freeReplyObject(h);
        }
    }
    /* no user over the group's limit, and every live order counted in the user's entries */
    for (int i = 0; i < rep->nusers; i++) {
        const struct ic_user *u = &rep->users[i];
        if (u->units > rep->limit)
            ic_problem(rep, "users",
                       "group %s: user %s holds %lld units in live orders, over "
                       "the limit %lld",
                       group, u->user, u->units, rep->limit);
        rep->max_user_units = u->units > rep->max_user_units ? u->units : rep->max_user_units;
        const redisReply *v = ic_hfield(entries, u->user);
        json_t *e = v && v->type == REDIS_REPLY_STRING ? json_loadb(v->str, v->len, 0, NULL) : NULL;
        for (int j = 0; j < u->nhex; j++)
            if (!json_object_get(e, u->hex[j]))
                ic_problem(rep, "users",
                           "group %s: user %s: live order %s... not in the group's entries", group,
                           u->user, u->hex[j]);
        json_decref(e);
    }
    if (rep->users_overflow)
        ic_problem(rep, "users", "group %s: more than %d users: not all checked", group,
                   IC_MAX_USERS);
    rc = 0;
out:
    freeReplyObject(lim);
    freeReplyObject(entries);
    ic_redis_close(&sr);
    return rc;
}
