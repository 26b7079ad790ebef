/*
 * Multi-lock over Redlock names, both faces (lockcore.h lc_redlock_multi_*, lockcore_async.h
 * lc_async_redlock_multi_*): one owner of several names, all or nothing, each name a Redlock of
 * its own. As for lc_multilock, names are sorted and de-duplicated at creation, so two of them
 * over overlapping names take those names in the same order and cannot deadlock; a failure
 * releases what was taken, in reverse order. The blocking one chains blocking calls, the one on
 * a loop chains callbacks; the names' order is the same helper's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lockcore/lockcore_async.h"
#include "base_internal.h"

struct lc_redlock_multi {
    int n;
    lc_redlock **locks;
};

static int cmp_redlock_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The names sorted, without duplicates: *out a new array of borrowed pointers (freed by the
 * caller) and *count their number. LC_OK, LC_EINVAL or LC_ENOMEM. */
static lc_status sorted_names(int n, const char *const *names, const char ***out, int *count)
{
    *out = NULL;
    if (!names || n <= 0)
        return lc_fail(LC_EINVAL, "redlock multi: no names");
    for (int i = 0; i < n; i++)
        if (!names[i])
            return lc_fail(LC_EINVAL, "redlock multi: NULL name at %d", i);
    const char **sorted = malloc(sizeof(*sorted) * (size_t)n);
    if (!sorted)
        return lc_fail(LC_ENOMEM, "redlock multi: out of memory");
    memcpy(sorted, names, sizeof(*sorted) * (size_t)n);
    qsort(sorted, (size_t)n, sizeof(*sorted), cmp_redlock_names);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (k == 0 || strcmp(sorted[i], sorted[k - 1]) != 0)
            sorted[k++] = sorted[i];
    *out = sorted;
    *count = k;
    return LC_OK;
}

lc_status lc_redlock_multi_new(lc_redlock_client *rc, int n, const char *const *names,
                               const lc_redlock_opts *opts, lc_redlock_multi **out)
{
    if (out)
        *out = NULL;
    if (!rc || !out)
        return lc_fail(LC_EINVAL, "redlock multi: NULL argument");
    const char **sorted;
    int k = 0;
    lc_status sst = sorted_names(n, names, &sorted, &k);
    if (sst != LC_OK)
        return sst;
    lc_redlock_multi *m = calloc(1, sizeof(*m));
    if (m)
        m->locks = calloc((size_t)k, sizeof(*m->locks));
    if (!m || !m->locks) {
        free(sorted);
        lc_redlock_multi_free(m);
        return lc_fail(LC_ENOMEM, "redlock multi: out of memory");
    }
    lc_status st = LC_OK;
    for (int i = 0; i < k && st == LC_OK; i++)
        if ((st = lc_redlock_new(rc, sorted[i], opts, NULL, NULL, &m->locks[m->n])) == LC_OK)
            m->n++;
    free(sorted);
    if (st != LC_OK) {
        lc_redlock_multi_free(m);
        return st;
    }
    *out = m;
    return LC_OK;
}

void lc_redlock_multi_free(lc_redlock_multi *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n; i++)
        lc_redlock_free(m->locks[i]);
    free(m->locks);
    free(m);
}

lc_status lc_redlock_multi_acquire(lc_redlock_multi *m, int wait_ms)
{
    if (!m || wait_ms < 0)
        return lc_fail(LC_EINVAL, "redlock multi: NULL handle or negative wait");
    int64_t deadline = lc_now_ms() + wait_ms;
    for (int i = 0; i < m->n; i++) {
        int64_t left = deadline - lc_now_ms();
        lc_status st = lc_redlock_acquire(m->locks[i], wait_ms && left > 0 ? (int)left : 0, NULL);
        if (st != LC_OK) {
            char msg[256];
            snprintf(msg, sizeof(msg), "%s", lc_errmsg());
            while (i-- > 0)
                lc_redlock_release(m->locks[i]);
            return lc_fail(st, "%s", msg);
        }
    }
    return LC_OK;
}

lc_status lc_redlock_multi_release(lc_redlock_multi *m)
{
    if (!m)
        return lc_fail(LC_EINVAL, "redlock multi: NULL handle");
    lc_status first = LC_OK;
    char msg[256] = "";
    for (int i = m->n - 1; i >= 0; i--) {
        lc_status st = lc_redlock_release(m->locks[i]);
        if (st != LC_OK && first == LC_OK) {
            first = st;
            snprintf(msg, sizeof(msg), "%s", lc_errmsg());
        }
    }
    return first == LC_OK ? LC_OK : lc_fail(first, "%s", msg);
}

int lc_redlock_multi_count(const lc_redlock_multi *m)
{
    return m ? m->n : 0;
}

lc_redlock *lc_redlock_multi_get(lc_redlock_multi *m, int i)
{
    return m && i >= 0 && i < m->n ? m->locks[i] : NULL;
}

/* ---- on an event loop ---- */

struct lc_async_redlock_multi {
    int n;
    lc_async_redlock **locks;
    int busy; /* an operation is in flight */
    int i;    /* the lock being worked on */
    int wait_ms;
    int64_t deadline_ms;
    lc_status first;
    char msg[256];
    lc_async_redlock_multi_fn cb;
    void *arg;
    int freeing;
};

lc_status lc_async_redlock_multi_new(int nnodes, lc_async_client *const *nodes, int n,
                                     const char *const *names, const lc_redlock_opts *opts,
                                     lc_async_redlock_multi **out)
{
    if (out)
        *out = NULL;
    if (!out)
        return lc_fail(LC_EINVAL, "redlock multi: NULL argument");
    const char **sorted;
    int k = 0;
    lc_status sst = sorted_names(n, names, &sorted, &k);
    if (sst != LC_OK)
        return sst;
    lc_async_redlock_multi *m = calloc(1, sizeof(*m));
    if (m)
        m->locks = calloc((size_t)k, sizeof(*m->locks));
    if (!m || !m->locks) {
        free(sorted);
        lc_async_redlock_multi_free(m);
        return lc_fail(LC_ENOMEM, "redlock multi: out of memory");
    }
    lc_status st = LC_OK;
    for (int i = 0; i < k && st == LC_OK; i++)
        if ((st = lc_async_redlock_new(nnodes, nodes, sorted[i], opts, NULL, NULL,
                                       &m->locks[m->n])) == LC_OK)
            m->n++;
    free(sorted);
    if (st != LC_OK) {
        lc_async_redlock_multi_free(m);
        return st;
    }
    *out = m;
    return LC_OK;
}

/* Ends the operation: its callback, last (it may free m). */
static void multi_finish(lc_async_redlock_multi *m, lc_status st)
{
    lc_async_redlock_multi_fn cb = m->cb;
    void *arg = m->arg;
    m->busy = 0;
    m->cb = NULL;
    if (st != LC_OK)
        lc_fail(st, "%s", m->msg);
    if (cb)
        cb(m, st, arg);
}

/* Keeps the first failure and its message (a handle's, or a start's just recorded). */
static void multi_note(lc_async_redlock_multi *m, lc_status st, const char *msg)
{
    if (st != LC_OK && m->first == LC_OK) {
        m->first = st;
        snprintf(m->msg, sizeof(m->msg), "%s", msg);
    }
}

static void on_multi_released(lc_async_redlock *rl, lc_status st, uint64_t fence, void *arg);

/* Releases, downwards from m->i, every lock still held; then finishes with m->first. */
static void multi_release_next(lc_async_redlock_multi *m)
{
    while (m->i >= 0) {
        lc_async_redlock *l = m->locks[m->i--];
        if (!lc_async_redlock_held(l))
            continue;
        lc_status st = lc_async_redlock_release(l, on_multi_released, m);
        if (st == LC_OK)
            return;
        multi_note(m, st, lc_errmsg()); /* the start's failure, just recorded */
    }
    multi_finish(m, m->first);
}

static void on_multi_released(lc_async_redlock *rl, lc_status st, uint64_t fence, void *arg)
{
    (void)rl;
    (void)fence;
    lc_async_redlock_multi *m = arg;
    if (m->freeing) {
        multi_finish(m, LC_ESTATE);
        return;
    }
    /* An unwind keeps the acquire's failure; a release reports its first one. */
    multi_note(m, st, lc_async_redlock_errmsg(rl));
    multi_release_next(m);
}

static void on_multi_acquired(lc_async_redlock *rl, lc_status st, uint64_t fence, void *arg);

/* Starts the acquire of lock m->i: LC_OK, or what kept it from starting. */
static lc_status multi_acquire_next(lc_async_redlock_multi *m)
{
    int64_t left = m->deadline_ms - lc_now_ms();
    int wait = m->wait_ms && left > 0 ? (int)left : 0;
    return lc_async_redlock_acquire(m->locks[m->i], wait, on_multi_acquired, m);
}

static void on_multi_acquired(lc_async_redlock *rl, lc_status st, uint64_t fence, void *arg)
{
    (void)fence;
    lc_async_redlock_multi *m = arg;
    if (m->freeing) {
        multi_finish(m, LC_ESTATE);
        return;
    }
    char msg[LC_ERRSTR_MAX];
    snprintf(msg, sizeof(msg), "%s", lc_async_redlock_errmsg(rl));
    while (st == LC_OK && ++m->i < m->n)
        if ((st = multi_acquire_next(m)) == LC_OK)
            return;
        else
            snprintf(msg, sizeof(msg), "%s", lc_errmsg()); /* the start's, just recorded */
    if (st == LC_OK) {
        multi_finish(m, LC_OK);
        return;
    }
    if (st == LC_EBUSY && m->wait_ms > 0)
        snprintf(msg, sizeof(msg), "redlock multi: %s not acquired in time",
                 lc_async_redlock_name(m->locks[m->i]));
    multi_note(m, st == LC_EBUSY && m->wait_ms > 0 ? LC_ETIMEOUT : st, msg);
    m->i--; /* unwind what was taken */
    multi_release_next(m);
}

lc_status lc_async_redlock_multi_acquire(lc_async_redlock_multi *m, int wait_ms,
                                         lc_async_redlock_multi_fn cb, void *arg)
{
    if (!m || wait_ms < 0)
        return lc_fail(LC_EINVAL, "redlock multi: NULL handle or negative wait");
    if (m->busy || m->freeing)
        return lc_fail(LC_ESTATE, "redlock multi: another operation is in flight");
    m->i = 0;
    m->wait_ms = wait_ms;
    m->deadline_ms = lc_now_ms() + wait_ms;
    m->first = LC_OK;
    m->msg[0] = '\0';
    lc_status st = multi_acquire_next(m);
    if (st != LC_OK)
        return st;
    m->busy = 1;
    m->cb = cb;
    m->arg = arg;
    return LC_OK;
}

lc_status lc_async_redlock_multi_release(lc_async_redlock_multi *m, lc_async_redlock_multi_fn cb,
                                         void *arg)
{
    if (!m)
        return lc_fail(LC_EINVAL, "redlock multi: NULL handle");
    if (m->busy || m->freeing)
        return lc_fail(LC_ESTATE, "redlock multi: another operation is in flight");
    m->i = m->n - 1;
    while (m->i >= 0 && !lc_async_redlock_held(m->locks[m->i]))
        m->i--;
    if (m->i < 0)
        return lc_fail(LC_ENOTHELD, "redlock multi: nothing held");
    m->first = LC_OK;
    m->msg[0] = '\0';
    lc_status st = lc_async_redlock_release(m->locks[m->i--], on_multi_released, m);
    if (st != LC_OK)
        return st;
    m->busy = 1;
    m->cb = cb;
    m->arg = arg;
    return LC_OK;
}

void lc_async_redlock_multi_free(lc_async_redlock_multi *m)
{
    if (!m || m->freeing)
        return;
    m->freeing = 1;
    /* An operation in flight is on one handle: its free ends it (LC_ESTATE, callback above). */
    for (int i = 0; i < m->n; i++)
        lc_async_redlock_free(m->locks[i]);
    if (m->busy)
        multi_finish(m, LC_ESTATE); /* not reached when the handle's callback finished it */
    free(m->locks);
    free(m);
}

const char *lc_async_redlock_multi_errmsg(const lc_async_redlock_multi *m)
{
    return m ? m->msg : "";
}

int lc_async_redlock_multi_count(const lc_async_redlock_multi *m)
{
    return m ? m->n : 0;
}

lc_async_redlock *lc_async_redlock_multi_get(lc_async_redlock_multi *m, int i)
{
    return m && i >= 0 && i < m->n ? m->locks[i] : NULL;
}
