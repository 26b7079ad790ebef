/*
 * Multi-lock over Redlock names (lockcore.h lc_redlock_multi_*): one owner of several names,
 * all or nothing, each name a Redlock of its own. As for lc_multilock, names are sorted and
 * de-duplicated at creation, so two of them over overlapping names take those names in the same
 * order and cannot deadlock; a failure releases what was taken, in reverse order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lockcore_internal.h"

struct lc_redlock_multi {
    int n;
    lc_redlock **locks;
};

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

lc_status lc_redlock_multi_new(lc_redlock_client *rc, int n, const char *const *names,
                               const lc_redlock_opts *opts, lc_redlock_multi **out)
{
    if (out)
        *out = NULL;
    if (!rc || !names || !out || n <= 0)
        return lc_fail(LC_EINVAL, "redlock multi: NULL argument or no names");
    for (int i = 0; i < n; i++)
        if (!names[i])
            return lc_fail(LC_EINVAL, "redlock multi: NULL name at %d", i);
    const char **sorted = malloc(sizeof(*sorted) * (size_t)n);
    lc_redlock_multi *m = calloc(1, sizeof(*m));
    if (m)
        m->locks = calloc((size_t)n, sizeof(*m->locks));
    if (!sorted || !m || !m->locks) {
        free(sorted);
        lc_redlock_multi_free(m);
        return lc_fail(LC_ENOMEM, "redlock multi: out of memory");
    }
    memcpy(sorted, names, sizeof(*sorted) * (size_t)n);
    qsort(sorted, (size_t)n, sizeof(*sorted), cmp_names);
    lc_status st = LC_OK;
    for (int i = 0; i < n && st == LC_OK; i++) {
        if (i > 0 && strcmp(sorted[i], sorted[i - 1]) == 0)
            continue;
        st = lc_redlock_new(rc, sorted[i], opts, NULL, NULL, &m->locks[m->n]);
        if (st == LC_OK)
            m->n++;
    }
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
