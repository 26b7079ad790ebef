/*
 * sink_run — the sink's loop (SPEC §12). One thread; every Redis call goes through sink_redis
 * (routed by key, each with a deadline), every database call through sink_db (with the
 * connection's timeouts).
 *
 * Each turn of the loop:
 *   1. every second, discovery: the SKU registry (inv:2:skus), each SKU's meta (segments,
 *      hwm, lhwm, version, state), and for each new segment k < segments its stream
 *      inv:2:{S/k}:log and the consumer group (XGROUP CREATE ... 0 MKSTREAM; BUSYGROUP means it
 *      exists), and for each k < max(hwm, lhwm) its log if it is there (no MKSTREAM);
 *   2. a read round: XREADGROUP on a window of streams (round robin), at most --batch entries
 *      from each; a stream first gives back this consumer's own pending entries (id 0: what a
 *      sink of the same name read before it was killed), then new ones (">");
 *   3. what was read is written in transactions of at most --batch entries (sink_db_write), and
 *      acknowledged (XACK) only after the COMMIT: a crash between the two replays the entries,
 *      which the database absorbs (order_events is unique per stream entry, orders only moves
 *      forward);
 *   4. every --maintain-ms: XAUTOCLAIM of entries pending longer than --claim-idle-ms (a dead
 *      sink's), then per stream XINFO GROUPS / XPENDING to find the lowest id any group still
 *      needs, XTRIM MINID to it, and the lag and pending gauges; then (database up) the
 *      segments with order changes made without a log entry (cnt's u) are backfilled from
 *      their order records (find_unlogged), and the drained logs of dropped segments deleted
 *      (drop_logs; docs/design.md "How the log and the sink agree").
 * A failing Redis or database is retried with a capped, jittered exponential back-off; the
 * entries in hand are kept and written when it comes back. SIGTERM ends the loop once the batch
 * in flight is committed and acknowledged (or, with the database down, abandoned: its entries
 * stay pending and are read again).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "orderlog.h"
#include "sink.h"
#include "sink_db.h"
#include "sink_entry.h"
#include "sink_metrics.h"
#include "sink_records.h"
#include "sink_redis.h"
#include "store.h"
#include "store_scripts.h"

#define WINDOW 64        /* streams per read round / maintenance round trip */
#define POLL_MS 100      /* idle wait after a full pass over the streams found nothing */
#define DISCOVER_MS 1000 /* registry and meta scan period */
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define SEGMENTS_MAX 4096 /* a meta claiming more is damaged: those are not followed */
#define GROUPS_MAX 16     /* consumer groups of one stream taken into account when trimming */

struct stream {
    char sku[SINK_SKU_MAX + 1];
    int segment;
    char key[STORE_KEY_MAX];
    int replay;           /* 1: still reading this consumer's own pending entries */
    char replay_from[48]; /* the id after which the replay continues */
    int gone;             /* the stream no longer exists: removed by purge_streams */
    int mk;               /* when its group is made: 1 creates the stream too (MKSTREAM), 0 only
                             a stream that exists (a dropped segment's log) */
};

/* A SKU's meta as the last discovery read it. */
struct sku_view {
    char sku[SINK_SKU_MAX + 1];
    char version[24];
    long long segments, hwm, lhwm;
    int rolled; /* state "r" */
    int exists; /* meta has a version */
};

struct sink {
    const struct sink_config *cfg;
    sink_redis *redis;
    sink_db *db;
    struct stream *streams;
    int nstreams, cap;
    struct sku_view *views; /* the last discovery's, one per SKU of the registry */
    int nviews;
    int next; /* first stream of the next read round */
    struct sink_entry *entries;
    int nentries, entcap;
    int backoff_ms;
    int redis_up, db_up;
};

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long long wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleeps ms, in steps, returning early once a stop is asked. */
static void nap(int ms)
{
    while (ms > 0 && !sink_stop) {
        int step = ms < 50 ? ms : 50;
        struct timespec ts = {0, (long)step * 1000000L};
        nanosleep(&ts, NULL);
        ms -= step;
    }
}

/* Waits the current back-off (jittered: a random time in [d/2, d]) and doubles it, up to the
 * cap. */
static void backoff(struct sink *s)
{
    int d = s->backoff_ms;
    s->backoff_ms = d * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : d * 2;
    nap(d / 2 + rand() % (d / 2 + 1));
}

static void health(struct sink *s)
{
    sink_metrics_health(s->redis_up, s->db_up);
}

static void redis_failed(struct sink *s, const char *what, const char *why)
{
    sink_metrics_error(SINK_ERR_REDIS);
    log_msg(CONFIG_LOG_WARN, "sink_redis_error", "%s: %s", what, why);
    s->redis_up = 0;
    health(s);
}

static void redis_ok(struct sink *s)
{
    if (!s->redis_up) {
        s->redis_up = 1;
        health(s);
    }
}

/* Connects to the database when not connected. 0 when connected. */
static int ensure_db(struct sink *s)
{
    if (s->db != NULL)
        return 0;
    char err[512];
    if (sink_db_open(s->cfg->db, s->cfg->db_timeout_s, &s->db, err, sizeof err) != 0) {
        sink_metrics_error(SINK_ERR_DB);
        log_msg(CONFIG_LOG_WARN, "sink_db_error", "%s", err);
        s->db_up = 0;
        health(s);
        return -1;
    }
    log_msg(CONFIG_LOG_INFO, "sink_db_connected", "connected to the database, schema in place");
    s->db_up = 1;
    health(s);
    return 0;
}

/* ---- the streams ---- */

static int by_key(const void *a, const void *b)
{
    return strcmp(((const struct stream *)a)->key, ((const struct stream *)b)->key);
}

static struct stream *find_stream(struct sink *s, const char *key)
{
    struct stream probe;
    snprintf(probe.key, sizeof probe.key, "%s", key);
    return s->nstreams
               ? bsearch(&probe, s->streams, (size_t)s->nstreams, sizeof *s->streams, by_key)
               : NULL;
}

/* XGROUP CREATE for n new streams; those that have their group now are added. */
static void add_streams(struct sink *s, struct stream *fresh, int n)
{
    for (int off = 0; off < n; off += WINDOW) {
        int w = n - off < WINDOW ? n - off : WINDOW;
        struct sink_cmd cmds[WINDOW];
        const char *argv[WINDOW][6];
        for (int i = 0; i < w; i++) {
            const char *a[6] = {"XGROUP",       "CREATE", fresh[off + i].key,
                                ORDERLOG_GROUP, "0",      "MKSTREAM"};
            memcpy(argv[i], a, sizeof a);
            cmds[i] = (struct sink_cmd){
                .key = fresh[off + i].key, .argc = fresh[off + i].mk ? 6 : 5, .argv = argv[i]};
        }
        sink_redis_run(s->redis, w, cmds);
        for (int i = 0; i < w; i++) {
            const struct sink_cmd *c = &cmds[i];
            int ok = c->st == LC_OK || sink_cmd_error_is(c, "BUSYGROUP");
            if (!ok && !fresh[off + i].mk && c->st == LC_EREDIS &&
                (strstr(c->err, "requires the key to exist") != NULL ||
                 (c->reply && c->reply->type == REDIS_REPLY_ERROR &&
                  strstr(c->reply->str, "requires the key to exist") != NULL)))
                continue; /* a dropped segment without a log: nothing to follow */
            if (!ok) {
                if (c->st == LC_EREDIS)
                    log_msg(CONFIG_LOG_WARN, "sink_group_error", "XGROUP CREATE %s: %s",
                            fresh[off + i].key, c->err);
                else
                    redis_failed(s, "XGROUP CREATE", c->err);
                continue;
            }
            if (s->nstreams == s->cap) {
                int cap = s->cap ? s->cap * 2 : 64;
                struct stream *g = realloc(s->streams, (size_t)cap * sizeof *g);
                if (g == NULL)
                    break;
                s->streams = g;
                s->cap = cap;
            }
            s->streams[s->nstreams++] = fresh[off + i];
            log_msg(CONFIG_LOG_INFO, "sink_stream", "following %s", fresh[off + i].key);
        }
        sink_cmds_clear(w, cmds);
    }
    qsort(s->streams, (size_t)s->nstreams, sizeof *s->streams, by_key);
    sink_metrics_streams(s->nstreams);
}

static long long reply_int(const redisReply *r)
{
    if (r == NULL || r->type != REDIS_REPLY_STRING)
        return 0;
    char *end;
    long long v = strtoll(r->str, &end, 10);
    return *end == '\0' && v > 0 ? v : 0;
}

/* A new zeroed view at the end of *v (*n of *cap), or NULL when out of memory. */
static struct sku_view *view_slot(int *n, int *cap, struct sku_view **v)
{
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 64;
        struct sku_view *g = realloc(*v, (size_t)nc * sizeof *g);
        if (g == NULL)
            return NULL;
        *v = g;
        *cap = nc;
    }
    struct sku_view *x = &(*v)[(*n)++];
    memset(x, 0, sizeof *x);
    return x;
}

/* The registry, the metas, and the group of every new stream: of a segment k < segments
 * (made when missing), and of a segment k < max(hwm, lhwm) if its log is there (a layout being
 * rolled out from a larger one, a dropped segment's log left until drained: drop_logs). 0, or
 * -1 when Redis failed. */
static int discover(struct sink *s)
{
    char err[200];
    const char *argv[] = {"SMEMBERS", store_registry_key()};
    redisReply *r = sink_redis_cmd(s->redis, argv[1], 2, argv, err, sizeof err);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        redis_failed(s, "SMEMBERS " STORE_KEY_PREFIX "skus",
                     r && r->type == REDIS_REPLY_ERROR ? r->str : err);
        freeReplyObject(r);
        return -1;
    }
    struct stream *fresh = NULL;
    int nfresh = 0, capfresh = 0, rc = 0;
    struct sku_view *views = NULL;
    int nviews = 0, capviews = 0;
    size_t nsku = r->elements;
    for (size_t off = 0; off < nsku && rc == 0; off += WINDOW) {
        int w = nsku - off < WINDOW ? (int)(nsku - off) : WINDOW;
        struct sink_cmd cmds[WINDOW];
        const char *cargv[WINDOW][7];
        char keys[WINDOW][STORE_KEY_MAX];
        const char *skus[WINDOW];
        int m = 0;
        for (int i = 0; i < w; i++) {
            const redisReply *e = r->element[off + (size_t)i];
            if (e == NULL || e->type != REDIS_REPLY_STRING || !sink_sku_ok(e->str))
                continue; /* not a SKU name: nothing of ours can be under it */
            skus[m] = e->str;
            store_sku_key(keys[m], e->str, "meta");
            const char *a[7] = {"HMGET", keys[m], "segments", "hwm", "lhwm", "version", "state"};
            memcpy(cargv[m], a, sizeof a);
            cmds[m] = (struct sink_cmd){.key = keys[m], .argc = 7, .argv = cargv[m]};
            m++;
        }
        sink_redis_run(s->redis, m, cmds);
        for (int i = 0; i < m; i++) {
            const redisReply *h = cmds[i].reply;
            if (cmds[i].st != LC_OK || h == NULL || h->type != REDIS_REPLY_ARRAY ||
                h->elements != 5) {
                if (cmds[i].st != LC_EREDIS) {
                    redis_failed(s, "HMGET meta", cmds[i].err);
                    rc = -1;
                }
                continue;
            }
            long long a = reply_int(h->element[0]), b = reply_int(h->element[1]);
            long long lh = reply_int(h->element[2]);
            long long live = a > b ? a : b; /* segments whose keys may exist */
            if (live > SEGMENTS_MAX)
                live = SEGMENTS_MAX;
            long long segs = live > lh ? live : lh; /* and dropped ones' logs not yet drained */
            if (segs > SEGMENTS_MAX)
                segs = SEGMENTS_MAX;
            struct sku_view *v = view_slot(&nviews, &capviews, &views);
            if (v != NULL) {
                snprintf(v->sku, sizeof v->sku, "%s", skus[i]);
                const redisReply *ver = h->element[3], *state = h->element[4];
                v->exists = ver && ver->type == REDIS_REPLY_STRING && ver->len < sizeof v->version;
                snprintf(v->version, sizeof v->version, "%s", v->exists ? ver->str : "");
                /* a damaged meta claiming more than SEGMENTS_MAX is not followed past it */
                v->segments = a > SEGMENTS_MAX ? SEGMENTS_MAX : a;
                v->hwm = b > SEGMENTS_MAX ? SEGMENTS_MAX : b;
                v->lhwm = lh > SEGMENTS_MAX ? SEGMENTS_MAX : lh;
                v->rolled =
                    state && state->type == REDIS_REPLY_STRING && strcmp(state->str, "r") == 0;
            }
            for (int k = 0; k < segs; k++) {
                char key[STORE_KEY_MAX];
                sink_log_key(key, sizeof key, skus[i], k);
                if (find_stream(s, key) != NULL)
                    continue;
                if (nfresh == capfresh) {
                    int cap = capfresh ? capfresh * 2 : 16;
                    struct stream *g = realloc(fresh, (size_t)cap * sizeof *g);
                    if (g == NULL)
                        break;
                    fresh = g;
                    capfresh = cap;
                }
                struct stream *st = &fresh[nfresh++];
                memset(st, 0, sizeof *st);
                snprintf(st->sku, sizeof st->sku, "%s", skus[i]);
                st->segment = k;
                snprintf(st->key, sizeof st->key, "%s", key);
                st->replay = 1;
                snprintf(st->replay_from, sizeof st->replay_from, "0");
                /* Only the current layout's streams are made when missing: a segment a shrinking
                 * roll-out is dropping gets a log only from a commit before its drop, which
                 * that drop reports (lhwm), so an empty stream made here could be one no index
                 * covers. */
                st->mk = k < a;
            }
        }
        sink_cmds_clear(m, cmds);
    }
    freeReplyObject(r);
    if (nfresh > 0)
        add_streams(s, fresh, nfresh);
    free(fresh);
    if (rc == 0) {
        free(s->views);
        s->views = views;
        s->nviews = nviews;
        redis_ok(s);
    } else {
        free(views);
    }
    return rc;
}

/* Stops following the stream key (no entry of it may be in hand). */
static void remove_stream(struct sink *s, const char *key)
{
    struct stream *st = find_stream(s, key);
    if (st == NULL)
        return;
    int i = (int)(st - s->streams);
    memmove(&s->streams[i], &s->streams[i + 1], (size_t)(s->nstreams - i - 1) * sizeof *s->streams);
    s->nstreams--;
    if (s->next >= s->nstreams)
        s->next = 0;
    sink_metrics_streams(s->nstreams);
}

/* Removes the streams marked gone (no entry may be in hand: they name streams by index). */
static void purge_streams(struct sink *s)
{
    for (int i = s->nstreams - 1; i >= 0; i--)
        if (s->streams[i].gone) {
            char key[STORE_KEY_MAX];
            snprintf(key, sizeof key, "%s", s->streams[i].key);
            remove_stream(s, key);
        }
}

/* ---- entries in hand ---- */

static struct sink_entry *entry_slot(struct sink *s)
{
    if (s->nentries == s->entcap) {
        int cap = s->entcap ? s->entcap * 2 : 256;
        struct sink_entry *g = realloc(s->entries, (size_t)cap * sizeof *g);
        if (g == NULL)
            return NULL;
        s->entries = g;
        s->entcap = cap;
    }
    return &s->entries[s->nentries];
}

/* Appends the entries of list (an array of [id, fields]) read from stream si. Returns how many
 * were appended; *last gets the last id seen (for a replay). */
static int take_entries(struct sink *s, int si, const redisReply *list, char *last, size_t lastcap)
{
    int n = 0;
    if (list == NULL || list->type != REDIS_REPLY_ARRAY)
        return 0;
    const struct stream *st = &s->streams[si];
    for (size_t i = 0; i < list->elements; i++) {
        struct sink_entry *e = entry_slot(s);
        if (e == NULL)
            break;
        if (sink_entry_parse(list->element[i], si, st->sku, st->segment, e) != 0)
            continue;
        snprintf(last, lastcap, "%s", e->id);
        s->nentries++;
        n++;
    }
    return n;
}

/* ---- writing and acknowledging ---- */

/* Writes e[0..n) in one transaction, retrying (new connection, back-off) until it commits or a
 * stop is asked. 0 once committed. */
static int write_batch(struct sink *s, const struct sink_entry *e, int n)
{
    int ok = 0;
    for (int i = 0; i < n; i++)
        ok += e[i].ok;
    while (1) {
        if (ensure_db(s) == 0) {
            char err[512];
            long long inserted = 0;
            if (sink_db_write(s->db, e, n, &inserted, err, sizeof err) == 0) {
                s->backoff_ms = BACKOFF_MIN_MS;
                sink_metrics_written(ok, ok - inserted);
                for (int i = 0; i < n; i++)
                    if (!e[i].ok) {
                        sink_metrics_error(SINK_ERR_MALFORMED);
                        log_msg(CONFIG_LOG_ERROR, "sink_malformed",
                                "%s entry %s skipped (acknowledged): %s",
                                s->streams[e[i].stream].key, e[i].id, e[i].why);
                    }
                return 0;
            }
            sink_metrics_error(SINK_ERR_DB);
            log_msg(CONFIG_LOG_WARN, "sink_db_error", "batch of %d not written: %s", n, err);
            sink_db_free(s->db);
            s->db = NULL;
            s->db_up = 0;
            health(s);
        }
        if (sink_stop)
            return -1;
        backoff(s);
        if (sink_stop)
            return -1;
    }
}

/* XACK of e[0..n) (already committed), one XACK per stream, retried until Redis answers or a
 * stop is asked. An error reply (the group is gone) is logged, not retried. */
static void ack_batch(struct sink *s, const struct sink_entry *e, int n)
{
    /* The entries of one stream are contiguous in what a round read, but claims and replays
     * may interleave: collect per stream. */
    int *order = malloc((size_t)n * sizeof *order);
    char *done = calloc((size_t)n, 1);
    if (order == NULL || done == NULL) {
        free(order);
        free(done);
        return;
    }
    while (1) {
        int ncmd = 0, failed = 0;
        struct sink_cmd cmds[WINDOW];
        const char **argvs[WINDOW];
        int firsts[WINDOW];
        char *taken = calloc((size_t)n, 1);
        if (taken == NULL)
            break;
        for (int i = 0; i < n; i++) {
            if (done[i] || taken[i] || ncmd == WINDOW)
                continue;
            int cnt = 0;
            for (int j = i; j < n; j++)
                if (!done[j] && !taken[j] && e[j].stream == e[i].stream)
                    order[cnt++] = j;
            const char **argv = malloc((size_t)(cnt + 3) * sizeof *argv);
            if (argv == NULL)
                break;
            argv[0] = "XACK";
            argv[1] = s->streams[e[i].stream].key;
            argv[2] = ORDERLOG_GROUP;
            for (int j = 0; j < cnt; j++) {
                argv[3 + j] = e[order[j]].id;
                taken[order[j]] = 1;
            }
            argvs[ncmd] = argv;
            firsts[ncmd] = i;
            cmds[ncmd] = (struct sink_cmd){.key = argv[1], .argc = cnt + 3, .argv = argv};
            ncmd++;
        }
        sink_redis_run(s->redis, ncmd, cmds);
        for (int c = 0; c < ncmd; c++) {
            int si = e[firsts[c]].stream;
            if (cmds[c].st == LC_OK || cmds[c].st == LC_EREDIS) {
                if (cmds[c].st == LC_EREDIS)
                    log_msg(CONFIG_LOG_WARN, "sink_ack_error", "XACK %s: %s", s->streams[si].key,
                            cmds[c].err);
                for (int j = 0; j < n; j++)
                    if (e[j].stream == si && taken[j])
                        done[j] = 1;
            } else {
                failed++;
                redis_failed(s, "XACK", cmds[c].err);
            }
            free(argvs[c]);
        }
        sink_cmds_clear(ncmd, cmds);
        free(taken);
        int left = 0;
        for (int i = 0; i < n; i++)
            left += !done[i];
        if (left == 0)
            break;
        if (failed > 0) {
            if (sink_stop)
                break; /* left pending: read again by a sink of this name, or claimed */
            backoff(s);
        }
    }
    free(order);
    free(done);
}

/* Writes and acknowledges every entry in hand, --batch at a time. 0, or -1 when a stop cut it
 * short (what was not committed stays pending in Redis). */
static int flush(struct sink *s)
{
    int batch = s->cfg->batch;
    for (int off = 0; off < s->nentries; off += batch) {
        /* The lag gauge counts from the oldest entry still in hand while a batch is stuck. */
        unsigned long long oldest = 0;
        for (int i = off; i < s->nentries; i++)
            if (oldest == 0 || s->entries[i].ms < oldest)
                oldest = s->entries[i].ms;
        sink_metrics_in_hand((long long)oldest);
        int m = s->nentries - off < batch ? s->nentries - off : batch;
        if (write_batch(s, s->entries + off, m) != 0)
            return -1;
        ack_batch(s, s->entries + off, m);
    }
    sink_metrics_in_hand(0);
    s->nentries = 0;
    return 0;
}

/* ---- reading ---- */

/* One XREADGROUP on each stream of the next window. Returns the entries read (now in hand),
 * or -1 when Redis failed for any of them. */
static int read_round(struct sink *s)
{
    s->nentries = 0;
    int w = s->nstreams < WINDOW ? s->nstreams : WINDOW;
    struct sink_cmd cmds[WINDOW];
    const char *argv[WINDOW][10];
    int idx[WINDOW];
    char count[16];
    snprintf(count, sizeof count, "%d", s->cfg->batch);
    for (int i = 0; i < w; i++) {
        idx[i] = (s->next + i) % s->nstreams;
        struct stream *st = &s->streams[idx[i]];
        const char *a[10] = {"XREADGROUP",     "GROUP", ORDERLOG_GROUP,
                             s->cfg->consumer, "COUNT", count,
                             "STREAMS",        st->key, st->replay ? st->replay_from : ">"};
        memcpy(argv[i], a, sizeof a);
        cmds[i] = (struct sink_cmd){.key = st->key, .argc = 9, .argv = argv[i]};
    }
    if (s->nstreams > 0)
        s->next = (s->next + w) % s->nstreams;
    sink_redis_run(s->redis, w, cmds);
    int failed = 0, got = 0;
    struct stream lost[WINDOW];
    int nlost = 0;
    for (int i = 0; i < w; i++) {
        struct stream *st = &s->streams[idx[i]];
        const redisReply *r = cmds[i].reply;
        if (sink_cmd_error_is(&cmds[i], "NOGROUP")) {
            lost[nlost++] = *st; /* the stream was deleted (FLUSHALL, a DELETE): regroup */
            continue;
        }
        if (cmds[i].st != LC_OK) {
            failed++;
            redis_failed(s, "XREADGROUP", cmds[i].err);
            continue;
        }
        /* [[key, [entry, ...]]], or nil when nothing new. */
        const redisReply *list = NULL;
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0] &&
            r->element[0]->type == REDIS_REPLY_ARRAY && r->element[0]->elements == 2)
            list = r->element[0]->element[1];
        int n = take_entries(s, idx[i], list, st->replay_from, sizeof st->replay_from);
        if (st->replay && n == 0)
            st->replay = 0; /* own pending entries all handed back: new ones from now on */
        got += n;
    }
    sink_cmds_clear(w, cmds);
    if (nlost > 0) {
        /* Re-create the groups in place (add_streams would add them a second time), on a
         * stream that is there: one that is gone (another sink drained and dropped it, or a
         * FLUSHALL) is no longer followed; the next discovery makes it again when its segment
         * is in the layout. */
        for (int i = 0; i < nlost; i++) {
            const char *a[5] = {"XGROUP", "CREATE", lost[i].key, ORDERLOG_GROUP, "0"};
            char err[200];
            redisReply *r = sink_redis_cmd(s->redis, lost[i].key, 5, a, err, sizeof err);
            int gone = r && r->type == REDIS_REPLY_ERROR &&
                       strstr(r->str, "requires the key to exist") != NULL;
            log_msg(CONFIG_LOG_WARN, "sink_group_lost", "%s had no group %s: %s (%s)", lost[i].key,
                    ORDERLOG_GROUP, gone ? "the stream is gone" : "created again",
                    r ? (r->type == REDIS_REPLY_ERROR ? r->str : "ok") : err);
            freeReplyObject(r);
            struct stream *st = gone ? find_stream(s, lost[i].key) : NULL;
            if (st != NULL)
                st->gone = 1; /* removed once no entry in hand names streams by index */
        }
    }
    if (failed == 0 && w > 0)
        redis_ok(s);
    return failed ? -1 : got;
}

/* ---- maintenance: claims, trimming, gauges ---- */

/* XAUTOCLAIM on every stream: entries pending longer than --claim-idle-ms (a dead consumer's)
 * become this consumer's, and are written and acknowledged here. */
static void claim(struct sink *s)
{
    char idle[24], count[16];
    snprintf(idle, sizeof idle, "%d", s->cfg->claim_idle_ms);
    snprintf(count, sizeof count, "%d", s->cfg->batch);
    for (int off = 0; off < s->nstreams && !sink_stop; off += WINDOW) {
        int w = s->nstreams - off < WINDOW ? s->nstreams - off : WINDOW;
        struct sink_cmd cmds[WINDOW];
        const char *argv[WINDOW][8];
        for (int i = 0; i < w; i++) {
            const struct stream *st = &s->streams[off + i];
            const char *a[8] = {"XAUTOCLAIM", st->key, ORDERLOG_GROUP, s->cfg->consumer,
                                idle,         "0-0",   "COUNT",        count};
            memcpy(argv[i], a, sizeof a);
            cmds[i] = (struct sink_cmd){.key = st->key, .argc = 8, .argv = argv[i]};
        }
        sink_redis_run(s->redis, w, cmds);
        s->nentries = 0;
        for (int i = 0; i < w; i++) {
            const redisReply *r = cmds[i].reply;
            if (cmds[i].st != LC_OK) {
                if (cmds[i].st != LC_EREDIS)
                    redis_failed(s, "XAUTOCLAIM", cmds[i].err);
                continue;
            }
            if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 2) {
                char last[48];
                int n = take_entries(s, off + i, r->element[1], last, sizeof last);
                if (n > 0) {
                    sink_metrics_claimed(n);
                    log_msg(CONFIG_LOG_INFO, "sink_claimed",
                            "%s: %d entries claimed from a consumer idle over %d ms",
                            s->streams[off + i].key, n, s->cfg->claim_idle_ms);
                }
            }
        }
        sink_cmds_clear(w, cmds);
        flush(s);
    }
}

struct group_view {
    int n;
    struct {
        char name[64];
        int ours;
        long long pending;
        unsigned long long ld_ms, ld_seq; /* last-delivered-id */
        unsigned long long lo_ms, lo_seq; /* lowest pending id, when pending */
        int has_lo;
    } g[GROUPS_MAX];
    int broken;     /* the reply could not be read: this stream is not trimmed this time */
    int trim;       /* 1: XTRIM MINID minid */
    int probe;      /* 1: XRANGE after: is anything waiting past the sink's last delivery? */
    char minid[48]; /* the lowest id any group still needs */
    char after[48]; /* "(<last-delivered-id>" of the sink's group */
};

/* One round trip of a trim: the commands, their arguments, and which stream (who[c][0]) and
 * group or command kind (who[c][1]) each is for. */
struct trim_round {
    struct sink_cmd cmds[WINDOW * GROUPS_MAX];
    const char *argv[WINDOW * GROUPS_MAX][6];
    int who[WINDOW * GROUPS_MAX][2];
    int n;
};

/* Appends the command a[0..argc) routed by key, for stream i and group (or kind) k. */
static void round_add(struct trim_round *t, const char *key, const char *const *a, int argc, int i,
                      int k)
{
    memcpy(t->argv[t->n], a, (size_t)argc * sizeof *a);
    t->cmds[t->n] = (struct sink_cmd){.key = key, .argc = argc, .argv = t->argv[t->n]};
    t->who[t->n][0] = i;
    t->who[t->n][1] = k;
    t->n++;
}

static const redisReply *map_get(const redisReply *m, const char *name)
{
    if (m == NULL || m->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < m->elements; i += 2)
        if (m->element[i] && m->element[i]->type == REDIS_REPLY_STRING &&
            strcmp(m->element[i]->str, name) == 0)
            return m->element[i + 1];
    return NULL;
}

/* Compares (a_ms, a_seq) with (b_ms, b_seq). */
static int id_cmp(unsigned long long am, unsigned long long as, unsigned long long bm,
                  unsigned long long bs)
{
    if (am != bm)
        return am < bm ? -1 : 1;
    return as < bs ? -1 : as > bs;
}

/* The groups of each stream of the window (XINFO GROUPS): name, pending count and
 * last-delivered-id; a stream whose reply cannot be read is marked broken. */
static void read_groups(struct sink *s, int off, int w, struct group_view *gv, struct trim_round *t)
{
    t->n = 0;
    for (int i = 0; i < w; i++) {
        const char *a[3] = {"XINFO", "GROUPS", s->streams[off + i].key};
        round_add(t, a[2], a, 3, i, 0);
    }
    sink_redis_run(s->redis, w, t->cmds);
    for (int i = 0; i < w; i++) {
        const redisReply *r = t->cmds[i].reply;
        if (t->cmds[i].st != LC_OK || r == NULL || r->type != REDIS_REPLY_ARRAY) {
            gv[i].broken = 1;
            if (t->cmds[i].st != LC_OK && t->cmds[i].st != LC_EREDIS)
                redis_failed(s, "XINFO GROUPS", t->cmds[i].err);
            continue;
        }
        if (r->elements > GROUPS_MAX) {
            gv[i].broken = 1; /* more groups than we look at: do not trim for any of them */
            continue;
        }
        for (size_t j = 0; j < r->elements; j++) {
            const redisReply *name = map_get(r->element[j], "name");
            const redisReply *pend = map_get(r->element[j], "pending");
            const redisReply *ld = map_get(r->element[j], "last-delivered-id");
            int k = gv[i].n;
            if (!name || name->type != REDIS_REPLY_STRING || name->len >= 64 || !pend ||
                pend->type != REDIS_REPLY_INTEGER || !ld || ld->type != REDIS_REPLY_STRING ||
                sink_entry_parse_id(ld->str, &gv[i].g[k].ld_ms, &gv[i].g[k].ld_seq) != 0) {
                gv[i].broken = 1;
                break;
            }
            snprintf(gv[i].g[k].name, sizeof gv[i].g[k].name, "%s", name->str);
            gv[i].g[k].ours = strcmp(name->str, ORDERLOG_GROUP) == 0;
            gv[i].g[k].pending = pend->integer;
            gv[i].n++;
        }
    }
    sink_cmds_clear(w, t->cmds);
}

/* The lowest pending id (XPENDING summary) of each group with pending entries. */
static void read_lowest_pending(struct sink *s, int off, int w, struct group_view *gv,
                                struct trim_round *t)
{
    t->n = 0;
    for (int i = 0; i < w; i++)
        for (int k = 0; k < gv[i].n && !gv[i].broken; k++)
            if (gv[i].g[k].pending > 0) {
                const char *a[3] = {"XPENDING", s->streams[off + i].key, gv[i].g[k].name};
                round_add(t, a[1], a, 3, i, k);
            }
    sink_redis_run(s->redis, t->n, t->cmds);
    for (int c = 0; c < t->n; c++) {
        int i = t->who[c][0], k = t->who[c][1];
        const redisReply *r = t->cmds[c].reply;
        if (t->cmds[c].st != LC_OK || !r || r->type != REDIS_REPLY_ARRAY || r->elements < 2) {
            gv[i].broken = 1;
            continue;
        }
        const redisReply *lo = r->element[1];
        if (lo && lo->type == REDIS_REPLY_STRING &&
            sink_entry_parse_id(lo->str, &gv[i].g[k].lo_ms, &gv[i].g[k].lo_seq) == 0)
            gv[i].g[k].has_lo = 1; /* nil: acknowledged meanwhile, last-delivered + 1 holds */
    }
    sink_cmds_clear(t->n, t->cmds);
}

/* Decides, for each readable stream, the lowest id any group still needs (its minid: the
 * lowest pending id, else last-delivered + 1) and whether to probe past the sink group's last
 * delivery; adds the sink group's pending count and oldest unacknowledged entry to *pending
 * and *oldest_ms. No Redis. */
static void plan_trim(struct group_view *gv, int w, long long *pending, long long *oldest_ms)
{
    for (int i = 0; i < w; i++) {
        gv[i].trim = gv[i].probe = 0;
        if (gv[i].broken || gv[i].n == 0)
            continue;
        unsigned long long mm = ULLONG_MAX, ms = ULLONG_MAX;
        for (int k = 0; k < gv[i].n; k++) {
            unsigned long long nm = gv[i].g[k].ld_ms, ns = gv[i].g[k].ld_seq;
            if (ns == ULLONG_MAX) {
                nm++;
                ns = 0;
            } else {
                ns++;
            }
            if (gv[i].g[k].has_lo && id_cmp(gv[i].g[k].lo_ms, gv[i].g[k].lo_seq, nm, ns) < 0) {
                nm = gv[i].g[k].lo_ms;
                ns = gv[i].g[k].lo_seq;
            }
            if (id_cmp(nm, ns, mm, ms) < 0) {
                mm = nm;
                ms = ns;
            }
            if (gv[i].g[k].ours) {
                *pending += gv[i].g[k].pending;
                if (gv[i].g[k].has_lo) {
                    if (*oldest_ms == 0 || (long long)gv[i].g[k].lo_ms < *oldest_ms)
                        *oldest_ms = (long long)gv[i].g[k].lo_ms;
                } else {
                    gv[i].probe = 1; /* is anything waiting after last-delivered? */
                    snprintf(gv[i].after, sizeof gv[i].after, "(%llu-%llu", gv[i].g[k].ld_ms,
                             gv[i].g[k].ld_seq);
                }
            }
        }
        snprintf(gv[i].minid, sizeof gv[i].minid, "%llu-%llu", mm, ms);
        gv[i].trim = 1;
    }
}

/* Runs the plan: XTRIM MINID of each stream to trim, and the XRANGE probe past the sink group's
 * last delivery (its first entry's time lowers *oldest_ms). */
static void trim_and_probe(struct sink *s, int off, int w, struct group_view *gv,
                           struct trim_round *t, long long *oldest_ms)
{
    t->n = 0;
    for (int i = 0; i < w; i++) {
        if (gv[i].trim) {
            const char *a[4] = {"XTRIM", s->streams[off + i].key, "MINID", gv[i].minid};
            round_add(t, a[1], a, 4, i, 0);
        }
        if (gv[i].probe) {
            const char *a[6] = {"XRANGE", s->streams[off + i].key, gv[i].after, "+", "COUNT", "1"};
            round_add(t, a[1], a, 6, i, 1);
        }
    }
    sink_redis_run(s->redis, t->n, t->cmds);
    for (int c = 0; c < t->n; c++) {
        const redisReply *r = t->cmds[c].reply;
        int i = t->who[c][0];
        if (t->cmds[c].st != LC_OK || r == NULL)
            continue;
        if (t->who[c][1] == 0 && r->type == REDIS_REPLY_INTEGER && r->integer > 0) {
            sink_metrics_trimmed(r->integer);
            log_msg(CONFIG_LOG_DEBUG, "sink_trimmed", "%s: %lld entries below %s trimmed",
                    s->streams[off + i].key, r->integer, gv[i].minid);
        } else if (t->who[c][1] == 1 && r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
                   r->element[0]->type == REDIS_REPLY_ARRAY && r->element[0]->elements >= 1 &&
                   r->element[0]->element[0]->type == REDIS_REPLY_STRING) {
            unsigned long long ms, seq;
            if (sink_entry_parse_id(r->element[0]->element[0]->str, &ms, &seq) == 0 &&
                (*oldest_ms == 0 || (long long)ms < *oldest_ms))
                *oldest_ms = (long long)ms;
        }
    }
    sink_cmds_clear(t->n, t->cmds);
}

/* For each stream of a window: the groups (XINFO GROUPS), their lowest pending ids (XPENDING),
 * then XTRIM MINID to the lowest id any group still needs; adds the sink group's pending count
 * and oldest unacknowledged entry to *pending and *oldest_ms. */
static void trim_window(struct sink *s, int off, int w, long long *pending, long long *oldest_ms)
{
    struct group_view *gv = calloc((size_t)w, sizeof *gv);
    struct trim_round *t = malloc(sizeof *t);
    if (gv == NULL || t == NULL) {
        free(gv);
        free(t);
        return;
    }
    read_groups(s, off, w, gv, t);
    read_lowest_pending(s, off, w, gv, t);
    plan_trim(gv, w, pending, oldest_ms);
    trim_and_probe(s, off, w, gv, t, oldest_ms);
    free(t);
    free(gv);
}

/* ---- dropped segments' logs, the registry, unlogged orders ---- */

/* One script (its text: the sink runs these rarely) on the slot of keys[0]. The new reply, or
 * NULL when Redis failed (reported). */
static redisReply *eval(struct sink *s, const char *text, int nkeys, const char **keys, int nargs,
                        const char **args)
{
    const char *argv[8];
    char nk[8];
    snprintf(nk, sizeof nk, "%d", nkeys);
    int argc = 0;
    argv[argc++] = "EVAL";
    argv[argc++] = text;
    argv[argc++] = nk;
    for (int i = 0; i < nkeys; i++)
        argv[argc++] = keys[i];
    for (int i = 0; i < nargs; i++)
        argv[argc++] = args[i];
    char err[200];
    redisReply *r = sink_redis_cmd(s->redis, keys[0], argc, argv, err, sizeof err);
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        redis_failed(s, "EVAL", r ? r->str : err);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* SREM of a deleted SKU none of whose logs is left, then a look at its meta again: a PUT that
 * came meanwhile (its SADD may have been before this SREM) puts it back (docs/design.md "The
 * SKU registry"). */
static void unregister(struct sink *s, const char *sku)
{
    char err[200], meta[STORE_KEY_MAX];
    const char *srem[] = {"SREM", store_registry_key(), sku};
    redisReply *r = sink_redis_cmd(s->redis, srem[1], 3, srem, err, sizeof err);
    int removed = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    if (!removed)
        return;
    store_sku_key(meta, sku, "meta");
    const char *hm[] = {"HMGET", meta, "segments", "hwm", "lhwm"};
    r = sink_redis_cmd(s->redis, meta, 5, hm, err, sizeof err);
    int live = r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
               reply_int(r->element[0]) > 0 || reply_int(r->element[1]) > 0 ||
               reply_int(r->element[2]) > 0;
    freeReplyObject(r);
    if (live) {
        const char *sadd[] = {"SADD", store_registry_key(), sku};
        r = sink_redis_cmd(s->redis, sadd[1], 3, sadd, err, sizeof err);
        freeReplyObject(r);
        return;
    }
    log_msg(CONFIG_LOG_INFO, "sink_sku_forgotten",
            "sku %s: deleted and its order logs drained: removed from the registry", sku);
}

/* The logs of segments outside their SKU's rolled-out layout (k in [max(segments, hwm), lhwm)):
 * each drained one is deleted (log_drop.lua: in one step with the check that the segment is
 * dead and every group has acknowledged every entry), from the top down, and lhwm lowered to
 * the highest one left + 1 (log_forget.lua: only if no PUT or DELETE came since). A deleted SKU
 * with no log left leaves the registry. */
static void drop_logs(struct sink *s)
{
    for (int vi = 0; vi < s->nviews && !sink_stop; vi++) {
        struct sku_view *v = &s->views[vi];
        if (!v->exists || !v->rolled)
            continue;
        long long base = v->segments > v->hwm ? v->segments : v->hwm;
        long long keep = v->lhwm;
        for (long long k = v->lhwm - 1; k >= base && !sink_stop; k--) {
            struct seg_keys sk;
            store_seg_keys(v->sku, (int)k, &sk);
            const char *keys[2] = {sk.log, sk.stock};
            redisReply *r = eval(s, STORE_LUA_LOG_DROP, 2, keys, 0, NULL);
            int gone = r && r->type == REDIS_REPLY_STRING &&
                       (strcmp(r->str, "dropped") == 0 || strcmp(r->str, "gone") == 0);
            if (gone && strcmp(r->str, "dropped") == 0)
                log_msg(CONFIG_LOG_INFO, "sink_stream_dropped",
                        "%s: its segment left the layout and every entry is in the database: "
                        "deleted",
                        sk.log);
            freeReplyObject(r);
            if (!gone)
                break;
            struct stream *st = find_stream(s, sk.log);
            if (st != NULL)
                st->gone = 1;
            keep = k;
        }
        if (keep < v->lhwm) {
            char meta[STORE_KEY_MAX], want[24];
            store_sku_key(meta, v->sku, "meta");
            snprintf(want, sizeof want, "%lld", keep);
            const char *keys[1] = {meta};
            const char *args[2] = {v->version, want};
            redisReply *r = eval(s, STORE_LUA_LOG_FORGET, 1, keys, 2, args);
            if (r && r->type == REDIS_REPLY_INTEGER && r->integer == 1)
                v->lhwm = keep <= v->segments ? 0 : keep;
            freeReplyObject(r);
        }
        if (v->segments == 0 && v->hwm == 0 && v->lhwm == 0)
            unregister(s, v->sku);
    }
    purge_streams(s);
}

static int view_cmp(const void *a, const void *b)
{
    return strcmp(((const struct sku_view *)a)->sku, ((const struct sku_view *)b)->sku);
}

static const struct sku_view *find_view(const struct sink *s, const char *sku)
{
    struct sku_view probe;
    snprintf(probe.sku, sizeof probe.sku, "%s", sku);
    return s->nviews ? bsearch(&probe, s->views, (size_t)s->nviews, sizeof *s->views, view_cmp)
                     : NULL;
}

/* Segment k of sku had u order changes made without a log entry: its order records go into
 * the database (sink_db_backfill), then u comes off the count (unlogged_done.lua). */
static void backfill_segment(struct sink *s, const char *sku, int k, long long u, const char *sver)
{
    struct sink_db_order *o = NULL;
    size_t len = 0, cap = 0;
    char err[512];
    if (sink_segment_records(s->redis, sku, k, 1, &o, &len, &cap, NULL, err, sizeof err) != 0) {
        redis_failed(s, "HGETALL orders", err);
        sink_db_orders_free(o, len);
        return;
    }
    long long written = 0;
    for (size_t off = 0; off < len; off += (size_t)s->cfg->batch) {
        size_t m = len - off < (size_t)s->cfg->batch ? len - off : (size_t)s->cfg->batch;
        long long w = 0;
        if (sink_db_backfill(s->db, o + off, m, &w, err, sizeof err) != 0) {
            sink_metrics_error(SINK_ERR_DB);
            log_msg(CONFIG_LOG_WARN, "sink_db_error", "backfill of sku %s segment %d: %s", sku, k,
                    err);
            sink_db_free(s->db);
            s->db = NULL;
            s->db_up = 0;
            health(s);
            sink_db_orders_free(o, len);
            return;
        }
        written += w;
    }
    sink_db_orders_free(o, len);
    struct seg_keys sk;
    store_seg_keys(sku, k, &sk);
    char n[24];
    snprintf(n, sizeof n, "%lld", u);
    const char *keys[2] = {sk.cnt, sk.sver};
    const char *args[2] = {n, sver};
    freeReplyObject(eval(s, STORE_LUA_UNLOGGED_DONE, 2, keys, 2, args));
    sink_metrics_unlogged(u, written);
    log_msg(CONFIG_LOG_WARN, "sink_unlogged",
            "sku %s segment %d: %lld order change(s) made without the order log (an instance "
            "runs without --order-log): the segment's %zu order record(s) written into the "
            "database from Redis (%lld affected rows)",
            sku, k, u, len, written);
}

/* Every followed stream of a segment in its SKU's layout: its count of order changes made
 * without a log entry (cnt's u); those with some are backfilled. */
static void find_unlogged(struct sink *s)
{
    qsort(s->views, (size_t)s->nviews, sizeof *s->views, view_cmp);
    for (int off = 0; off < s->nstreams && !sink_stop && s->db != NULL; off += WINDOW) {
        int w = s->nstreams - off < WINDOW ? s->nstreams - off : WINDOW;
        struct sink_cmd cmds[2 * WINDOW];
        const char *argv[2 * WINDOW][3];
        struct seg_keys sk[WINDOW];
        int idx[WINDOW], m = 0;
        for (int i = 0; i < w; i++) {
            const struct stream *st = &s->streams[off + i];
            const struct sku_view *v = find_view(s, st->sku);
            if (st->gone || v == NULL || st->segment >= v->segments)
                continue;
            store_seg_keys(st->sku, st->segment, &sk[m]);
            const char *a[3] = {"HGET", sk[m].cnt, "u"};
            const char *b[2] = {"GET", sk[m].sver};
            memcpy(argv[2 * m], a, sizeof a);
            memcpy(argv[2 * m + 1], b, sizeof b);
            cmds[2 * m] = (struct sink_cmd){.key = sk[m].cnt, .argc = 3, .argv = argv[2 * m]};
            cmds[2 * m + 1] =
                (struct sink_cmd){.key = sk[m].sver, .argc = 2, .argv = argv[2 * m + 1]};
            idx[m++] = off + i;
        }
        sink_redis_run(s->redis, 2 * m, cmds);
        for (int i = 0; i < m && s->db != NULL; i++) {
            long long u = reply_int(cmds[2 * i].reply);
            const redisReply *sv = cmds[2 * i + 1].reply;
            if (u > 0 && sv && sv->type == REDIS_REPLY_STRING)
                backfill_segment(s, s->streams[idx[i]].sku, s->streams[idx[i]].segment, u, sv->str);
        }
        sink_cmds_clear(2 * m, cmds);
    }
}

/* Claims (only when the database is up: claimed entries are written at once), trimming, and
 * the lag and pending gauges (also with the database down: that is when the lag matters);
 * with the database up, then: the unlogged order changes backfilled, and the drained logs of
 * dropped segments deleted. */
static void maintain(struct sink *s, int db_up)
{
    if (db_up)
        claim(s);
    long long pending = 0, oldest = 0;
    for (int off = 0; off < s->nstreams && !sink_stop; off += WINDOW) {
        int w = s->nstreams - off < WINDOW ? s->nstreams - off : WINDOW;
        trim_window(s, off, w, &pending, &oldest);
    }
    sink_metrics_gauges(oldest, pending);
    if (db_up && s->db != NULL) {
        find_unlogged(s);
        drop_logs(s);
    }
}

int sink_run(const struct sink_config *cfg_in)
{
    struct sink_config cfg = *cfg_in;
    if (cfg.consumer[0] == '\0') {
        char host[64] = "sink";
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = '\0';
        snprintf(cfg.consumer, sizeof cfg.consumer, "%s-%ld", host, (long)getpid());
    }
    struct sink s = {.cfg = &cfg, .backoff_ms = BACKOFF_MIN_MS};
    srand((unsigned)(wall_ms() ^ getpid()));
    char err[512];
    if (sink_redis_new(cfg.redis, cfg.redis_timeout_ms, &s.redis, err, sizeof err) != 0) {
        log_msg(CONFIG_LOG_ERROR, "sink_start", "Redis client: %s", err);
        return 2;
    }
    if (cfg.metrics_port > 0 && sink_http_start(cfg.metrics_port, err, sizeof err) != 0) {
        log_msg(CONFIG_LOG_ERROR, "sink_start", "metrics server: %s", err);
        sink_redis_free(s.redis);
        return 2;
    }
    health(&s);
    log_msg(CONFIG_LOG_INFO, "startup",
            "inventory-sink %s: consumer %s of group %s, batch %d, claim idle %d ms, "
            "maintenance every %d ms, metrics port %d",
            INVENTORYD_VERSION, cfg.consumer, ORDERLOG_GROUP, cfg.batch, cfg.claim_idle_ms,
            cfg.maintain_ms, cfg.metrics_port);
    long long last_discover = -DISCOVER_MS, last_maintain = mono_ms();
    int empty_rounds = 0;
    while (!sink_stop) {
        /* With the database down the streams are still discovered and the gauges kept (a sink
         * that cannot write must show its lag), then the connection is tried again. */
        int db_up = ensure_db(&s) == 0;
        long long now = mono_ms();
        if (now - last_discover >= DISCOVER_MS) {
            last_discover = now;
            if (discover(&s) != 0) {
                backoff(&s);
                continue;
            }
        }
        if (now - last_maintain >= cfg.maintain_ms) {
            last_maintain = now;
            maintain(&s, db_up);
        }
        if (!db_up) {
            backoff(&s);
            continue;
        }
        purge_streams(&s);
        int got = read_round(&s);
        if (s.nentries > 0 && flush(&s) != 0)
            break;
        if (got < 0) {
            backoff(&s);
            continue;
        }
        s.backoff_ms = BACKOFF_MIN_MS;
        /* Nap only once a whole pass over the streams found nothing. */
        int windows = s.nstreams ? (s.nstreams + WINDOW - 1) / WINDOW : 1;
        empty_rounds = got == 0 ? empty_rounds + 1 : 0;
        if (empty_rounds >= windows) {
            empty_rounds = 0;
            nap(POLL_MS);
        }
    }
    log_msg(CONFIG_LOG_INFO, "shutdown", "inventory-sink stopping (consumer %s)", cfg.consumer);
    sink_http_stop();
    sink_db_free(s.db);
    sink_redis_free(s.redis);
    free(s.streams);
    free(s.views);
    free(s.entries);
    return 0;
}
