/*
 * inventory-sink (SPEC §12) against a real redis-server and a real MariaDB (mariadb_fixture.h):
 * the order log's entries are written here with XADD in exactly the format of orderlog.h (and
 * the matching order records into inv:2:{S/k}:orders, for reconcile), then the sink moves them:
 *   - every entry lands once (order_events), orders hold each order's latest status, reconcile
 *     is clean and the streams are trimmed once acknowledged;
 *   - a status only moves forward: an older entry delivered after a newer one changes nothing;
 *   - kill -9 of the sink mid-batch, then a restart: nothing missing, nothing doubled;
 *   - SIGTERM mid-stream: what it read is committed and acknowledged before it exits 0;
 *   - the database killed and restarted: the sink retries (errors, /healthz 503) and catches up;
 *   - two sinks at once: each entry written by one of them, once;
 *   - a dead consumer's pending entries are claimed (XAUTOCLAIM) and written;
 *   - trimming stops at the lowest entry another group has not acknowledged;
 *   - reconcile names each difference of a database edited by hand, and exits non-zero;
 *   - a multi-segment order's entry lands as one row with its total and parts (a one-segment
 *     order's row has its one part); reconcile skips part records and compares parts; an
 *     orders table without the parts column gets it when a sink starts (and order_items,
 *     filled from the old rows);
 *   - Redis paused (no answers): the sink backs off and catches up;
 *   - issue 33: every order's parts land in order_items (one row per part, a multi-segment
 *     order's each); a cart's entry, written by the real commit and cancel scripts, carries its
 *     items and lands as one orders row and one order_items row per part in every SKU; replays
 *     add nothing; reconcile compares units sold per SKU and segment from order_items, names a
 *     missing row, and --repair writes a cart's rows from its records; an older database gets
 *     order_items filled from its orders rows at the sink's start;
 *   - on a Redis Cluster of three masters the same holds;
 *   - issue 29, with real inventoryd processes: the logs of segments a smaller re-PUT or a DELETE
 *     dropped are found, written, then deleted once drained (one Redis and the cluster);
 *     instances without --order-log: the sink says so (log, /metrics, /healthz) and backfills
 *     from Redis's order records, reconcile names the gap and --repair closes it.
 * Each test uses its own SKUs; the sinks run with short maintenance and claim periods.
 */
#include "svc_test.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cluster_fixture.h"
#include "mariadb_fixture.h"
#include "proc_registry.h"
#include "orderlog.h"
#include "redis_fixture.h"
#include "rules.h"
#include "store.h"
#include "store_scripts.h"
#include "testutil.h"

static rf_server *redis;
static mdb_server *db;
static int all_segments;    /* segments of every SKU made so far: the streams a sink follows */
static cf_cluster *cluster; /* test_cluster's Redis Cluster, while it runs */
static const char *target;  /* the Redis URL the sinks and reconcile get (redis or cluster) */
static int target_port;     /* where rcmd starts (it follows MOVED from there) */

/* ---- commands to the target, routed ---- */

#define RCMD_CONNS 16
static struct {
    int port;
    redisContext *c;
} conns[RCMD_CONNS];

static redisContext *conn_to(int port)
{
    for (int i = 0; i < RCMD_CONNS; i++)
        if (conns[i].c != NULL && conns[i].port == port)
            return conns[i].c;
    for (int i = 0; i < RCMD_CONNS; i++)
        if (conns[i].c == NULL) {
            struct timeval t = {1, 0};
            redisContext *c = redisConnectWithTimeout("127.0.0.1", port, t);
            if (c == NULL || c->err) {
                redisFree(c);
                return NULL;
            }
            struct timeval rt = {5, 0};
            redisSetTimeout(c, rt);
            conns[i].port = port;
            conns[i].c = c;
            return c;
        }
    return NULL;
}

static void conns_close(void)
{
    for (int i = 0; i < RCMD_CONNS; i++) {
        redisFree(conns[i].c);
        conns[i].c = NULL;
    }
}

/* One command (hiredis format) on the target: on a cluster it follows MOVED to the master of
 * the key's slot. The new reply (error replies included), or NULL when no node answered. */
static redisReply *rcmdv(const char *fmt, va_list ap)
{
    int port = target_port;
    for (int hop = 0; hop < 5; hop++) {
        redisContext *c = conn_to(port);
        if (c == NULL)
            return NULL;
        va_list aq;
        va_copy(aq, ap);
        redisReply *r = redisvCommand(c, fmt, aq);
        va_end(aq);
        if (r == NULL) {
            conns_close();
            return NULL;
        }
        const char *colon;
        if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "MOVED ", 6) == 0 &&
            (colon = strrchr(r->str, ':')) != NULL) {
            port = atoi(colon + 1);
            freeReplyObject(r);
            continue;
        }
        return r;
    }
    return NULL;
}

static redisReply *rcmd(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static redisReply *rcmd(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = rcmdv(fmt, ap);
    va_end(ap);
    return r;
}

/* rcmd for an integer reply: the integer, or RF_NOT_INTEGER. */
static long long rint_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static long long rint_(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = rcmdv(fmt, ap);
    va_end(ap);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : RF_NOT_INTEGER;
    freeReplyObject(r);
    return v;
}

/* ---- inventory-sink processes ---- */

typedef struct sink_proc {
    int slot;
    pid_t pid;
    int metrics_port;
    char consumer[64];
    char log[256];
} sink_proc;

static const char *sink_binary(void)
{
    static char path[PATH_MAX];
    const char *dir = getenv("INVENTORY_BUILD_BIN");
    if (dir != NULL && *dir != '\0') {
        snprintf(path, sizeof path, "%s/inventory-sink", dir);
        if (access(path, X_OK) == 0)
            return path;
    }
    char self[PATH_MAX - 32];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash != NULL) {
            *slash = '\0';
            snprintf(path, sizeof path, "%s/inventory-sink", self);
            if (access(path, X_OK) == 0)
                return path;
        }
    }
    return NULL;
}

static void sink_print_log(const sink_proc *p)
{
    FILE *f = fopen(p->log, "r");
    if (f == NULL)
        return;
    fprintf(stderr, "--- inventory-sink %s log ---\n", p->consumer);
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f) != NULL && n++ < 200)
        fputs(line, stderr);
    fclose(f);
}

/* Stops p (SIGTERM; SIGKILL after 10 s). Returns its exit status, 128 + signal, or -1. */
static int sink_stop(sink_proc *p)
{
    int code = -1;
    if (p->pid > 0) {
        kill(p->pid, SIGTERM);
        int64_t deadline = tu_now_ms() + 10000;
        int status;
        while (waitpid(p->pid, &status, WNOHANG) == 0) {
            if (tu_now_ms() > deadline) {
                kill(p->pid, SIGKILL);
                waitpid(p->pid, &status, 0);
                break;
            }
            tu_sleep_ms(10);
        }
        code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        p->pid = 0;
        pr_set_pid(p->slot, 0);
    }
    return code;
}

static void sink_free(sink_proc *p)
{
    if (p == NULL)
        return;
    sink_stop(p);
    unlink(p->log);
    pr_remove(p->slot);
    free(p);
}

static void sink_free_obj(void *obj)
{
    sink_free(obj);
}

static const pr_kind sink_kind = {NULL, sink_free_obj};

/* Starts inventory-sink as consumer on the test's Redis and database; extra: more flags
 * (NULL-terminated, may be NULL). */
static sink_proc *sink_spawn(const char *consumer, const char *const *extra)
{
    const char *bin = sink_binary();
    SF_ASSERT(bin != NULL, "%s", "no inventory-sink binary (set INVENTORY_BUILD_BIN)");
    sink_proc *p = calloc(1, sizeof *p);
    SF_ASSERT(p != NULL, "%s", "calloc");
    p->slot = pr_add(&sink_kind, p);
    snprintf(p->consumer, sizeof p->consumer, "%s", consumer);
    snprintf(p->log, sizeof p->log, "%s/sink-%s-%ld.log", rf_dir(redis), consumer,
             (long)tu_now_ms());
    p->metrics_port = tu_free_port();
    char port[16];
    snprintf(port, sizeof port, "%d", p->metrics_port);
    const char *argv[40] = {bin,         "--redis",        target, "--db",
                            mdb_url(db), "--metrics-port", port,   "--consumer",
                            consumer,    "--maintain-ms",  "300",  "--claim-idle-ms",
                            "60000",     "--db-timeout-s", "3",    "--redis-timeout-ms",
                            "1000"};
    int argc = 17;
    for (int i = 0; extra != NULL && extra[i] != NULL && argc < 38; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
    int fd = open(p->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    p->pid = pr_spawn(argv, fd, fd);
    if (fd >= 0)
        close(fd);
    SF_ASSERT(p->pid > 0, "%s", "spawn inventory-sink");
    pr_set_pid(p->slot, p->pid);
    return p;
}

/* 1 when p's process has exited (reaped here). */
static int sink_exited(sink_proc *p)
{
    int status;
    if (p->pid <= 0 || waitpid(p->pid, &status, WNOHANG) != p->pid)
        return 0;
    p->pid = 0;
    pr_set_pid(p->slot, 0);
    return 1;
}

/* 1 when p's log holds needle. */
static int sink_log_has(const sink_proc *p, const char *needle)
{
    FILE *f = fopen(p->log, "r");
    char line[2048];
    int found = 0;
    while (f != NULL && !found && fgets(line, sizeof line, f) != NULL)
        found = strstr(line, needle) != NULL;
    if (f != NULL)
        fclose(f);
    return found;
}

/* sink_spawn, then waits until its /healthz answers 200 (Redis and the database reached) while
 * the process still runs (an answer from another process that took the port does not count).
 * The metrics port is a free port picked before the start, which another test process on this
 * machine may take first: a sink that could not listen is started again on another one (at
 * most 5 times). */
static sink_proc *sink_start(const char *consumer, const char *const *extra)
{
    for (int attempt = 0; attempt < 5; attempt++) {
        sink_proc *p = sink_spawn(consumer, extra);
        int64_t deadline = tu_now_ms() + 10000;
        int taken = 0;
        while (tu_now_ms() < deadline) {
            sf_resp r = {0};
            int st = sf_http(p->metrics_port, "GET", "/healthz", NULL, NULL, 0, &r);
            sf_resp_free(&r);
            if (sink_exited(p)) {
                taken = sink_log_has(p, "cannot listen");
                break;
            }
            if (st == 200)
                return p;
            tu_sleep_ms(20);
        }
        if (!taken) {
            sink_print_log(p);
            SF_ASSERT(0, "inventory-sink %s not healthy within 10 s", consumer);
        }
        fprintf(stderr, "inventory-sink %s: metrics port %d taken meanwhile; another\n", consumer,
                p->metrics_port);
        sink_free(p);
    }
    SF_ASSERT(0, "inventory-sink %s: no free metrics port in 5 attempts", consumer);
    return NULL;
}

static double metric(const sink_proc *p, const char *series)
{
    return sf_metric(p->metrics_port, series);
}

/* The series once it reads want, or what it reads after ms: the sink counts a batch after its
 * transaction committed, so a reader that saw the rows may look before the count moved. */
static double metric_reaching(const sink_proc *p, const char *series, double want, int ms)
{
    int64_t until = tu_now_ms() + ms;
    double v = metric(p, series);
    while (v != want && tu_now_ms() < until) {
        tu_sleep_ms(20);
        v = metric(p, series);
    }
    return v;
}

/* ---- the log, written as the scripts write it ---- */

/* The record in inv:2:{S/k}:orders and one entry in inv:2:{S/k}:log for an order's change;
 * id gets the entry's id (48 bytes). */
static void log_event(const char *sku, int k, const char *order, const char *event, long long q,
                      const char *user, char *id)
{
    char key[256], orders[256], qs[24], at[24], rec[512];
    snprintf(key, sizeof key, "inv:2:{%s/%d}:log", sku, k);
    snprintf(orders, sizeof orders, "inv:2:{%s/%d}:orders", sku, k);
    snprintf(qs, sizeof qs, "%lld", q);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(at, sizeof at, "%lld", (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
    snprintf(rec, sizeof rec,
             "{\"order_id\":\"%s\",\"sku\":\"%s\",\"quantity\":%lld,\"segment\":%d,"
             "\"user_id\":%s%s%s,\"created_at\":\"2026-11-25T00:00:00.000Z\",\"status\":\"%s\"}",
             order, sku, q, k, user[0] ? "\"" : "", user[0] ? user : "null", user[0] ? "\"" : "",
             event);
    redisReply *r = rcmd("XADD %s * event %s order %s sku %s segment %d user %s "
                         "quantity %s at %s version 7",
                         key, event, order, sku, k, user, qs, at);
    SF_ASSERT(r != NULL && r->type == REDIS_REPLY_STRING, "XADD %s", key);
    if (id != NULL)
        snprintf(id, 48, "%s", r->str);
    freeReplyObject(r);
    r = rcmd("HSET %s %s %s", orders, order, rec);
    SF_ASSERT(r != NULL && r->type == REDIS_REPLY_INTEGER, "HSET %s", orders);
    freeReplyObject(r);
}

/* A SKU of n segments as the registry and the meta show it. */
static void make_sku(const char *sku, int n)
{
    long long a = rint_("SADD inv:2:skus %s", sku);
    SF_ASSERT(a >= 0, "SADD %s", sku);
    redisReply *r = rcmd("HSET inv:2:{%s}:meta segments %d hwm %d version 1", sku, n, n);
    SF_ASSERT(r != NULL && r->type == REDIS_REPLY_INTEGER, "HSET meta of %s", sku);
    freeReplyObject(r);
    all_segments += n;
}

static void order_name(char *buf, size_t cap, const char *sku, int k, int i)
{
    snprintf(buf, cap, "%032x-%d-%s", i, k, sku);
}

/* Orders 0..n-1 spread over segs segments: i%3 == 0 created; 1 reserved then confirmed; 2
 * created then cancelled. Returns the number of log entries written. */
static int make_orders(const char *sku, int segs, int from, int n)
{
    int entries = 0;
    for (int i = from; i < from + n; i++) {
        char order[160], user[32];
        int k = i % segs;
        order_name(order, sizeof order, sku, k, i);
        if (i % 5)
            snprintf(user, sizeof user, "user%d", i % 7);
        else
            user[0] = '\0';
        switch (i % 3) {
        case 0:
            log_event(sku, k, order, "created", 1 + i % 4, user, NULL);
            entries++;
            break;
        case 1:
            log_event(sku, k, order, "reserved", 1 + i % 4, user, NULL);
            log_event(sku, k, order, "confirmed", 1 + i % 4, user, NULL);
            entries += 2;
            break;
        default:
            log_event(sku, k, order, "created", 1 + i % 4, user, NULL);
            log_event(sku, k, order, "cancelled", 1 + i % 4, user, NULL);
            entries += 2;
        }
    }
    return entries;
}

static long long db_count(const char *table, const char *sku)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM %s WHERE sku = '%s'", table, sku);
    return mdb_scalar(db, sql);
}

/* Waits (at most timeout_ms) until table holds want rows of sku. Returns the last count. */
static long long wait_rows(const char *table, const char *sku, long long want, int timeout_ms)
{
    int64_t deadline = tu_now_ms() + timeout_ms;
    long long n;
    while ((n = db_count(table, sku)) != want && tu_now_ms() < deadline)
        tu_sleep_ms(20);
    return n;
}

/* Entries of the group "sink" not acknowledged, over segments [0, segs) of sku. */
static long long pending(const char *sku, int segs)
{
    long long sum = 0;
    for (int k = 0; k < segs; k++) {
        redisReply *r = rcmd("XPENDING inv:2:{%s/%d}:log sink", sku, k);
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
            r->element[0]->type == REDIS_REPLY_INTEGER)
            sum += r->element[0]->integer;
        freeReplyObject(r);
    }
    return sum;
}

static long long wait_pending_zero(const char *sku, int segs, int timeout_ms)
{
    int64_t deadline = tu_now_ms() + timeout_ms;
    long long n;
    while ((n = pending(sku, segs)) != 0 && tu_now_ms() < deadline)
        tu_sleep_ms(20);
    return n;
}

/* Runs inventory-sink reconcile for sku; its stdout into out. Returns its exit status. */
static int reconcile(const char *sku, char *out, size_t cap)
{
    const char *bin = sink_binary();
    SF_ASSERT(bin != NULL, "%s", "no inventory-sink binary");
    char path[256];
    snprintf(path, sizeof path, "%s/reconcile.out", rf_dir(redis));
    const char *argv[] = {bin,         "reconcile", "--redis", target, "--db",
                          mdb_url(db), "--sku",     sku,       NULL};
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    pid_t pid = pr_spawn(argv, fd, -1);
    if (fd >= 0)
        close(fd);
    SF_ASSERT(pid > 0, "%s", "spawn reconcile");
    int status;
    waitpid(pid, &status, 0);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, cap - 1, f) : 0;
    out[n] = '\0';
    if (f)
        fclose(f);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void assert_reconciled(const char *sku)
{
    char out[8192];
    int rc = reconcile(sku, out, sizeof out);
    SF_ASSERT(rc == 0, "reconcile %s exit %d:\n%s", sku, rc, out);
}

/* Per-test setup: a sink a failed test left running (cmocka skips the rest of a failed test)
 * is stopped, so that it cannot take the next test's entries; a database it left halted is
 * restarted. */
static void stop_leftover(void *obj, void *arg)
{
    (void)arg;
    sink_stop(obj);
}

static int per_test_setup(void **state)
{
    (void)state;
    pr_each(&sink_kind, stop_leftover, NULL);
    /* A test that failed with the database halted leaves it down: bring it back. */
    if (db != NULL && mdb_pid(db) <= 0 && mdb_restart(db) != 0)
        return -1;
    return 0;
}

/* ---- the tests ---- */

/* Without mariadbd the tests are skipped (group_setup said why). */
#define NEED_SERVERS()                                                                             \
    do {                                                                                           \
        if (db == NULL)                                                                            \
            skip();                                                                                \
    } while (0)

static void test_every_entry_lands_once(void **state)
{
    (void)state;
    NEED_SERVERS();
    make_sku("t1", 4);
    int entries = make_orders("t1", 4, 0, 300);
    const char *extra[] = {"--batch", "100", NULL};
    sink_proc *p = sink_start("t1-a", extra);
    SF_ASSERT_EQ(wait_rows("order_events", "t1", entries, 20000), entries);
    SF_ASSERT_EQ(wait_rows("orders", "t1", 300, 5000), 300);
    SF_ASSERT_EQ(wait_pending_zero("t1", 4, 5000), 0);
    SF_ASSERT_EQ(metric(p, "inventory_sink_events_written_total"), entries);
    SF_ASSERT_EQ(metric(p, "inventory_sink_events_duplicate_total"), 0);
    SF_ASSERT_EQ(metric(p, "inventory_sink_errors_total{kind=\"malformed\"}"), 0);
    /* each order's latest status; units per status */
    SF_ASSERT_EQ(
        mdb_scalar(db, "SELECT COUNT(*) FROM orders WHERE sku='t1' AND status='confirmed'"), 100);
    SF_ASSERT_EQ(
        mdb_scalar(db, "SELECT COUNT(*) FROM orders WHERE sku='t1' AND status='cancelled'"), 100);
    SF_ASSERT_EQ(mdb_scalar(db, "SELECT COUNT(*) FROM orders WHERE sku='t1' AND user_id IS NULL"),
                 60);
    assert_reconciled("t1");
    /* acknowledged entries are trimmed away (every group has them) */
    int64_t deadline = tu_now_ms() + 5000;
    long long left = 0;
    do {
        left = 0;
        for (int k = 0; k < 4; k++)
            left += rf_integer(redis, "XLEN inv:2:{t1/%d}:log", k);
    } while (left != 0 && tu_now_ms() < deadline && (tu_sleep_ms(50), 1));
    SF_ASSERT_EQ(left, 0);
    SF_ASSERT(metric(p, "inventory_sink_trimmed_total") >= entries, "%s", "trimmed counter");
    SF_ASSERT_EQ(metric(p, "inventory_sink_lag_seconds"), 0);
    SF_ASSERT_EQ(sink_stop(p), 0); /* SIGTERM: exit 0 */
    sink_free(p);
}

static void test_status_moves_forward_only(void **state)
{
    (void)state;
    NEED_SERVERS();
    make_sku("t2", 1);
    char created[48], cancelled[48];
    const char *order = "00000000000000000000000000000abc-0-t2";
    log_event("t2", 0, order, "created", 2, "u", created);
    log_event("t2", 0, order, "cancelled", 2, "u", cancelled);
    /* The group starts after the first entry (the sink sees only the cancel), and a second
     * group that reads nothing keeps every entry from being trimmed. */
    redisReply *r = rf_command(redis, "XGROUP CREATE inv:2:{t2/0}:log sink %s", created);
    SF_ASSERT(r && r->type == REDIS_REPLY_STATUS, "%s", "XGROUP CREATE sink");
    freeReplyObject(r);
    r = rf_command(redis, "XGROUP CREATE inv:2:{t2/0}:log audit 0");
    SF_ASSERT(r && r->type == REDIS_REPLY_STATUS, "%s", "XGROUP CREATE audit");
    freeReplyObject(r);
    sink_proc *p = sink_start("t2-a", NULL);
    SF_ASSERT_EQ(wait_rows("order_events", "t2", 1, 10000), 1);
    SF_ASSERT_EQ(wait_pending_zero("t2", 1, 5000), 0);
    SF_ASSERT_EQ(mdb_scalar(db, "SELECT status = 'cancelled' FROM orders WHERE sku='t2'"), 1);
    /* Now the older entry alone is delivered after the newer one. */
    SF_ASSERT_EQ(rf_integer(redis, "XDEL inv:2:{t2/0}:log %s", cancelled), 1);
    r = rf_command(redis, "XGROUP SETID inv:2:{t2/0}:log sink 0");
    SF_ASSERT(r && r->type == REDIS_REPLY_STATUS, "%s", "XGROUP SETID");
    freeReplyObject(r);
    SF_ASSERT_EQ(wait_rows("order_events", "t2", 2, 10000), 2);
    SF_ASSERT_EQ(wait_pending_zero("t2", 1, 5000), 0);
    SF_ASSERT_EQ(mdb_scalar(db, "SELECT status = 'cancelled' FROM orders WHERE sku='t2'"), 1);
    char sql[256];
    unsigned long long ms = strtoull(cancelled, NULL, 10);
    snprintf(sql, sizeof sql, "SELECT last_stream_ms = %llu FROM orders WHERE sku='t2'", ms);
    SF_ASSERT_EQ(mdb_scalar(db, sql), 1);
    SF_ASSERT_EQ(mdb_scalar(db, "SELECT created_at < updated_at OR created_at = updated_at "
                                "FROM orders WHERE sku='t2'"),
                 1);
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);
}

static void test_kill9_mid_batch_then_restart(void **state)
{
    (void)state;
    NEED_SERVERS();
    make_sku("t3", 4);
    int entries = make_orders("t3", 4, 0, 3000);
    const char *extra[] = {"--batch", "20", NULL};
    /* Killed as soon as the first transactions are in: most of the log is still to come, and
     * the entries read with them are delivered but not acknowledged. */
    sink_proc *p = sink_spawn("t3-a", extra);
    int64_t deadline = tu_now_ms() + 20000;
    long long n = 0;
    while ((n = db_count("order_events", "t3")) < 1 && tu_now_ms() < deadline)
        ;
    kill(p->pid, SIGKILL);
    n = db_count("order_events", "t3");
    long long pend = pending("t3", 4);
    fprintf(stderr, "# killed with %lld of %d entries written, %lld pending\n", n, entries, pend);
    SF_ASSERT(n > 0 && n < entries, "kill landed mid-stream: %lld of %d", n, entries);
    SF_ASSERT(pend > 0, "%s", "entries were delivered and not acknowledged at the kill");
    sink_stop(p);
    sink_free(p);
    /* The same consumer name: its own pending entries are read again first. */
    p = sink_start("t3-a", extra);
    SF_ASSERT_EQ(wait_rows("order_events", "t3", entries, 30000), entries);
    SF_ASSERT_EQ(wait_pending_zero("t3", 4, 5000), 0);
    SF_ASSERT_EQ(db_count("orders", "t3"), 3000);
    assert_reconciled("t3");
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);
}

static void test_sigterm_finishes_what_it_read(void **state)
{
    (void)state;
    NEED_SERVERS();
    make_sku("t10", 4);
    int entries = make_orders("t10", 4, 0, 3000);
    const char *extra[] = {"--batch", "20", NULL};
    sink_proc *p = sink_spawn("t10-a", extra);
    int64_t deadline = tu_now_ms() + 20000;
    while (db_count("order_events", "t10") < 1 && tu_now_ms() < deadline)
        ;
    SF_ASSERT_EQ(sink_stop(p), 0); /* SIGTERM mid-stream: exit 0 ... */
    long long n = db_count("order_events", "t10");
    fprintf(stderr, "# stopped with %lld of %d entries written\n", n, entries);
    SF_ASSERT(n > 0 && n < entries, "stopped mid-stream: %lld of %d", n, entries);
    /* ... once what it had read is committed and acknowledged: nothing left pending */
    SF_ASSERT_EQ(pending("t10", 4), 0);
    sink_free(p);
    p = sink_start("t10-b", extra);
    SF_ASSERT_EQ(wait_rows("order_events", "t10", entries, 30000), entries);
    /* the count follows each batch's commit: the rows can be seen a moment before it (the
     * clean-clone CI run read it one batch of 20 short) */
    SF_ASSERT_EQ(
        metric_reaching(p, "inventory_sink_events_written_total", (double)(entries - n), 5000),
        entries - n);
    assert_reconciled("t10");
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);
}

static void test_database_killed_and_restarted(void **state)
{
    (void)state;
    NEED_SERVERS();
    make_sku("t4", 2);
    int entries = make_orders("t4", 2, 0, 100);
    sink_proc *p = sink_start("t4-a", NULL);
    SF_ASSERT_EQ(wait_rows("order_events", "t4", entries, 10000), entries);
    SF_ASSERT_EQ(mdb_halt(db, SIGKILL), 0);
    entries += make_orders("t4", 2, 100, 150);
    /* the sink keeps trying: errors counted, /healthz says degraded */
    int64_t deadline = tu_now_ms() + 10000;
    while (metric(p, "inventory_sink_errors_total{kind=\"db\"}") < 2 && tu_now_ms() < deadline)
        tu_sleep_ms(50);
    SF_ASSERT(metric(p, "inventory_sink_errors_total{kind=\"db\"}") >= 2, "%s",
              "database errors counted");
    sf_resp r = {0};
    SF_ASSERT_EQ(sf_http(p->metrics_port, "GET", "/healthz", NULL, NULL, 0, &r), 503);
    sf_resp_free(&r);
    SF_ASSERT(pending("t4", 2) > 0 || rf_integer(redis, "XLEN inv:2:{t4/0}:log") > 0, "%s",
              "the new entries wait in Redis");
    SF_ASSERT_EQ(mdb_restart(db), 0);
    SF_ASSERT_EQ(wait_rows("order_events", "t4", entries, 20000), entries);
    SF_ASSERT_EQ(wait_pending_zero("t4", 2, 5000), 0);
    assert_reconciled("t4");
    SF_ASSERT_EQ(sf_http(p->metrics_port, "GET", "/healthz", NULL, NULL, 0, &r), 200);
    sf_resp_free(&r);
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);
}

/* The lag gauge is the alarm for a sink that cannot write (docs/deployment.md: alert on
 * inventory_sink_lag_seconds > 60): it must grow while the database is down, both for a sink
 * stuck retrying a batch and for one started while the database is down. It was measured only
 * between batches, so it froze at its last value (0 here) for as long as the outage lasted. */
static double lag_after(const sink_proc *p, int ms)
{
    tu_sleep_ms(ms);
    return metric(p, "inventory_sink_lag_seconds");
}

static void test_lag_grows_while_the_database_is_down(void **state)
{
    (void)state;
    NEED_SERVERS();
    make_sku("t12", 2);
    int entries = make_orders("t12", 2, 0, 30);
    const char *extra[] = {"--maintain-ms", "100", NULL};
    sink_proc *p = sink_start("t12-a", extra);
    SF_ASSERT_EQ(wait_rows("order_events", "t12", entries, 10000), entries);
    SF_ASSERT_EQ(wait_pending_zero("t12", 2, 5000), 0);
    int64_t deadline = tu_now_ms() + 5000;
    while (metric(p, "inventory_sink_lag_seconds") != 0 && tu_now_ms() < deadline)
        tu_sleep_ms(20);
    SF_ASSERT_EQ(metric(p, "inventory_sink_lag_seconds"), 0);

    /* Down while the sink is writing: it holds the new entries and retries. */
    SF_ASSERT_EQ(mdb_halt(db, SIGKILL), 0);
    entries += make_orders("t12", 2, 30, 30);
    deadline = tu_now_ms() + 10000;
    while (metric(p, "inventory_sink_errors_total{kind=\"db\"}") < 1 && tu_now_ms() < deadline)
        tu_sleep_ms(20);
    double l1 = lag_after(p, 2000), l2 = lag_after(p, 1000);
    SF_ASSERT(l1 >= 1.5 && l2 >= l1 + 0.5, "lag %.3f then %.3f s with the database down", l1, l2);
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);

    /* Started again (same consumer: it re-reads what the first left pending) while the
     * database is down: it cannot write at all, and must still report the backlog. */
    entries += make_orders("t12", 2, 60, 30);
    sink_proc *q = sink_spawn("t12-a", extra);
    deadline = tu_now_ms() + 10000;
    while (metric(q, "inventory_sink_errors_total{kind=\"db\"}") < 1 && tu_now_ms() < deadline)
        tu_sleep_ms(20);
    l1 = lag_after(q, 1500);
    SF_ASSERT(l1 >= 1.5, "lag %.3f s reported by a sink started with the database down", l1);

    SF_ASSERT_EQ(mdb_restart(db), 0);
    SF_ASSERT_EQ(wait_rows("order_events", "t12", entries, 20000), entries);
    SF_ASSERT_EQ(wait_pending_zero("t12", 2, 5000), 0);
    deadline = tu_now_ms() + 5000;
    while (metric(q, "inventory_sink_lag_seconds") != 0 && tu_now_ms() < deadline)
        tu_sleep_ms(20);
    SF_ASSERT_EQ(metric(q, "inventory_sink_lag_seconds"), 0);
    assert_reconciled("t12");
    SF_ASSERT_EQ(sink_stop(q), 0);
    sink_free(q);
}

static void test_two_sinks_write_each_entry_once(void **state)
{
    (void)state;
    NEED_SERVERS();
    make_sku("t5", 8);
    const char *extra[] = {"--batch", "25", NULL};
    sink_proc *a = sink_start("t5-a", extra);
    sink_proc *b = sink_start("t5-b", extra);
    int64_t deadline = tu_now_ms() + 5000;
    while ((metric(a, "inventory_sink_streams") != all_segments ||
            metric(b, "inventory_sink_streams") != all_segments) &&
           tu_now_ms() < deadline)
        tu_sleep_ms(50);
    SF_ASSERT_EQ(metric(a, "inventory_sink_streams"), all_segments); /* both follow them all */
    SF_ASSERT_EQ(metric(b, "inventory_sink_streams"), all_segments);
    int entries = make_orders("t5", 8, 0, 800);
    SF_ASSERT_EQ(wait_rows("order_events", "t5", entries, 30000), entries);
    SF_ASSERT_EQ(wait_pending_zero("t5", 8, 5000), 0);
    double wa = metric(a, "inventory_sink_events_written_total");
    double wb = metric(b, "inventory_sink_events_written_total");
    fprintf(stderr, "# sink a wrote %.0f entries, sink b %.0f\n", wa, wb);
    SF_ASSERT_EQ(wa + wb, entries);
    SF_ASSERT_EQ(metric(a, "inventory_sink_events_duplicate_total") +
                     metric(b, "inventory_sink_events_duplicate_total"),
                 0);
    assert_reconciled("t5");
    SF_ASSERT_EQ(sink_stop(a), 0);
    SF_ASSERT_EQ(sink_stop(b), 0);
    sink_free(a);
    sink_free(b);
}

static void test_dead_consumers_entries_are_claimed(void **state)
{
    (void)state;
    NEED_SERVERS();
    make_sku("t6", 2);
    int entries = make_orders("t6", 2, 0, 60);
    /* A sink that read entries and died before writing them: "ghost" holds them pending. */
    long long ghost = 0;
    for (int k = 0; k < 2; k++) {
        redisReply *r = rf_command(redis, "XGROUP CREATE inv:2:{t6/%d}:log sink 0", k);
        freeReplyObject(r);
        r = rf_command(redis, "XREADGROUP GROUP sink ghost COUNT 25 STREAMS inv:2:{t6/%d}:log >",
                       k);
        SF_ASSERT(r && r->type == REDIS_REPLY_ARRAY, "%s", "ghost read");
        ghost += (long long)r->element[0]->element[1]->elements;
        freeReplyObject(r);
    }
    SF_ASSERT_EQ(ghost, 50);
    const char *extra[] = {"--claim-idle-ms", "500", NULL};
    sink_proc *p = sink_start("t6-a", extra);
    SF_ASSERT_EQ(wait_rows("order_events", "t6", entries, 10000), entries);
    SF_ASSERT_EQ(wait_pending_zero("t6", 2, 5000), 0);
    SF_ASSERT(metric(p, "inventory_sink_claimed_total") >= 50, "claimed %.0f",
              metric(p, "inventory_sink_claimed_total"));
    assert_reconciled("t6");
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);
}

static void test_trimming_keeps_unacknowledged_entries(void **state)
{
    (void)state;
    NEED_SERVERS();
    make_sku("t7", 1);
    char ids[100][48];
    for (int i = 0; i < 100; i++) {
        char order[160];
        order_name(order, sizeof order, "t7", 0, i);
        log_event("t7", 0, order, "created", 1, "u", ids[i]);
    }
    /* Another consumer group ("audit") read 30 entries and acknowledged the first 20. */
    redisReply *r = rf_command(redis, "XGROUP CREATE inv:2:{t7/0}:log audit 0");
    freeReplyObject(r);
    r = rf_command(redis, "XREADGROUP GROUP audit reader COUNT 30 STREAMS inv:2:{t7/0}:log >");
    SF_ASSERT(r && r->type == REDIS_REPLY_ARRAY, "%s", "audit read");
    freeReplyObject(r);
    for (int i = 0; i < 20; i++)
        SF_ASSERT_EQ(rf_integer(redis, "XACK inv:2:{t7/0}:log audit %s", ids[i]), 1);
    sink_proc *p = sink_start("t7-a", NULL);
    SF_ASSERT_EQ(wait_rows("order_events", "t7", 100, 10000), 100);
    SF_ASSERT_EQ(wait_pending_zero("t7", 1, 5000), 0);
    int64_t deadline = tu_now_ms() + 5000;
    while (rf_integer(redis, "XLEN inv:2:{t7/0}:log") != 80 && tu_now_ms() < deadline)
        tu_sleep_ms(50);
    SF_ASSERT_EQ(rf_integer(redis, "XLEN inv:2:{t7/0}:log"), 80);
    tu_sleep_ms(1000); /* more maintenance rounds: still nothing the audit group needs goes */
    SF_ASSERT_EQ(rf_integer(redis, "XLEN inv:2:{t7/0}:log"), 80);
    r = rf_command(redis, "XRANGE inv:2:{t7/0}:log - + COUNT 1");
    SF_ASSERT(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1, "%s", "XRANGE");
    SF_ASSERT(strcmp(r->element[0]->element[0]->str, ids[20]) == 0,
              "first entry kept is %s, the audit group's lowest pending is %s",
              r->element[0]->element[0]->str, ids[20]);
    freeReplyObject(r);
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);
}

static void test_reconcile_names_each_difference(void **state)
{
    (void)state;
    NEED_SERVERS();
    make_sku("t8", 2);
    make_orders("t8", 2, 0, 12);
    sink_proc *p = sink_start("t8-a", NULL);
    SF_ASSERT_EQ(wait_rows("orders", "t8", 12, 10000), 12);
    SF_ASSERT_EQ(wait_pending_zero("t8", 2, 5000), 0);
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);
    assert_reconciled("t8");
    /* order 2 (segment 0) was cancelled: made confirmed; 3 (created, 4 units) is deleted from
     * the database; 4's quantity (1) is raised by 10 */
    char o2[160], o3[160], o4[160], sql[512];
    order_name(o2, sizeof o2, "t8", 0, 2);
    order_name(o3, sizeof o3, "t8", 1, 3);
    order_name(o4, sizeof o4, "t8", 0, 4);
    snprintf(sql, sizeof sql,
             "UPDATE " MDB_DATABASE ".orders SET status='confirmed' WHERE order_id='%s'", o2);
    SF_ASSERT_EQ(mdb_exec(db, sql), 0);
    snprintf(sql, sizeof sql, "DELETE FROM " MDB_DATABASE ".orders WHERE order_id='%s'", o3);
    SF_ASSERT_EQ(mdb_exec(db, sql), 0);
    snprintf(sql, sizeof sql,
             "UPDATE " MDB_DATABASE ".orders SET quantity=quantity+10 WHERE order_id='%s'", o4);
    SF_ASSERT_EQ(mdb_exec(db, sql), 0);
    char out[8192], want[256];
    SF_ASSERT_EQ(reconcile("t8", out, sizeof out), 1);
    snprintf(want, sizeof want, "status %s redis=cancelled db=confirmed\n", o2);
    SF_ASSERT(strstr(out, want) != NULL, "missing \"%s\" in:\n%s", want, out);
    snprintf(want, sizeof want, "missing_in_db %s status=created quantity=4\n", o3);
    SF_ASSERT(strstr(out, want) != NULL, "missing \"%s\" in:\n%s", want, out);
    snprintf(want, sizeof want, "quantity %s redis=1 db=11\n", o4);
    SF_ASSERT(strstr(out, want) != NULL, "missing \"%s\" in:\n%s", want, out);
    SF_ASSERT(strstr(out, "units cancelled ") != NULL && strstr(out, "units confirmed ") != NULL,
              "units per status in:\n%s", out);
    /* a bad SKU name is an error (2), not a difference */
    SF_ASSERT_EQ(reconcile("no/such", out, sizeof out), 2);
}

/* A multi-segment order (docs/design.md "Orders larger than one segment") as the scripts write
 * it: the primary record in segment k1 (the first part's) with quantity = the total and its
 * parts, a part record in each other segment (part_of, no user), and one log entry in k1's
 * stream with the total and the parts "k:q,...". parts_text is "k:q,k:q,..."; every record
 * gets status event. */
static void log_multi(const char *sku, const char *order_hex, const char *event, long long q,
                      const char *parts_text, const char *user)
{
    int k1 = atoi(parts_text);
    char key[256], orders[256], qs[24], at[24], rec[1024], pj[512] = "", primary[160];
    snprintf(primary, sizeof primary, "%s-%d-%s", order_hex, k1, sku);
    size_t used = 0;
    for (const char *p = parts_text; *p;) {
        char *end;
        long k = strtol(p, &end, 10);
        long long pq = strtoll(end + 1, &end, 10);
        used += (size_t)snprintf(pj + used, sizeof pj - used,
                                 "%s{\"segment\":%ld,\"quantity\":%lld}", used ? "," : "", k, pq);
        if (k != k1) {
            char part[160];
            snprintf(part, sizeof part, "%s-%ld-%s", order_hex, k, sku);
            snprintf(rec, sizeof rec,
                     "{\"order_id\":\"%s\",\"part_of\":\"%s\",\"sku\":\"%s\",\"segment\":%ld,"
                     "\"quantity\":%lld,\"status\":\"%s\"}",
                     part, primary, sku, k, pq, event);
            redisReply *r = rcmd("HSET inv:2:{%s/%ld}:orders %s %s", sku, k, part, rec);
            SF_ASSERT(r != NULL && r->type == REDIS_REPLY_INTEGER, "HSET part %s", part);
            freeReplyObject(r);
        }
        p = *end == ',' ? end + 1 : end;
    }
    snprintf(key, sizeof key, "inv:2:{%s/%d}:log", sku, k1);
    snprintf(orders, sizeof orders, "inv:2:{%s/%d}:orders", sku, k1);
    snprintf(qs, sizeof qs, "%lld", q);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(at, sizeof at, "%lld", (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
    snprintf(rec, sizeof rec,
             "{\"order_id\":\"%s\",\"sku\":\"%s\",\"quantity\":%lld,\"segment\":%d,"
             "\"user_id\":\"%s\",\"parts\":[%s],\"status\":\"%s\"}",
             primary, sku, q, k1, user, pj, event);
    redisReply *r = rcmd("XADD %s * event %s order %s sku %s segment %d user %s quantity %s "
                         "parts %s at %s version 7",
                         key, event, primary, sku, k1, user, qs, parts_text, at);
    SF_ASSERT(r != NULL && r->type == REDIS_REPLY_STRING, "XADD %s", key);
    freeReplyObject(r);
    r = rcmd("HSET %s %s %s", orders, primary, rec);
    SF_ASSERT(r != NULL && r->type == REDIS_REPLY_INTEGER, "HSET %s", orders);
    freeReplyObject(r);
}

/* 1 when the orders row of order has this quantity and parts column (JSON text). */
static int row_has_parts(const char *order, long long q, const char *parts_json)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT COUNT(*) FROM orders WHERE order_id = '%s' AND quantity = %lld AND "
             "parts = '%s'",
             order, q, parts_json);
    return mdb_scalar(db, sql) == 1;
}

#define HEX_A "a0000000000000000000000000000001"
#define HEX_B "b0000000000000000000000000000002"

/* A multi-segment order's log entry lands as one row with the order's total and its parts
 * (the part records in Redis are no rows of their own); a one-segment order's row has its one
 * part; an entry whose parts do not sum to its quantity is malformed; reconcile compares parts
 * and is clean, then names a row whose parts were edited. */
static void test_multi_segment_order_lands_with_parts(void **state)
{
    (void)state;
    NEED_SERVERS();
    make_sku("t13", 3);
    log_multi("t13", HEX_A, "created", 12, "0:5,1:4,2:3", "u1");
    char one[160];
    order_name(one, sizeof one, "t13", 1, 2);
    log_event("t13", 1, one, "created", 2, "u2", NULL);
    /* parts summing to 9, quantity 12: malformed (no record: it is no order) */
    redisReply *r = rcmd("XADD inv:2:{t13/0}:log * event created order " HEX_B "-0-t13 sku t13 "
                         "segment 0 user u3 quantity 12 parts 0:5,2:4 at 1 version 7");
    SF_ASSERT(r != NULL && r->type == REDIS_REPLY_STRING, "%s", "XADD malformed");
    freeReplyObject(r);
    sink_proc *p = sink_start("t13-a", NULL);
    SF_ASSERT_EQ(wait_rows("orders", "t13", 2, 10000), 2);
    SF_ASSERT_EQ(wait_pending_zero("t13", 3, 5000), 0);
    SF_ASSERT_EQ(metric(p, "inventory_sink_errors_total{kind=\"malformed\"}"), 1);
    SF_ASSERT(row_has_parts(HEX_A "-0-t13", 12,
                            "[{\"segment\":0,\"quantity\":5},{\"segment\":1,\"quantity\":4},"
                            "{\"segment\":2,\"quantity\":3}]"),
              "%s", "the multi-segment order's row lacks its total or its parts");
    SF_ASSERT(row_has_parts(one, 2, "[{\"segment\":1,\"quantity\":2}]"), "%s",
              "the one-segment order's row lacks its one part");
    assert_reconciled("t13");
    /* cancelled: every part with it; still one row, still clean */
    log_multi("t13", HEX_A, "cancelled", 12, "0:5,1:4,2:3", "u1");
    int64_t deadline = tu_now_ms() + 10000;
    while (mdb_scalar(db, "SELECT COUNT(*) FROM orders WHERE sku='t13' AND status='cancelled'") !=
               1 &&
           tu_now_ms() < deadline)
        tu_sleep_ms(20);
    SF_ASSERT_EQ(wait_pending_zero("t13", 3, 5000), 0);
    assert_reconciled("t13");
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);
    SF_ASSERT_EQ(mdb_exec(db,
                          "UPDATE " MDB_DATABASE ".orders SET parts="
                          "'[{\"segment\":0,\"quantity\":12}]' WHERE order_id='" HEX_A "-0-t13'"),
                 0);
    char out[8192];
    SF_ASSERT_EQ(reconcile("t13", out, sizeof out), 1);
    SF_ASSERT(strstr(out, "parts " HEX_A "-0-t13 redis=0:5,1:4,2:3 db=0:12\n") != NULL,
              "no parts difference in:\n%s", out);
    SF_ASSERT(strstr(out, "missing_in_db") == NULL, "a part record taken for an order:\n%s", out);
}

/* An orders table made before the parts column existed gets it when a sink starts; its old
 * rows (parts NULL) read as their one segment's part in reconcile. */
static void test_old_table_gets_the_parts_column(void **state)
{
    (void)state;
    NEED_SERVERS();
    const char *has_column = "SELECT COUNT(*) FROM information_schema.columns WHERE "
                             "table_schema='" MDB_DATABASE "' AND table_name='orders' AND "
                             "column_name='parts'";
    SF_ASSERT_EQ(mdb_exec(db, "ALTER TABLE " MDB_DATABASE ".orders DROP COLUMN parts"), 0);
    SF_ASSERT_EQ(mdb_scalar(db, has_column), 0);
    /* a database that old lacks order_items too (issue 33) */
    SF_ASSERT_EQ(mdb_exec(db, "DROP TABLE " MDB_DATABASE ".order_items"), 0);
    SF_ASSERT_EQ(mdb_exec(db, "DELETE FROM " MDB_DATABASE ".sink_migrations"), 0);
    make_sku("t14", 2);
    /* an order the old sink wrote: its row and its record, its entry long acknowledged */
    char old[160], fresh[160], sql[1024];
    order_name(old, sizeof old, "t14", 0, 1);
    order_name(fresh, sizeof fresh, "t14", 1, 2);
    snprintf(sql, sizeof sql,
             "INSERT INTO " MDB_DATABASE ".orders (order_id, sku, segment, user_id, quantity, "
             "status, created_at, updated_at, last_stream_ms, last_stream_seq) VALUES ('%s', "
             "'t14', 0, 'u1', 3, 'created', NOW(3), NOW(3), 1, 0)",
             old);
    SF_ASSERT_EQ(mdb_exec(db, sql), 0);
    redisReply *r = rcmd("HSET inv:2:{t14/0}:orders %s {\"order_id\":\"%s\",\"sku\":\"t14\","
                         "\"quantity\":3,\"segment\":0,\"user_id\":\"u1\",\"status\":"
                         "\"created\"}",
                         old, old);
    SF_ASSERT(r != NULL && r->type == REDIS_REPLY_INTEGER, "%s", "HSET the old order");
    freeReplyObject(r);
    log_event("t14", 1, fresh, "created", 2, "u2", NULL);
    /* without ALTER the sink says what to run, and writes nothing */
    sink_proc *p = sink_spawn("t14-a", NULL);
    int64_t deadline = tu_now_ms() + 10000;
    while (!sink_log_has(p, "ADD COLUMN IF NOT EXISTS parts") && tu_now_ms() < deadline)
        tu_sleep_ms(50);
    SF_ASSERT(sink_log_has(p, "ALTER TABLE orders ADD COLUMN IF NOT EXISTS parts"), "%s",
              "no message naming the ALTER to run");
    SF_ASSERT_EQ(db_count("orders", "t14"), 1);
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);
    /* the upgrade: ALTER granted for one start */
    SF_ASSERT_EQ(mdb_exec(db, "GRANT ALTER ON " MDB_DATABASE ".* TO '" MDB_USER "'@'127.0.0.1'"),
                 0);
    p = sink_start("t14-a", NULL);
    SF_ASSERT_EQ(wait_rows("orders", "t14", 2, 10000), 2);
    SF_ASSERT_EQ(wait_pending_zero("t14", 2, 5000), 0);
    SF_ASSERT_EQ(mdb_scalar(db, has_column), 1);
    SF_ASSERT_EQ(mdb_exec(db, "REVOKE ALTER ON " MDB_DATABASE ".* FROM '" MDB_USER "'@'127.0.0.1'"),
                 0);
    SF_ASSERT(row_has_parts(fresh, 2, "[{\"segment\":1,\"quantity\":2}]"), "%s",
              "the new row lacks its parts");
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM orders WHERE order_id='%s' AND parts IS NULL",
             old);
    SF_ASSERT_EQ(mdb_scalar(db, sql), 1);
    /* and its order_items row, filled from its segment and quantity at that start */
    snprintf(sql, sizeof sql,
             "SELECT COUNT(*) FROM order_items WHERE order_id='%s' AND sku='t14' AND segment=0 "
             "AND quantity=3",
             old);
    SF_ASSERT_EQ(mdb_scalar(db, sql), 1);
    assert_reconciled("t14");
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);
}

static void test_redis_paused_then_resumed(void **state)
{
    (void)state;
    NEED_SERVERS();
    make_sku("t9", 2);
    int entries = make_orders("t9", 2, 0, 60);
    sink_proc *p = sink_start("t9-a", NULL);
    SF_ASSERT_EQ(wait_rows("order_events", "t9", entries, 10000), entries);
    /* Redis stops answering for 2.5 s: the sink's commands time out (1 s), it backs off */
    SF_ASSERT_EQ(rf_pause(redis), 0);
    tu_sleep_ms(2500);
    sf_resp r = {0};
    int health = sf_http(p->metrics_port, "GET", "/healthz", NULL, NULL, 0, &r);
    sf_resp_free(&r);
    SF_ASSERT_EQ(rf_resume(redis), 0);
    SF_ASSERT_EQ(health, 503);
    SF_ASSERT(metric(p, "inventory_sink_errors_total{kind=\"redis\"}") >= 1, "%s",
              "Redis errors counted");
    entries += make_orders("t9", 2, 60, 60);
    SF_ASSERT_EQ(wait_rows("order_events", "t9", entries, 15000), entries);
    SF_ASSERT_EQ(wait_pending_zero("t9", 2, 5000), 0);
    assert_reconciled("t9");
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);
}

/* ---- issue 33: order_items, and a cart's entry ---- */

static int reconcile_with(const char *sku, const char *flag, char *out, size_t cap);

/* Rows of order_items of order (sku NULL: every SKU) and their units. */
static long long item_rows(const char *order, const char *sku, long long *units)
{
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM order_items WHERE order_id = '%s'%s%s%s", order,
             sku ? " AND sku = '" : "", sku ? sku : "", sku ? "'" : "");
    long long n = mdb_scalar(db, sql);
    if (units != NULL) {
        snprintf(sql, sizeof sql,
                 "SELECT COALESCE(SUM(quantity), 0) FROM order_items WHERE order_id = '%s'%s%s%s",
                 order, sku ? " AND sku = '" : "", sku ? sku : "", sku ? "'" : "");
        *units = mdb_scalar(db, sql);
    }
    return n;
}

/* 1 when order_items holds (order, sku, k) with q units. */
static int item_row(const char *order, const char *sku, int k, long long q)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT COUNT(*) FROM order_items WHERE order_id = '%s' AND sku = '%s' AND "
             "segment = %d AND quantity = %lld",
             order, sku, k, q);
    return mdb_scalar(db, sql) == 1;
}

/* A second consumer group reading nothing, so the sink's acknowledged entries stay (not
 * trimmed) and a replay (XGROUP SETID sink 0) can deliver them again. */
static void keep_entries(const char *sku, int segs)
{
    for (int k = 0; k < segs; k++) {
        redisReply *r = rcmd("XGROUP CREATE inv:2:{%s/%d}:log audit 0 MKSTREAM", sku, k);
        SF_ASSERT(r && r->type == REDIS_REPLY_STATUS, "XGROUP CREATE audit on %s/%d", sku, k);
        freeReplyObject(r);
    }
}

/* Delivers every entry of segments [0, segs) of sku to the sink's group again (at-least-once:
 * what a sink killed between its COMMIT and its XACK gets). */
static void replay(const char *sku, int segs)
{
    for (int k = 0; k < segs; k++) {
        redisReply *r = rcmd("XGROUP SETID inv:2:{%s/%d}:log sink 0", sku, k);
        SF_ASSERT(r && r->type == REDIS_REPLY_STATUS, "XGROUP SETID on %s/%d", sku, k);
        freeReplyObject(r);
    }
}

/* Every part of a one-segment and of a multi-segment order is a row of order_items, written
 * with its orders row; a replay of the whole log adds no row and changes none (took ~1 s). */
static void test_order_items_of_single_sku_orders(void **state)
{
    (void)state;
    NEED_SERVERS();
    make_sku("t15", 3);
    keep_entries("t15", 3);
    char one[160];
    order_name(one, sizeof one, "t15", 1, 1);
    log_event("t15", 1, one, "created", 3, "u1", NULL);
    log_event("t15", 1, one, "cancelled", 3, "u1", NULL);
    log_multi("t15", HEX_A, "created", 12, "0:5,1:4,2:3", "u2");
    sink_proc *p = sink_start("t15-a", NULL);
    SF_ASSERT_EQ(wait_rows("order_events", "t15", 3, 10000), 3);
    SF_ASSERT_EQ(wait_pending_zero("t15", 3, 5000), 0);
    SF_ASSERT_EQ(db_count("order_items", "t15"), 4);
    SF_ASSERT(item_row(one, "t15", 1, 3), "%s", "the one-segment order's row");
    SF_ASSERT(item_row(HEX_A "-0-t15", "t15", 0, 5) && item_row(HEX_A "-0-t15", "t15", 1, 4) &&
                  item_row(HEX_A "-0-t15", "t15", 2, 3),
              "%s", "the multi-segment order's three rows");
    assert_reconciled("t15");
    replay("t15", 3);
    SF_ASSERT_EQ(wait_pending_zero("t15", 3, 5000), 0);
    SF_ASSERT_EQ(metric_reaching(p, "inventory_sink_events_duplicate_total", 3, 5000), 3);
    SF_ASSERT_EQ(db_count("order_items", "t15"), 4);
    SF_ASSERT_EQ(db_count("order_events", "t15"), 3);
    assert_reconciled("t15");
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);
}

/* The segment keys the commit script reads, for a segment of stock units at version 1. */
static void make_segment(const char *sku, int k, long long stock)
{
    redisReply *r = rcmd("SET inv:2:{%s/%d}:stock %lld", sku, k, stock);
    freeReplyObject(r);
    r = rcmd("SET inv:2:{%s/%d}:sver 1", sku, k);
    freeReplyObject(r);
    r = rcmd("HSET inv:2:{%s/%d}:cnt t %lld s 0 o 0", sku, k, stock);
    SF_ASSERT(r != NULL && r->type == REDIS_REPLY_INTEGER, "cnt of %s/%d", sku, k);
    freeReplyObject(r);
}

/* EVAL of a script's text (store_lua.h) on the test's one Redis. The reply. */
static redisReply *script_eval(const char *text, int nkeys, const char *const *keys, int nargs,
                               const char *const *args)
{
    const char *argv[40];
    char nk[16];
    snprintf(nk, sizeof nk, "%d", nkeys);
    int argc = 0;
    argv[argc++] = "EVAL";
    argv[argc++] = text;
    argv[argc++] = nk;
    for (int i = 0; i < nkeys && argc < 40; i++)
        argv[argc++] = keys[i];
    for (int i = 0; i < nargs && argc < 40; i++)
        argv[argc++] = args[i];
    redisContext *c = conn_to(target_port);
    SF_ASSERT(c != NULL, "%s", "a connection to the test's Redis");
    return redisCommandArgv(c, argc, argv, NULL);
}

/* The commit script (commit_body.lua) as store_commit_call lays it out: kind "" (one-segment)
 * or "primary" with its parts, total and a cart's items (NULL: none). Asserts it committed. */
static void commit_script(const char *sku, int k, const char *id, const char *record, long long q,
                          const char *kind, const char *parts, long long total, const char *items)
{
    struct sku_rules rules;
    memset(&rules, 0, sizeof rules);
    struct store_commit_in in = {.sku = sku,
                                 .k = k,
                                 .version = 1,
                                 .qty = q,
                                 .id = id,
                                 .record = record,
                                 .idem = "",
                                 .expiry = "0",
                                 .rules = &rules,
                                 .log_cap = 1000,
                                 .user = "u1",
                                 .kind = kind,
                                 .parts = parts,
                                 .total = total,
                                 .items = items};
    struct store_commit_call c;
    store_commit_call(&in, &c);
    redisReply *r = script_eval(STORE_LUA_COMMIT_BODY, c.nkeys, c.keys, c.nargs, c.args);
    SF_ASSERT(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
                  r->element[0]->integer == STORE_COMMIT_OK,
              "commit of %s: %s", id, r && r->type == REDIS_REPLY_ERROR ? r->str : "not {1, ...}");
    freeReplyObject(r);
}

/* The last entry of a stream: its fields' count and the value of field name ("" none) into
 * value (cap bytes). */
static size_t last_entry(const char *sku, int k, const char *name, char *value, size_t cap)
{
    redisReply *r = rcmd("XREVRANGE inv:2:{%s/%d}:log + - COUNT 1", sku, k);
    SF_ASSERT(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1, "XREVRANGE %s/%d", sku, k);
    const redisReply *f = r->element[0]->element[1];
    value[0] = '\0';
    for (size_t i = 0; i + 1 < f->elements; i += 2)
        if (strcmp(f->element[i]->str, name) == 0)
            snprintf(value, cap, "%s", f->element[i + 1]->str);
    size_t n = f->elements;
    freeReplyObject(r);
    return n;
}

/* A part record of a cart (part_of the primary, in its own SKU), as the cart's commit writes
 * it. */
static void cart_part(const char *hex, const char *sku, int k, long long q, const char *primary,
                      const char *status)
{
    redisReply *r = rcmd("HSET inv:2:{%s/%d}:orders %s-%d-%s {\"order_id\":\"%s-%d-%s\","
                         "\"part_of\":\"%s\",\"sku\":\"%s\",\"segment\":%d,\"quantity\":%lld,"
                         "\"status\":\"%s\"}",
                         sku, k, hex, k, sku, hex, k, sku, primary, sku, k, q, status);
    SF_ASSERT(r != NULL && r->type == REDIS_REPLY_INTEGER, "part %s-%d-%s", hex, k, sku);
    freeReplyObject(r);
}

#define CART_HEX "c0000000000000000000000000000033"
#define CART_ID CART_HEX "-0-ca"
#define CART_ITEMS "ca:0:3,cb:0:1,cb:1:2"
/* The cart's primary record: home item ca (3 units in segment 0), item cb (1 + 2 units). */
#define CART_RECORD(hex, st)                                                                       \
    "{\"order_id\":\"" hex "-0-ca\",\"sku\":\"ca\",\"quantity\":3,\"segment\":0,"                  \
    "\"user_id\":\"u1\",\"parts\":[{\"segment\":0,\"quantity\":3}],\"items\":[{\"sku\":\"ca\","    \
    "\"quantity\":3,\"parts\":[{\"segment\":0,\"quantity\":3}]},{\"sku\":\"cb\",\"quantity\":3,"   \
    "\"parts\":[{\"segment\":0,\"quantity\":1},{\"segment\":1,\"quantity\":2}]}],"                 \
    "\"created_at\":\"2026-11-25T00:00:00.000Z\",\"status\":\"" st "\"}"

/* A cart over two SKUs, committed by the real commit script (kind "primary", ARGV[19] its items;
 * its parts in cb written here as the cart's part commits would) and cancelled by the real
 * cancel.lua: each entry carries the items, a single-SKU order's entry has no such field; the
 * sink writes one orders row and one order_items row per part in each SKU; a replay adds
 * nothing; reconcile is clean for both SKUs, names a deleted row (and a replay puts it back);
 * reconcile --repair writes an unlogged cart's rows from its records; a cart record whose items
 * cannot be spelled is refused by cancel.lua as damaged, nothing written (took ~2 s). */
static void test_cart_entry_lands_in_every_sku(void **state)
{
    (void)state;
    NEED_SERVERS();
    make_sku("ca", 2);
    make_sku("cb", 2);
    keep_entries("ca", 2);
    for (int k = 0; k < 2; k++) {
        make_segment("ca", k, 10);
        make_segment("cb", k, 10);
    }
    /* the parts in cb first, then the primary, as the cart commits */
    cart_part(CART_HEX, "cb", 0, 1, CART_ID, "created");
    cart_part(CART_HEX, "cb", 1, 2, CART_ID, "created");
    commit_script("ca", 0, CART_ID, CART_RECORD(CART_HEX, "created"), 3, "primary", "0:3", 3,
                  CART_ITEMS);
    char v[512];
    SF_ASSERT_EQ(last_entry("ca", 0, "items", v, sizeof v), 20);
    SF_ASSERT(strcmp(v, CART_ITEMS) == 0, "the cart's entry's items: \"%s\"", v);
    /* a single-SKU order's entry: the eight fields it always had, no items */
    const char *single = "d0000000000000000000000000000033-1-ca";
    commit_script("ca", 1, single,
                  "{\"order_id\":\"d0000000000000000000000000000033-1-ca\",\"sku\":\"ca\","
                  "\"quantity\":2,\"segment\":1,\"user_id\":\"u1\",\"created_at\":"
                  "\"2026-11-25T00:00:00.000Z\",\"status\":\"created\"}",
                  2, "", NULL, 0, NULL);
    SF_ASSERT_EQ(last_entry("ca", 1, "items", v, sizeof v), 16);
    SF_ASSERT_EQ(v[0], '\0');

    sink_proc *p = sink_start("cart-a", NULL);
    SF_ASSERT_EQ(wait_rows("orders", "ca", 2, 10000), 2);
    SF_ASSERT_EQ(wait_pending_zero("ca", 2, 5000), 0);
    SF_ASSERT_EQ(db_count("orders", "cb"), 0); /* the cart is one order, of its home SKU */
    SF_ASSERT(row_has_parts(CART_ID, 3, "[{\"segment\":0,\"quantity\":3}]"), "%s",
              "the cart's orders row: the home item's units and parts");
    long long units = 0;
    SF_ASSERT_EQ(item_rows(CART_ID, NULL, &units), 3);
    SF_ASSERT_EQ(units, 6);
    SF_ASSERT(item_row(CART_ID, "ca", 0, 3) && item_row(CART_ID, "cb", 0, 1) &&
                  item_row(CART_ID, "cb", 1, 2),
              "%s", "a row for each part of the cart, in each SKU");
    SF_ASSERT(item_row(single, "ca", 1, 2), "%s", "the single order's row");
    assert_reconciled("ca");
    assert_reconciled("cb");

    /* a row lost: reconcile of its SKU names the units it lacks, and exits 1 */
    SF_ASSERT_EQ(mdb_exec(db, "DELETE FROM " MDB_DATABASE ".order_items WHERE order_id = '" CART_ID
                              "' AND sku = 'cb' AND segment = 1"),
                 0);
    char out[8192];
    SF_ASSERT_EQ(reconcile("cb", out, sizeof out), 1);
    SF_ASSERT(strstr(out, "sold segment=1 redis=2 db=0\n") != NULL, "no sold difference in:\n%s",
              out);
    assert_reconciled("ca"); /* its own SKU's units are whole */
    /* a replay of the log puts it back and doubles nothing */
    replay("ca", 2);
    int64_t deadline = tu_now_ms() + 10000;
    while (!item_row(CART_ID, "cb", 1, 2) && tu_now_ms() < deadline)
        tu_sleep_ms(20);
    SF_ASSERT_EQ(wait_pending_zero("ca", 2, 5000), 0);
    SF_ASSERT_EQ(item_rows(CART_ID, NULL, NULL), 3);
    SF_ASSERT_EQ(db_count("order_events", "ca"), 2);
    assert_reconciled("cb");

    /* cancelled by cancel.lua: its entry carries the same items, from the record */
    struct seg_keys sk;
    store_seg_keys("ca", 0, &sk);
    const char *ck[] = {sk.stock, sk.cnt, sk.orders, sk.due, sk.give, sk.log, sk.sver, sk.follow};
    const char *ca[] = {CART_ID, "1"};
    redisReply *r = script_eval(STORE_LUA_CANCEL, 8, ck, 2, ca);
    SF_ASSERT(r && r->type == REDIS_REPLY_ARRAY && r->element[0]->integer == STORE_CANCEL_DONE,
              "cancel: %s", r && r->type == REDIS_REPLY_ERROR ? r->str : "not done");
    freeReplyObject(r);
    SF_ASSERT_EQ(last_entry("ca", 0, "event", v, sizeof v), 20);
    SF_ASSERT(strcmp(v, "cancelled") == 0, "last event %s", v);
    last_entry("ca", 0, "items", v, sizeof v);
    SF_ASSERT(strcmp(v, CART_ITEMS) == 0, "the cancel's entry's items: \"%s\"", v);
    /* its parts follow it (part_follow.lua's work, done here) */
    cart_part(CART_HEX, "cb", 0, 1, CART_ID, "cancelled");
    cart_part(CART_HEX, "cb", 1, 2, CART_ID, "cancelled");
    deadline = tu_now_ms() + 10000;
    while (mdb_scalar(db, "SELECT COUNT(*) FROM orders WHERE order_id = '" CART_ID
                          "' AND status = 'cancelled'") != 1 &&
           tu_now_ms() < deadline)
        tu_sleep_ms(20);
    SF_ASSERT_EQ(wait_pending_zero("ca", 2, 5000), 0);
    SF_ASSERT_EQ(metric(p, "inventory_sink_errors_total{kind=\"malformed\"}"), 0);
    SF_ASSERT_EQ(item_rows(CART_ID, NULL, NULL), 3);
    assert_reconciled("ca");
    assert_reconciled("cb");
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);

    /* a cart changed without a log entry: reconcile --repair writes its rows in both SKUs */
    const char *hex2 = "e0000000000000000000000000000033";
    redisReply *h = rcmd("HSET inv:2:{ca/0}:orders %s-0-ca %s", hex2,
                         CART_RECORD("e0000000000000000000000000000033", "created"));
    freeReplyObject(h);
    cart_part(hex2, "cb", 0, 1, "e0000000000000000000000000000033-0-ca", "created");
    cart_part(hex2, "cb", 1, 2, "e0000000000000000000000000000033-0-ca", "created");
    SF_ASSERT_EQ(reconcile("cb", out, sizeof out), 1);
    SF_ASSERT(strstr(out, "sold segment=1 redis=2 db=0\n") != NULL, "no sold difference in:\n%s",
              out);
    int rc = reconcile_with("ca", "--repair", out, sizeof out);
    SF_ASSERT(rc == 0, "reconcile --repair ca: exit %d:\n%s", rc, out);
    SF_ASSERT_EQ(item_rows("e0000000000000000000000000000033-0-ca", "cb", &units), 2);
    SF_ASSERT_EQ(units, 3);
    assert_reconciled("cb");

    /* a cart record whose items the scripts cannot spell (cb's parts sum to 2, its quantity
     * says 3): with the log on, cancel.lua refuses it as damaged and writes nothing, rather
     * than log an entry the sink would drop as malformed */
    const char *bad = "{\"order_id\":\"f0000000000000000000000000000033-0-ca\",\"sku\":\"ca\","
                      "\"quantity\":1,\"segment\":0,\"user_id\":\"u1\",\"parts\":[{\"segment\":0,"
                      "\"quantity\":1}],\"items\":[{\"sku\":\"ca\",\"quantity\":1,\"parts\":[{"
                      "\"segment\":0,\"quantity\":1}]},{\"sku\":\"cb\",\"quantity\":3,\"parts\":[{"
                      "\"segment\":0,\"quantity\":2}]}],\"status\":\"created\"}";
    h = rcmd("HSET inv:2:{ca/0}:orders f0000000000000000000000000000033-0-ca %s", bad);
    freeReplyObject(h);
    h = rcmd("HINCRBY inv:2:{ca/0}:cnt s 1");
    freeReplyObject(h);
    h = rcmd("HINCRBY inv:2:{ca/0}:cnt o 1");
    freeReplyObject(h);
    long long before = rint_("XLEN inv:2:{ca/0}:log");
    const char *cb[] = {"f0000000000000000000000000000033-0-ca", "1"};
    r = script_eval(STORE_LUA_CANCEL, 8, ck, 2, cb);
    SF_ASSERT(r && r->type == REDIS_REPLY_ERROR && strstr(r->str, "damaged") != NULL,
              "cancel of a cart with bad items: %s",
              r && r->type == REDIS_REPLY_ERROR ? r->str : "no error");
    freeReplyObject(r);
    SF_ASSERT_EQ(rint_("XLEN inv:2:{ca/0}:log"), before);
    h = rcmd("HGET inv:2:{ca/0}:orders f0000000000000000000000000000033-0-ca");
    SF_ASSERT(h && h->type == REDIS_REPLY_STRING && strcmp(h->str, bad) == 0, "%s",
              "the record changed");
    freeReplyObject(h);
}

/* A database made before order_items: the table is made at the sink's start and filled from
 * the orders rows (a multi-segment order's parts column, a one-segment order's segment), once
 * (sink_migrations marks it) (took ~1 s). */
static void test_old_database_gets_order_items(void **state)
{
    (void)state;
    NEED_SERVERS();
    const char *sql[] = {
        "DROP TABLE " MDB_DATABASE ".order_items",
        "DELETE FROM " MDB_DATABASE ".sink_migrations WHERE name = 'order_items'",
        "INSERT INTO " MDB_DATABASE ".orders (order_id, sku, segment, user_id, quantity, status,"
        " parts, created_at, updated_at, last_stream_ms, last_stream_seq) VALUES"
        " ('f0000000000000000000000000000001-0-t16', 't16', 0, 'u', 5, 'created',"
        " '[{\"segment\":0,\"quantity\":2},{\"segment\":3,\"quantity\":3}]', NOW(3), NOW(3), 1,"
        " 0), ('f0000000000000000000000000000002-1-t16', 't16', 1, 'u', 4, 'created', NULL,"
        " NOW(3), NOW(3), 1, 0)",
    };
    for (size_t i = 0; i < sizeof sql / sizeof sql[0]; i++)
        SF_ASSERT_EQ(mdb_exec(db, sql[i]), 0);
    sink_proc *p = sink_start("t16-a", NULL);
    SF_ASSERT_EQ(db_count("order_items", "t16"), 3);
    SF_ASSERT(item_row("f0000000000000000000000000000001-0-t16", "t16", 0, 2) &&
                  item_row("f0000000000000000000000000000001-0-t16", "t16", 3, 3) &&
                  item_row("f0000000000000000000000000000002-1-t16", "t16", 1, 4),
              "%s", "the old orders' rows");
    SF_ASSERT_EQ(mdb_scalar(db, "SELECT COUNT(*) FROM sink_migrations WHERE name='order_items'"),
                 1);
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);
    /* once: a row taken out by hand is not put back by the next start */
    SF_ASSERT_EQ(mdb_exec(db, "DELETE FROM " MDB_DATABASE ".order_items WHERE sku = 't16'"), 0);
    p = sink_start("t16-a", NULL);
    SF_ASSERT_EQ(db_count("order_items", "t16"), 0);
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);
    SF_ASSERT_EQ(mdb_exec(db, "DELETE FROM " MDB_DATABASE ".orders WHERE sku = 't16'"), 0);
}

/* ---- issue 29: the log and the sink agree by construction ---- */

/* reconcile with one more flag (NULL: none), as reconcile does. */
static int reconcile_with(const char *sku, const char *flag, char *out, size_t cap)
{
    const char *bin = sink_binary();
    SF_ASSERT(bin != NULL, "%s", "no inventory-sink binary");
    char path[256];
    snprintf(path, sizeof path, "%s/reconcile.out", rf_dir(redis));
    const char *argv[] = {bin,         "reconcile", "--redis", target, "--db",
                          mdb_url(db), "--sku",     sku,       flag,   NULL};
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    pid_t pid = pr_spawn(argv, fd, -1);
    if (fd >= 0)
        close(fd);
    SF_ASSERT(pid > 0, "%s", "spawn reconcile");
    int status;
    waitpid(pid, &status, 0);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, cap - 1, f) : 0;
    out[n] = '\0';
    if (f)
        fclose(f);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* n orders of one unit of sku through the instance on port; each id into ids[i] when ids. */
static void place_orders(int port, const char *sku, int n, char (*ids)[160])
{
    for (int i = 0; i < n; i++) {
        sf_resp r = {0};
        int st = sf_order(NULL, port, sku, 1, &r);
        SF_ASSERT(st == 201, "order %d of %s: %s", i, sku, sf_resp_summary(&r));
        const char *id = json_string_value(json_object_get(r.json, "order_id"));
        SF_ASSERT(id != NULL, "order %d of %s has no order_id", i, sku);
        if (ids != NULL)
            snprintf(ids[i], 160, "%s", id);
        sf_resp_free(&r);
    }
}

/* Streams of segments [from, to) of sku that exist. */
static long long logs_left(const char *sku, int from, int to)
{
    long long n = 0;
    for (int k = from; k < to; k++)
        n += rint_("EXISTS inv:2:{%s/%d}:log", sku, k);
    return n;
}

/* Waits (at most timeout_ms) until no stream of [from, to) of sku exists. The last count. */
static long long wait_logs_gone(const char *sku, int from, int to, int timeout_ms)
{
    int64_t deadline = tu_now_ms() + timeout_ms;
    long long n;
    while ((n = logs_left(sku, from, to)) != 0 && tu_now_ms() < deadline)
        tu_sleep_ms(50);
    return n;
}

/* A row the backfill moved up is not moved down by an older change's entry arriving later
 * (took 1 s): an order created with a log entry, then cancelled without one (an instance
 * without --order-log); reconcile --repair writes the cancelled row first (stream id 0-0), then
 * the sink delivers the created entry, newer by id: the row stays cancelled (statuses move up
 * only: reserved < created < confirmed < expired < cancelled). Without that rule the row went
 * back to created and reconcile named it. */
static void test_backfilled_status_is_not_moved_down(void **state)
{
    (void)state;
    NEED_SERVERS();
    make_sku("t29r", 1);
    char order[160];
    order_name(order, sizeof order, "t29r", 0, 1);
    log_event("t29r", 0, order, "created", 2, "u1", NULL);
    char rec[512];
    snprintf(rec, sizeof rec,
             "{\"order_id\":\"%s\",\"sku\":\"t29r\",\"quantity\":2,\"segment\":0,"
             "\"user_id\":\"u1\",\"created_at\":\"2026-11-25T00:00:00.000Z\",\"status\":"
             "\"cancelled\"}",
             order);
    redisReply *r = rcmd("HSET inv:2:{t29r/0}:orders %s %s", order, rec);
    SF_ASSERT(r != NULL && r->type == REDIS_REPLY_INTEGER, "%s", "HSET the cancelled record");
    freeReplyObject(r);
    char out[8192];
    int rc = reconcile_with("t29r", "--repair", out, sizeof out);
    SF_ASSERT(rc == 1 && strstr(out, "log_unread") != NULL,
              "reconcile --repair before the sink: exit %d, want 1 (the log unread):\n%s", rc, out);
    SF_ASSERT_EQ(mdb_scalar(db, "SELECT COUNT(*) FROM orders WHERE sku='t29r' AND "
                                "status='cancelled'"),
                 1);
    sink_proc *p = sink_start("t29r-a", NULL);
    SF_ASSERT_EQ(wait_rows("order_events", "t29r", 1, 10000), 1);
    SF_ASSERT_EQ(mdb_scalar(db, "SELECT COUNT(*) FROM orders WHERE sku='t29r' AND "
                                "status='cancelled'"),
                 1);
    SF_ASSERT_EQ(wait_pending_zero("t29r", 1, 5000), 0);
    assert_reconciled("t29r");
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);
}

/* Issue 29 item 3, the reproduction (took 3-4 s): --order-log, 100 orders into 8 segments, a
 * PUT down to 2 segments, and only then a sink. Before: the database got the orders of
 * segments 0 and 1 only (about 26 of 100), because the sink followed [0, max(segments, hwm))
 * and hwm came down with the roll-out; reconcile said nothing of the 6 logs left. Now the
 * dropped segments' logs stay findable (meta's lhwm), reconcile names them while unread, the
 * sink writes every entry, then deletes each drained log and lowers lhwm. */
static void test_shrinking_put_keeps_the_dropped_logs(void **state)
{
    (void)state;
    NEED_SERVERS();
    const char *args[] = {"--order-log", NULL};
    sf_service *svc = sf_start(target, args);
    SF_ASSERT(svc != NULL, "%s", "inventoryd --order-log");
    int port = sf_port(svc);
    sf_resp r = {0};
    SF_ASSERT_EQ(sf_put_sku(port, NULL, "i29p", 1000, 8, &r), 201);
    place_orders(port, "i29p", 100, NULL);
    SF_ASSERT_EQ(sf_put_sku(port, NULL, "i29p", 10, 2, &r), 200);
    sf_resp_free(&r);
    json_t *st = sf_sku_status(port, "i29p"); /* the layout rolled out */
    SF_ASSERT(st != NULL && json_array_size(json_object_get(st, "segments")) == 2, "%s",
              "i29p has 2 segments");
    json_decref(st);
    SF_ASSERT(logs_left("i29p", 2, 8) > 0, "%s", "no log of a dropped segment: proves nothing");
    char out[16384];
    int rc = reconcile_with("i29p", NULL, out, sizeof out);
    SF_ASSERT(rc == 1 && strstr(out, "log_unread inv:2:{i29p/") != NULL,
              "reconcile before the sink: exit %d, want 1 naming the unread logs:\n%s", rc, out);

    sink_proc *p = sink_start("i29p-a", NULL);
    SF_ASSERT_EQ(wait_rows("order_events", "i29p", 100, 15000), 100);
    SF_ASSERT_EQ(db_count("orders", "i29p"), 100);
    SF_ASSERT_EQ(wait_logs_gone("i29p", 2, 8, 10000), 0);
    int64_t deadline = tu_now_ms() + 5000;
    while (rint_("HEXISTS inv:2:{i29p}:meta lhwm") != 0 && tu_now_ms() < deadline)
        tu_sleep_ms(50);
    SF_ASSERT_EQ(rint_("HEXISTS inv:2:{i29p}:meta lhwm"), 0);
    SF_ASSERT_EQ(logs_left("i29p", 0, 2), 2); /* the layout's own logs stay */
    assert_reconciled("i29p");
    /* The new layout's orders are logged and compared as before. */
    place_orders(port, "i29p", 5, NULL);
    SF_ASSERT_EQ(wait_rows("order_events", "i29p", 105, 10000), 105);
    assert_reconciled("i29p");
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);
    SF_ASSERT_EQ(sf_stop(svc), 0);
}

/* Issue 33: a hold extended through a real inventoryd (--order-log) lands as its orders row
 * with expires_at, the extension's new expiry (status still reserved; order_events has the
 * "extended" entry), and reconcile is clean; its confirm then moves the row on as before. */
static void test_extended_hold_sets_expires_at(void **state)
{
    (void)state;
    NEED_SERVERS();
    const char *args[] = {"--order-log", NULL};
    sf_service *svc = sf_start(target, args);
    SF_ASSERT(svc != NULL, "%s", "inventoryd --order-log");
    int port = sf_port(svc);
    sf_resp r = {0};
    sf_json_request(NULL, port, "PUT", "/api/v1/skus/i33x", NULL, NULL,
                    "{\"stock\":10,\"segments\":1,\"reservation_ttl_s\":60,"
                    "\"hold_extend_s\":120}",
                    &r);
    SF_ASSERT_STATUS(&r, 201);
    sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, NULL,
                    "{\"sku\":\"i33x\",\"quantity\":2}", &r);
    SF_ASSERT_STATUS(&r, 201);
    char id[160], path[256], want[64];
    snprintf(id, sizeof id, "%s", sf_str(r.json, "order_id"));
    snprintf(path, sizeof path, "/api/v1/orders/%s/extend", id);
    sf_json_request(NULL, port, "POST", path, NULL, NULL, "{\"seconds\":90}", &r);
    SF_ASSERT_STATUS(&r, 200);
    /* '2026-11-28T22:00:00.000Z' as the database writes it: '2026-11-28 22:00:00.000' */
    snprintf(want, sizeof want, "%.10s %.12s", sf_str(r.json, "expires_at"),
             sf_str(r.json, "expires_at") + 11);
    sink_proc *p = sink_start("i33x-a", NULL);
    SF_ASSERT_EQ(wait_rows("order_events", "i33x", 2, 10000), 2);
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT COUNT(*) FROM orders WHERE order_id = '%s' AND status = 'reserved' AND "
             "expires_at = '%s'",
             id, want);
    SF_ASSERT_EQ(mdb_scalar(db, sql), 1);
    snprintf(sql, sizeof sql,
             "SELECT COUNT(*) FROM order_events WHERE order_id = '%s' AND event = 'extended'", id);
    SF_ASSERT_EQ(mdb_scalar(db, sql), 1);
    SF_ASSERT_EQ(metric(p, "inventory_sink_errors_total{kind=\"malformed\"}"), 0);
    assert_reconciled("i33x");
    snprintf(path, sizeof path, "/api/v1/orders/%s/confirm", id);
    sf_json_request(NULL, port, "POST", path, NULL, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    sf_resp_free(&r);
    SF_ASSERT_EQ(wait_rows("order_events", "i33x", 3, 10000), 3);
    int64_t deadline = tu_now_ms() + 5000;
    snprintf(sql, sizeof sql,
             "SELECT COUNT(*) FROM orders WHERE order_id = '%s' AND status = 'confirmed' AND "
             "expires_at = '%s'",
             id, want);
    while (mdb_scalar(db, sql) != 1 && tu_now_ms() < deadline)
        tu_sleep_ms(20);
    SF_ASSERT_EQ(mdb_scalar(db, sql), 1);
    assert_reconciled("i33x");
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);
    SF_ASSERT_EQ(sf_stop(svc), 0);
}

/* Issue 33 (~2 s): a cart made through the service (items in two SKUs, the second's TTL making
 * it a hold), extended, then cancelled, with --order-log: its three entries reach the database
 * as one orders row in its home SKU and one order_items row per part in each SKU. Before the
 * cart passed its items text to the primary's commit, the created entry had no `items` field and
 * the database had no row of the second SKU's part (reconcile of i33c-b: sold differs). */
static void test_cart_through_the_service(void **state)
{
    (void)state;
    NEED_SERVERS();
    const char *args[] = {"--order-log", NULL};
    sf_service *svc = sf_start(target, args);
    SF_ASSERT(svc != NULL, "%s", "inventoryd --order-log");
    int port = sf_port(svc);
    sf_resp r = {0};
    sf_json_request(NULL, port, "PUT", "/api/v1/skus/i33c-a", NULL, NULL,
                    "{\"stock\":10,\"segments\":2,\"hold_extend_s\":60}", &r);
    SF_ASSERT_STATUS(&r, 201);
    sf_json_request(NULL, port, "PUT", "/api/v1/skus/i33c-b", NULL, NULL,
                    "{\"stock\":10,\"segments\":1,\"reservation_ttl_s\":60}", &r);
    SF_ASSERT_STATUS(&r, 201);
    sf_json_request(NULL, port, "POST", "/api/v1/orders", NULL, NULL,
                    "{\"items\":[{\"sku\":\"i33c-a\",\"quantity\":3},"
                    "{\"sku\":\"i33c-b\",\"quantity\":2}]}",
                    &r);
    SF_ASSERT_STATUS(&r, 201);
    SF_ASSERT(strcmp(sf_str(r.json, "status"), "reserved") == 0, "status %s",
              sf_str(r.json, "status"));
    char id[160], path[256], sql[512];
    snprintf(id, sizeof id, "%s", sf_str(r.json, "order_id"));
    snprintf(path, sizeof path, "/api/v1/orders/%s/extend", id);
    sf_json_request(NULL, port, "POST", path, NULL, NULL, "{\"seconds\":30}", &r);
    SF_ASSERT_STATUS(&r, 200);
    snprintf(path, sizeof path, "/api/v1/orders/%s", id);
    sf_json_request(NULL, port, "DELETE", path, NULL, NULL, NULL, &r);
    SF_ASSERT_STATUS(&r, 200);
    sf_resp_free(&r);
    sink_proc *p = sink_start("i33c", NULL);
    SF_ASSERT_EQ(wait_rows("order_events", "i33c-a", 3, 10000), 3);
    snprintf(sql, sizeof sql,
             "SELECT COUNT(*) FROM orders WHERE order_id = '%s' AND "
             "status = 'cancelled'",
             id);
    SF_ASSERT_EQ(mdb_scalar(db, sql), 1);
    snprintf(sql, sizeof sql,
             "SELECT COALESCE(SUM(quantity), 0) FROM order_items WHERE "
             "order_id = '%s' AND sku = 'i33c-a'",
             id);
    SF_ASSERT_EQ(mdb_scalar(db, sql), 3);
    snprintf(sql, sizeof sql,
             "SELECT COALESCE(SUM(quantity), 0) FROM order_items WHERE "
             "order_id = '%s' AND sku = 'i33c-b'",
             id);
    SF_ASSERT_EQ(mdb_scalar(db, sql), 2);
    SF_ASSERT_EQ(metric(p, "inventory_sink_errors_total{kind=\"malformed\"}"), 0);
    assert_reconciled("i33c-a");
    assert_reconciled("i33c-b");
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);
    SF_ASSERT_EQ(sf_stop(svc), 0);
}

/* Issue 29 item 3 with a DELETE (took 3 s): 60 orders into 8 segments, DELETE, then a sink.
 * Before: the DELETE took the SKU out of the registry, so no sink ever found its logs (0 rows).
 * Now it stays registered while logs of its segments are left; the sink writes all 60, deletes
 * the drained logs, and removes the SKU from the registry. */
static void test_delete_keeps_the_logs_until_drained(void **state)
{
    (void)state;
    NEED_SERVERS();
    const char *args[] = {"--order-log", NULL};
    sf_service *svc = sf_start(target, args);
    SF_ASSERT(svc != NULL, "%s", "inventoryd --order-log");
    int port = sf_port(svc);
    sf_resp r = {0};
    SF_ASSERT_EQ(sf_put_sku(port, NULL, "i29d", 1000, 8, &r), 201);
    place_orders(port, "i29d", 60, NULL);
    SF_ASSERT_EQ(sf_json_request(NULL, port, "DELETE", "/api/v1/skus/i29d", NULL, NULL, NULL, &r),
                 204);
    sf_resp_free(&r);
    SF_ASSERT(logs_left("i29d", 0, 8) > 0, "%s", "no log left: proves nothing");
    SF_ASSERT_EQ(rint_("SISMEMBER inv:2:skus i29d"), 1);
    char out[16384];
    int rc = reconcile_with("i29d", NULL, out, sizeof out);
    SF_ASSERT(rc == 1 && strstr(out, "log_unread inv:2:{i29d/") != NULL,
              "reconcile before the sink: exit %d, want 1 naming the unread logs:\n%s", rc, out);

    sink_proc *p = sink_start("i29d-a", NULL);
    SF_ASSERT_EQ(wait_rows("order_events", "i29d", 60, 15000), 60);
    SF_ASSERT_EQ(wait_logs_gone("i29d", 0, 8, 10000), 0);
    int64_t deadline = tu_now_ms() + 5000;
    while (rint_("SISMEMBER inv:2:skus i29d") != 0 && tu_now_ms() < deadline)
        tu_sleep_ms(50);
    SF_ASSERT_EQ(rint_("SISMEMBER inv:2:skus i29d"), 0);
    assert_reconciled("i29d");
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);
    SF_ASSERT_EQ(sf_stop(svc), 0);
}

/* Issue 29 item 4 (took 2-3 s): an instance without --order-log and a sink beside it. Before:
 * 10 orders, 0 rows, and the sink's log, /metrics and /healthz all said nothing was wrong.
 * Now: reconcile names the orders the database lacks, reconcile --repair writes them from
 * Redis's records; a running sink finds the changes counted without a log entry (cnt's u),
 * says so (log, inventory_sink_unlogged_total, inventory_sink_order_log_missing, /healthz 503
 * "order_log":"missing") and backfills them, a cancel's status included. */
static void test_sink_over_instances_without_the_log(void **state)
{
    (void)state;
    NEED_SERVERS();
    sf_service *svc = sf_start(target, NULL);
    SF_ASSERT(svc != NULL, "%s", "inventoryd (no --order-log)");
    int port = sf_port(svc);
    sf_resp r = {0};
    SF_ASSERT_EQ(sf_put_sku(port, NULL, "i29n", 100, 4, &r), 201);
    sf_resp_free(&r);
    place_orders(port, "i29n", 4, NULL);
    char out[16384];
    int rc = reconcile_with("i29n", NULL, out, sizeof out);
    SF_ASSERT(rc == 1 && strstr(out, "missing_in_db ") != NULL,
              "reconcile: exit %d, want 1 naming the missing orders:\n%s", rc, out);
    rc = reconcile_with("i29n", "--repair", out, sizeof out);
    SF_ASSERT(rc == 0, "reconcile --repair: exit %d:\n%s", rc, out);
    SF_ASSERT_EQ(db_count("orders", "i29n"), 4);
    assert_reconciled("i29n");

    sink_proc *p = sink_start("i29n-a", NULL);
    char ids[6][160];
    place_orders(port, "i29n", 6, ids);
    char path[256];
    snprintf(path, sizeof path, "/api/v1/orders/%s", ids[0]);
    SF_ASSERT_EQ(sf_json_request(NULL, port, "DELETE", path, NULL, NULL, NULL, &r), 200);
    sf_resp_free(&r);
    SF_ASSERT_EQ(wait_rows("orders", "i29n", 10, 10000), 10);
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT COUNT(*) FROM orders WHERE order_id = '%s' AND "
             "status = 'cancelled'",
             ids[0]);
    int64_t deadline = tu_now_ms() + 10000;
    while (mdb_scalar(db, sql) != 1 && tu_now_ms() < deadline)
        tu_sleep_ms(50);
    SF_ASSERT_EQ(mdb_scalar(db, sql), 1);
    /* the metrics and the log line come just after the rows' commit */
    deadline = tu_now_ms() + 5000;
    while ((metric(p, "inventory_sink_unlogged_total") < 7 || !sink_log_has(p, "sink_unlogged")) &&
           tu_now_ms() < deadline)
        tu_sleep_ms(50);
    SF_ASSERT(metric(p, "inventory_sink_unlogged_total") >= 7, "unlogged_total %g",
              metric(p, "inventory_sink_unlogged_total"));
    SF_ASSERT_EQ(metric(p, "inventory_sink_order_log_missing"), 1);
    SF_ASSERT(sink_log_has(p, "sink_unlogged"), "%s", "the sink's log says nothing");
    sf_resp h = {0};
    SF_ASSERT_EQ(sf_http(p->metrics_port, "GET", "/healthz", NULL, NULL, 0, &h), 503);
    SF_ASSERT(h.body != NULL && strstr(h.body, "\"order_log\":\"missing\"") != NULL, "/healthz: %s",
              h.body ? h.body : "(none)");
    sf_resp_free(&h);
    assert_reconciled("i29n");
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);
    SF_ASSERT_EQ(sf_stop(svc), 0);
}

/* The same sink on a Redis Cluster of three masters: the segments' streams live on different
 * masters, and every command of the sink (and of reconcile) reaches the right one. Last: it
 * points the helpers at the cluster. */
static void test_cluster(void **state)
{
    (void)state;
    NEED_SERVERS();
    cluster = cf_start(3, 0);
    SF_ASSERT(cluster != NULL, "%s", "a 3-master cluster");
    static char url[512];
    snprintf(url, sizeof url, "%s", cf_url(cluster, 3));
    conns_close();
    target = url;
    target_port = rf_port(cf_node(cluster, 0));
    all_segments = 0;
    make_sku("c1", 6);
    int seen[3] = {0}, masters = 0;
    for (int k = 0; k < 6; k++) {
        long long slot = rint_("CLUSTER KEYSLOT inv:2:{c1/%d}:log", k);
        int m = slot >= 0 ? cf_master_of(cluster, (int)slot) : -1;
        if (m >= 0 && m < 3 && !seen[m]) {
            seen[m] = 1;
            masters++;
        }
    }
    SF_ASSERT(masters >= 2, "the 6 streams are on %d master(s)", masters);
    int entries = make_orders("c1", 6, 0, 300);
    sink_proc *p = sink_start("c1-a", NULL);
    SF_ASSERT_EQ(wait_rows("order_events", "c1", entries, 20000), entries);
    SF_ASSERT_EQ(wait_pending_zero("c1", 6, 5000), 0);
    SF_ASSERT_EQ(metric(p, "inventory_sink_events_written_total"), entries);
    SF_ASSERT_EQ(metric(p, "inventory_sink_streams"), 6);
    assert_reconciled("c1");
    int64_t deadline = tu_now_ms() + 5000;
    long long left;
    do {
        left = 0;
        for (int k = 0; k < 6; k++)
            left += rint_("XLEN inv:2:{c1/%d}:log", k);
    } while (left != 0 && tu_now_ms() < deadline && (tu_sleep_ms(50), 1));
    SF_ASSERT_EQ(left, 0); /* trimmed on every master */
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);
}

/* Issue 29 item 3 on the Redis Cluster of test_cluster (after it; took 4-6 s): inventoryd on the
 * cluster with --order-log, 80 orders into 8 segments (streams on several masters), a PUT down
 * to 2, a sink: all 80 land, the dropped logs are deleted on their masters and lhwm goes; then
 * a DELETE: the SKU stays registered until its 2 logs are drained, then leaves the registry.
 * Every read of the index (registry, meta, streams) is on its own slot. */
static void test_cluster_dropped_logs(void **state)
{
    (void)state;
    NEED_SERVERS();
    SF_ASSERT(cluster != NULL, "%s", "test_cluster's cluster");
    const char *args[] = {"--order-log", NULL};
    sf_service *svc = sf_start(target, args);
    SF_ASSERT(svc != NULL, "%s", "inventoryd --order-log on the cluster");
    int port = sf_port(svc);
    sf_resp r = {0};
    SF_ASSERT_EQ(sf_put_sku(port, NULL, "c29", 1000, 8, &r), 201);
    place_orders(port, "c29", 80, NULL);
    SF_ASSERT_EQ(sf_put_sku(port, NULL, "c29", 10, 2, &r), 200);
    sf_resp_free(&r);
    json_t *st = sf_sku_status(port, "c29");
    json_decref(st);
    SF_ASSERT(logs_left("c29", 2, 8) > 0, "%s", "no log of a dropped segment: proves nothing");
    sink_proc *p = sink_start("c29-a", NULL);
    SF_ASSERT_EQ(wait_rows("order_events", "c29", 80, 20000), 80);
    SF_ASSERT_EQ(wait_logs_gone("c29", 2, 8, 10000), 0);
    int64_t deadline = tu_now_ms() + 5000;
    while (rint_("HEXISTS inv:2:{c29}:meta lhwm") != 0 && tu_now_ms() < deadline)
        tu_sleep_ms(50);
    SF_ASSERT_EQ(rint_("HEXISTS inv:2:{c29}:meta lhwm"), 0);
    assert_reconciled("c29");
    place_orders(port, "c29", 4, NULL);
    SF_ASSERT_EQ(sf_json_request(NULL, port, "DELETE", "/api/v1/skus/c29", NULL, NULL, NULL, &r),
                 204);
    sf_resp_free(&r);
    SF_ASSERT_EQ(wait_rows("order_events", "c29", 84, 10000), 84);
    SF_ASSERT_EQ(wait_logs_gone("c29", 0, 8, 10000), 0);
    deadline = tu_now_ms() + 5000;
    while (rint_("SISMEMBER inv:2:skus c29") != 0 && tu_now_ms() < deadline)
        tu_sleep_ms(50);
    SF_ASSERT_EQ(rint_("SISMEMBER inv:2:skus c29"), 0);
    assert_reconciled("c29");
    SF_ASSERT_EQ(sink_stop(p), 0);
    sink_free(p);
    SF_ASSERT_EQ(sf_stop(svc), 0);
}

static int group_setup(void **state)
{
    (void)state;
    if (!mdb_available()) {
        fprintf(stderr,
                "it_sink: mariadbd not installed (scripts/deps.sh installs mariadb-server)\n");
        return getenv("CI") && strcmp(getenv("CI"), "true") == 0 ? -1 : 0;
    }
    redis = rf_start(NULL);
    db = mdb_start();
    if (redis == NULL || db == NULL)
        return -1;
    target = rf_url(redis);
    target_port = rf_port(redis);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    conns_close();
    cf_stop(cluster);
    mdb_stop(db);
    rf_stop(redis);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_every_entry_lands_once, per_test_setup),
        cmocka_unit_test_setup(test_status_moves_forward_only, per_test_setup),
        cmocka_unit_test_setup(test_kill9_mid_batch_then_restart, per_test_setup),
        cmocka_unit_test_setup(test_sigterm_finishes_what_it_read, per_test_setup),
        cmocka_unit_test_setup(test_database_killed_and_restarted, per_test_setup),
        cmocka_unit_test_setup(test_lag_grows_while_the_database_is_down, per_test_setup),
        cmocka_unit_test_setup(test_two_sinks_write_each_entry_once, per_test_setup),
        cmocka_unit_test_setup(test_dead_consumers_entries_are_claimed, per_test_setup),
        cmocka_unit_test_setup(test_trimming_keeps_unacknowledged_entries, per_test_setup),
        cmocka_unit_test_setup(test_reconcile_names_each_difference, per_test_setup),
        cmocka_unit_test_setup(test_multi_segment_order_lands_with_parts, per_test_setup),
        cmocka_unit_test_setup(test_old_table_gets_the_parts_column, per_test_setup),
        cmocka_unit_test_setup(test_redis_paused_then_resumed, per_test_setup),
        cmocka_unit_test_setup(test_backfilled_status_is_not_moved_down, per_test_setup),
        cmocka_unit_test_setup(test_order_items_of_single_sku_orders, per_test_setup),
        cmocka_unit_test_setup(test_cart_entry_lands_in_every_sku, per_test_setup),
        cmocka_unit_test_setup(test_old_database_gets_order_items, per_test_setup),
        cmocka_unit_test_setup(test_shrinking_put_keeps_the_dropped_logs, per_test_setup),
        cmocka_unit_test_setup(test_delete_keeps_the_logs_until_drained, per_test_setup),
        cmocka_unit_test_setup(test_extended_hold_sets_expires_at, per_test_setup),
        cmocka_unit_test_setup(test_cart_through_the_service, per_test_setup),
        cmocka_unit_test_setup(test_sink_over_instances_without_the_log, per_test_setup),
        cmocka_unit_test_setup(test_cluster, per_test_setup),
        cmocka_unit_test_setup(test_cluster_dropped_logs, per_test_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
