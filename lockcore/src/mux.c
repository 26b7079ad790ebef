/*
 * The multiplexed connection (lc_client_opts.pipeline = 1): every thread's commands go through
 * one connection driven by one I/O thread, which writes whatever has queued up since its last
 * write in a single system call and hands each reply back to its caller in order. Under load
 * Redis and the kernel then see batches instead of single commands (what ioredis calls
 * auto-pipelining), while callers keep the blocking API. Commands are formatted by the calling
 * thread; the I/O thread only moves bytes and parses replies.
 *
 * Failure: when the connection breaks or a reply takes longer than the command timeout, every
 * command in flight fails with LC_EIO (outcome unknown) and the connection is reopened for the
 * next ones.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base_internal.h"
#include "conn_internal.h"
#include "mux_internal.h"

typedef struct mux_req {
    char *cmd; /* formatted command, freed by the I/O thread once written */
    int len;
    redisReply *reply;
    lc_status st;
    int done;
    int written; /* moved into the connection's output buffer */
    struct mux_batch *batch;
    struct mux_req *next;
} mux_req;

/* One caller's group of commands; the caller sleeps on cv until left reaches 0. */
typedef struct mux_batch {
    pthread_cond_t cv;
    int left;
    char err[192];
} mux_batch;

struct lc_mux {
    const lc_endpoint *ep; /* borrowed from the client */
    pthread_t thread;
    pthread_mutex_t mu;
    int stop;
    int polling; /* the I/O thread sleeps in poll(): poke it */
    int wakefd[2];
    mux_req *qhead, *qtail; /* queued, not yet written */
    mux_req *fhead, *ftail; /* written, waiting for their replies (FIFO) */
    redisContext *ctx;      /* I/O thread only */
    int64_t progress_ms;    /* last time a reply arrived or the in-flight list was empty */
};

static void mux_poke(lc_mux *m)
{
    char b = 1;
    ssize_t w = write(m->wakefd[1], &b, 1);
    (void)w;
}

/* Completes one request. Called with m->mu held. */
static void finish(mux_req *r, lc_status st, redisReply *reply, const char *err)
{
    r->st = st;
    r->reply = reply;
    r->done = 1;
    if (err && !r->batch->err[0])
        snprintf(r->batch->err, sizeof(r->batch->err), "%s", err);
    if (--r->batch->left == 0)
        pthread_cond_signal(&r->batch->cv);
}

/* Fails every request queued or in flight. Called with m->mu held. */
static void fail_all(lc_mux *m, lc_status st, const char *why, int queued_too)
{
    for (mux_req *r = m->fhead, *next; r; r = next) {
        next = r->next;
        finish(r, st, NULL, why);
    }
    m->fhead = m->ftail = NULL;
    if (queued_too) {
        for (mux_req *r = m->qhead, *next; r; r = next) {
            next = r->next;
            free(r->cmd);
            r->cmd = NULL;
            finish(r, st, NULL, why);
        }
        m->qhead = m->qtail = NULL;
    }
}

static void drop(lc_mux *m)
{
    if (m->ctx) {
        redisFree(m->ctx);
        m->ctx = NULL;
    }
}

static void *mux_main(void *arg)
{
    lc_mux *m = arg;
    char why[160];
    pthread_mutex_lock(&m->mu);
    while (!m->stop) {
        if (!m->ctx) {
            if (!m->qhead) {
                m->polling = 1;
                pthread_mutex_unlock(&m->mu);
                struct pollfd p = {m->wakefd[0], POLLIN, 0};
                poll(&p, 1, 1000);
                char buf[64];
                while (read(m->wakefd[0], buf, sizeof(buf)) > 0)
                    ;
                pthread_mutex_lock(&m->mu);
                m->polling = 0;
                continue;
            }
            pthread_mutex_unlock(&m->mu);
            redisContext *ctx = NULL;
            lc_status st = lc_connect(m->ep, &ctx);
            snprintf(why, sizeof(why), "%s", lc_errmsg());
            pthread_mutex_lock(&m->mu);
            if (st != LC_OK) {
                fail_all(m, st, why, 1); /* nothing was sent: callers may retry */
                continue;
            }
            m->ctx = ctx;
        }
        /* Move everything queued into the connection's output buffer and the in-flight list. */
        int nnew = 0;
        for (mux_req *r = m->qhead; r; r = r->next) {
            redisAppendFormattedCommand(m->ctx, r->cmd, (size_t)r->len);
            r->written = 1;
            free(r->cmd);
            r->cmd = NULL;
            nnew++;
        }
        if (m->qhead) {
            if (m->ftail)
                m->ftail->next = m->qhead;
            else
                m->fhead = m->qhead;
            m->ftail = m->qtail;
            m->qhead = m->qtail = NULL;
        }
        int inflight = m->fhead != NULL;
        int64_t now = lc_now_ms();
        if (inflight && m->progress_ms == 0)
            m->progress_ms = now; /* the clock of the oldest reply owed starts now */
        m->polling = 1;
        pthread_mutex_unlock(&m->mu);

        int failed = 0, done = 0;
        if (nnew)
            while (!done && !failed)
                failed = redisBufferWrite(m->ctx, &done) != REDIS_OK;
        struct pollfd p[2] = {{m->wakefd[0], POLLIN, 0}, {m->ctx->fd, POLLIN, 0}};
        int timeout = 1000;
        if (inflight) {
            int64_t left = m->progress_ms + m->ep->opts.command_timeout_ms - now;
            timeout = left > 0 ? (int)left : 0;
        }
        int n = failed ? 0 : poll(p, 2, timeout);
        int timed_out =
            inflight && !failed && lc_now_ms() - m->progress_ms >= m->ep->opts.command_timeout_ms;
        if (n < 0 && errno != EINTR)
            failed = 1;
        if (n > 0 && (p[0].revents & POLLIN)) {
            char buf[64];
            while (read(m->wakefd[0], buf, sizeof(buf)) > 0)
                ;
        }
        if (!failed && n > 0 && (p[1].revents & (POLLIN | POLLERR | POLLHUP)))
            failed = redisBufferRead(m->ctx) != REDIS_OK;

        pthread_mutex_lock(&m->mu);
        m->polling = 0;
        void *reply = NULL;
        while (!failed && m->fhead && redisGetReplyFromReader(m->ctx, &reply) == REDIS_OK &&
               reply) {
            mux_req *r = m->fhead;
            m->fhead = r->next;
            if (!m->fhead)
                m->ftail = NULL;
            m->progress_ms = lc_now_ms();
            finish(r, ((redisReply *)reply)->type == REDIS_REPLY_ERROR ? LC_EREDIS : LC_OK, reply,
                   ((redisReply *)reply)->type == REDIS_REPLY_ERROR ? ((redisReply *)reply)->str
                                                                    : NULL);
            reply = NULL;
        }
        if (!m->fhead)
            m->progress_ms = 0;
        if (failed || m->ctx->err || (timed_out && m->fhead)) {
            snprintf(why, sizeof(why), "redis: %s",
                     timed_out     ? "timeout"
                     : m->ctx->err ? m->ctx->errstr
                                   : "connection lost");
            fail_all(m, LC_EIO, why, 0);
            drop(m);
            m->progress_ms = 0; /* nothing owed now: the next command's clock starts anew */
        }
    }
    fail_all(m, LC_EIO, "redis: client closing", 1);
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

lc_status lc_mux_new(const lc_endpoint *ep, lc_mux **out)
{
    lc_mux *m = calloc(1, sizeof(*m));
    if (!m)
        return lc_fail(LC_ENOMEM, "pipeline: out of memory");
    m->ep = ep;
    pthread_mutex_init(&m->mu, NULL);
    if (pipe(m->wakefd) != 0) {
        pthread_mutex_destroy(&m->mu);
        free(m);
        return lc_fail(LC_ENOMEM, "pipeline: no pipe");
    }
    for (int i = 0; i < 2; i++) {
        fcntl(m->wakefd[i], F_SETFL, O_NONBLOCK);
        fcntl(m->wakefd[i], F_SETFD, FD_CLOEXEC);
    }
    if (pthread_create(&m->thread, NULL, mux_main, m) != 0) {
        close(m->wakefd[0]);
        close(m->wakefd[1]);
        pthread_mutex_destroy(&m->mu);
        free(m);
        return lc_fail(LC_ENOMEM, "pipeline: cannot start its thread");
    }
    *out = m;
    return LC_OK;
}

void lc_mux_free(lc_mux *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    m->stop = 1;
    pthread_mutex_unlock(&m->mu);
    mux_poke(m);
    pthread_join(m->thread, NULL);
    drop(m);
    close(m->wakefd[0]);
    close(m->wakefd[1]);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

lc_status lc_mux_exec(lc_mux *m, int n, const int *argcs, const char **const *argvs,
                      const size_t *const *lens, redisReply **replies, int *sent)
{
    enum { STACK = 8 };
    mux_req stack[STACK];
    mux_req *reqs = n <= STACK ? stack : calloc((size_t)n, sizeof(*reqs));
    if (!reqs)
        return lc_fail(LC_ENOMEM, "pipeline: out of memory");
    mux_batch batch = {.left = n};
    if (sent)
        *sent = 0;
    pthread_cond_init(&batch.cv, NULL);
    lc_status st = LC_OK;
    for (int i = 0; i < n; i++) {
        memset(&reqs[i], 0, sizeof(reqs[i]));
        reqs[i].batch = &batch;
        reqs[i].len =
            redisFormatCommandArgv(&reqs[i].cmd, argcs[i], argvs[i], lens ? lens[i] : NULL);
        if (reqs[i].len < 0) {
            for (int j = 0; j <= i; j++)
                free(reqs[j].cmd);
            st = lc_fail(LC_ENOMEM, "pipeline: cannot format a command");
            goto out;
        }
        if (i > 0)
            reqs[i - 1].next = &reqs[i];
    }
    pthread_mutex_lock(&m->mu);
    if (m->qtail)
        m->qtail->next = &reqs[0];
    else
        m->qhead = &reqs[0];
    m->qtail = &reqs[n - 1];
    if (m->polling)
        mux_poke(m);
    while (batch.left > 0)
        pthread_cond_wait(&batch.cv, &m->mu);
    pthread_mutex_unlock(&m->mu);
    for (int i = 0; i < n; i++) {
        if (sent && reqs[i].written)
            *sent = 1;
        replies[i] = reqs[i].reply;
        if (!reqs[i].reply && st == LC_OK)
            st = reqs[i].st; /* a transport failure (I/O, or auth when connecting) */
    }
    if (st != LC_OK) {
        for (int i = 0; i < n; i++)
            if (replies[i]) {
                freeReplyObject(replies[i]);
                replies[i] = NULL;
            }
        st = lc_fail(st, "%s", batch.err);
    }
out:
    pthread_cond_destroy(&batch.cv);
    if (reqs != stack)
        free(reqs);
    return st;
}
