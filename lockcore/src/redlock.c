/*
 * The blocking face of Redlock (lockcore.h lc_redlock_*): a thin shell around the asynchronous
 * one (redlock_async.c), which holds all of the algorithm. An lc_redlock_client owns an event
 * loop, one lc_async_client per node on it, and a thread that runs the loop. A blocking call
 * queues a job for that thread (a byte on a pipe wakes it), the job starts the asynchronous
 * operation there, and its callback hands the result back through the client's condition
 * variable. Renewal runs on loop timers of that thread, so on_lost is called there too.
 *
 * Ownership: a job lives on the calling thread's stack until its `done` is set under the
 * client's mutex; the loop thread touches it only before that. The lc_async_redlock of a handle
 * is made, used and freed on the loop thread only; the caller's thread reads it only through
 * its atomic fields (lost, validity) and its immutable name and token.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "lockcore/lockcore_async.h"
#include "base_internal.h"

typedef enum job_kind { J_NEW, J_FREE, J_ACQUIRE, J_RELEASE, J_EXTEND, J_STOP } job_kind;

typedef struct rjob {
    job_kind kind;
    lc_redlock *lock;
    const char *name;
    const lc_redlock_opts *opts;
    int value; /* wait_ms or lease_ms */
    lc_status st;
    uint64_t fence;
    char msg[256];
    int done;
    struct rjob *next;
} rjob;

struct lc_redlock_client {
    int n;
    struct event_base *base;
    lc_async_client **nodes;
    struct event *wake_ev;
    int wake[2];
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rjob *head, *tail;
};

struct lc_redlock {
    lc_redlock_client *rc;
    lc_async_redlock *al; /* loop thread only, except the atomic reads */
    lc_redlock_lost_fn on_lost;
    void *on_lost_arg;
    pthread_mutex_t mu; /* serialises this handle's calls; guards held and fence */
    int held;
    uint64_t fence;
};

/* ---- on the loop thread ---- */

/* Hands the result back to the waiting caller; the job is not touched afterwards. */
static void job_done(lc_redlock_client *rc, rjob *j, lc_status st, uint64_t fence, const char *msg)
{
    j->st = st;
    j->fence = fence;
    snprintf(j->msg, sizeof(j->msg), "%s", st == LC_OK ? "" : msg);
    pthread_mutex_lock(&rc->mu);
    j->done = 1;
    pthread_cond_broadcast(&rc->cv);
    pthread_mutex_unlock(&rc->mu);
}

static void on_async_done(lc_async_redlock *al, lc_status st, uint64_t fence, void *arg)
{
    rjob *j = arg;
    job_done(j->lock->rc, j, st, fence, lc_async_redlock_errmsg(al));
}

static void on_async_lost(lc_async_redlock *al, void *arg)
{
    (void)al;
    lc_redlock *l = arg;
    if (l->on_lost)
        l->on_lost(l, l->on_lost_arg);
}

static void job_run(lc_redlock_client *rc, rjob *j)
{
    lc_redlock *l = j->lock;
    lc_status st = LC_OK;
    switch (j->kind) {
    case J_NEW:
        st = lc_async_redlock_new(rc->n, rc->nodes, j->name, j->opts, on_async_lost, l, &l->al);
        break;
    case J_FREE: lc_async_redlock_free(l->al); break;
    case J_ACQUIRE: st = lc_async_redlock_acquire(l->al, j->value, on_async_done, j); break;
    case J_RELEASE: st = lc_async_redlock_release(l->al, on_async_done, j); break;
    case J_EXTEND: st = lc_async_redlock_extend(l->al, j->value, on_async_done, j); break;
    case J_STOP: event_base_loopbreak(rc->base); break;
    }
    int started =
        st == LC_OK && (j->kind == J_ACQUIRE || j->kind == J_RELEASE || j->kind == J_EXTEND);
    if (!started)
        job_done(rc, j, st, 0, lc_errmsg()); /* the start's own failure, just recorded */
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    lc_redlock_client *rc = arg;
    char buf[64];
    while (read(fd, buf, sizeof(buf)) > 0)
        ;
    pthread_mutex_lock(&rc->mu);
    rjob *j = rc->head;
    rc->head = rc->tail = NULL;
    pthread_mutex_unlock(&rc->mu);
    while (j) {
        rjob *next = j->next; /* j may be gone once done */
        job_run(rc, j);
        j = next;
    }
}

static void *loop_main(void *arg)
{
    lc_redlock_client *rc = arg;
    lc_async_mark_loop_thread(1);
    event_base_dispatch(rc->base);
    lc_async_mark_loop_thread(0);
    return NULL;
}

/* ---- on the caller's thread ---- */

/* Runs j on the loop thread and waits for its result; lc_errmsg() is set from it. */
static lc_status job_call(lc_redlock_client *rc, rjob *j)
{
    if (rc->started && pthread_equal(pthread_self(), rc->thread))
        return lc_fail(LC_ESTATE, "redlock: blocking call from its own loop thread (on_lost?)");
    j->done = 0;
    j->next = NULL;
    pthread_mutex_lock(&rc->mu);
    if (rc->tail)
        rc->tail->next = j;
    else
        rc->head = j;
    rc->tail = j;
    pthread_mutex_unlock(&rc->mu);
    char b = 1;
    while (write(rc->wake[1], &b, 1) < 0 && errno == EINTR)
        ;
    pthread_mutex_lock(&rc->mu);
    while (!j->done)
        pthread_cond_wait(&rc->cv, &rc->mu);
    pthread_mutex_unlock(&rc->mu);
    return j->st == LC_OK ? LC_OK : lc_fail(j->st, "%s", j->msg);
}

lc_status lc_redlock_client_new(int n, const char *const *urls, const lc_client_opts *opts,
                                lc_redlock_client **out)
{
    if (out)
        *out = NULL;
    if (!urls || !out || n < 1 || n > LC_REDLOCK_MAX_NODES)
        return lc_fail(LC_EINVAL, "redlock client: NULL argument or node count not in 1..%d",
                       LC_REDLOCK_MAX_NODES);
    lc_redlock_client *rc = calloc(1, sizeof(*rc));
    if (!rc)
        return lc_fail(LC_ENOMEM, "redlock client: out of memory");
    rc->wake[0] = rc->wake[1] = -1;
    pthread_mutex_init(&rc->mu, NULL);
    pthread_cond_init(&rc->cv, NULL);
    lc_status st = LC_ENOMEM;
    rc->base = event_base_new();
    rc->nodes = calloc((size_t)n, sizeof(*rc->nodes));
    if (!rc->base || !rc->nodes || pipe(rc->wake) != 0) {
        st = lc_fail(LC_ENOMEM, "redlock client: out of memory or descriptors");
        goto fail;
    }
    for (int i = 0; i < 2; i++) {
        fcntl(rc->wake[i], F_SETFL, fcntl(rc->wake[i], F_GETFL) | O_NONBLOCK);
        fcntl(rc->wake[i], F_SETFD, FD_CLOEXEC);
    }
    for (rc->n = 0; rc->n < n; rc->n++) {
        if (!urls[rc->n]) {
            st = lc_fail(LC_EINVAL, "redlock client: url %d is NULL", rc->n);
            goto fail;
        }
        if ((st = lc_async_client_new(rc->base, urls[rc->n], opts, &rc->nodes[rc->n])) != LC_OK)
            goto fail;
    }
    rc->wake_ev = event_new(rc->base, rc->wake[0], EV_READ | EV_PERSIST, on_wake, rc);
    if (!rc->wake_ev || event_add(rc->wake_ev, NULL) != 0) {
        st = lc_fail(LC_ENOMEM, "redlock client: out of memory");
        goto fail;
    }
    if (pthread_create(&rc->thread, NULL, loop_main, rc) != 0) {
        st = lc_fail(LC_ENOMEM, "redlock client: cannot start its loop thread");
        goto fail;
    }
    rc->started = 1;
    *out = rc;
    return LC_OK;
fail:
    lc_redlock_client_free(rc);
    return st;
}

void lc_redlock_client_free(lc_redlock_client *rc)
{
    if (!rc)
        return;
    if (rc->started) {
        rjob j = {.kind = J_STOP};
        job_call(rc, &j);
        pthread_join(rc->thread, NULL);
    }
    /* The loop has stopped: this thread is the only one left to touch it. */
    for (int i = 0; i < rc->n; i++)
        lc_async_client_free(rc->nodes[i]);
    if (rc->wake_ev)
        event_free(rc->wake_ev);
    if (rc->base)
        event_base_free(rc->base);
    for (int i = 0; i < 2; i++)
        if (rc->wake[i] >= 0)
            close(rc->wake[i]);
    free(rc->nodes);
    pthread_cond_destroy(&rc->cv);
    pthread_mutex_destroy(&rc->mu);
    free(rc);
}

lc_status lc_redlock_new(lc_redlock_client *rc, const char *name, const lc_redlock_opts *opts,
                         lc_redlock_lost_fn on_lost, void *on_lost_arg, lc_redlock **out)
{
    if (out)
        *out = NULL;
    if (!rc || !name || !out)
        return lc_fail(LC_EINVAL, "redlock: NULL argument");
    lc_redlock *l = calloc(1, sizeof(*l));
    if (!l)
        return lc_fail(LC_ENOMEM, "redlock: out of memory");
    l->rc = rc;
    l->on_lost = on_lost;
    l->on_lost_arg = on_lost_arg;
    pthread_mutex_init(&l->mu, NULL);
    rjob j = {.kind = J_NEW, .lock = l, .name = name, .opts = opts};
    lc_status st = job_call(rc, &j);
    if (st != LC_OK) {
        pthread_mutex_destroy(&l->mu);
        free(l);
        return st;
    }
    *out = l;
    return LC_OK;
}

void lc_redlock_free(lc_redlock *lock)
{
    if (!lock)
        return;
    rjob j = {.kind = J_FREE, .lock = lock};
    job_call(lock->rc, &j);
    pthread_mutex_destroy(&lock->mu);
    free(lock);
}

/* Runs one operation job on the handle and mirrors its outcome. */
static lc_status lock_op(lc_redlock *lock, job_kind kind, int value, uint64_t *fence)
{
    if (!lock)
        return lc_fail(LC_EINVAL, "redlock: NULL handle");
    pthread_mutex_lock(&lock->mu);
    rjob j = {.kind = kind, .lock = lock, .value = value};
    lc_status st = job_call(lock->rc, &j);
    if (kind == J_ACQUIRE && st == LC_OK) {
        lock->held = 1;
        lock->fence = j.fence;
    } else if (kind == J_RELEASE && st != LC_ENOTHELD && st != LC_ESTATE) {
        lock->held = 0;
        lock->fence = 0;
    }
    if (fence && st == LC_OK)
        *fence = j.fence;
    pthread_mutex_unlock(&lock->mu);
    return st;
}

lc_status lc_redlock_acquire(lc_redlock *lock, int wait_ms, uint64_t *fence)
{
    return lock_op(lock, J_ACQUIRE, wait_ms, fence);
}

lc_status lc_redlock_try(lc_redlock *lock, uint64_t *fence)
{
    return lock_op(lock, J_ACQUIRE, 0, fence);
}

lc_status lc_redlock_release(lc_redlock *lock)
{
    return lock_op(lock, J_RELEASE, 0, NULL);
}

lc_status lc_redlock_extend(lc_redlock *lock, int lease_ms)
{
    return lock_op(lock, J_EXTEND, lease_ms, NULL);
}

int lc_redlock_held(lc_redlock *lock)
{
    if (!lock)
        return 0;
    pthread_mutex_lock(&lock->mu);
    int h = lock->held;
    pthread_mutex_unlock(&lock->mu);
    return h;
}

uint64_t lc_redlock_fence(lc_redlock *lock)
{
    if (!lock)
        return 0;
    pthread_mutex_lock(&lock->mu);
    uint64_t f = lock->fence;
    pthread_mutex_unlock(&lock->mu);
    return f;
}

int lc_redlock_lost(lc_redlock *lock)
{
    return lock ? lc_async_redlock_lost(lock->al) : 0;
}

int64_t lc_redlock_validity_ms(lc_redlock *lock)
{
    return lock ? lc_async_redlock_validity_ms(lock->al) : 0;
}

const char *lc_redlock_name(const lc_redlock *lock)
{
    return lock ? lc_async_redlock_name(lock->al) : "";
}

const char *lc_redlock_token(const lc_redlock *lock)
{
    return lock ? lc_async_redlock_token(lock->al) : "";
}
