/*
 * Multi-lock: one owner of several names, all or nothing. Names are sorted and de-duplicated at
 * creation so every multi-lock takes overlapping names in the same order, which rules out the
 * lock-order deadlock between two of them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base_internal.h"

struct lc_multilock {
    int n;
    lc_lock **locks;
};

static int cmp_lock_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

lc_status lc_multilock_new(lc_client *client, int n, const char *const *names,
                           const lc_lock_opts *opts, lc_multilock **out)
{
    if (out)
        *out = NULL;
    if (!client || !names || !out || n <= 0)
        return lc_fail(LC_EINVAL, "multilock: NULL argument or no names");
    const char **sorted = malloc(sizeof(*sorted) * (size_t)n);
    lc_multilock *ml = calloc(1, sizeof(*ml));
    if (ml)
        ml->locks = calloc((size_t)n, sizeof(*ml->locks));
    if (!sorted || !ml || !ml->locks) {
        free(sorted);
        lc_multilock_free(ml);
        return lc_fail(LC_ENOMEM, "multilock: out of memory");
    }
    for (int i = 0; i < n; i++) {
        if (!names[i]) {
            free(sorted);
            lc_multilock_free(ml);
            return lc_fail(LC_EINVAL, "multilock: NULL name at %d", i);
        }
        sorted[i] = names[i];
    }
    qsort(sorted, (size_t)n, sizeof(*sorted), cmp_lock_names);
    lc_status st = LC_OK;
    for (int i = 0; i < n && st == LC_OK; i++) {
        if (i > 0 && strcmp(sorted[i], sorted[i - 1]) == 0)
            continue;
        st = lc_lock_new(client, sorted[i], opts, &ml->locks[ml->n]);
        if (st == LC_OK)
            ml->n++;
    }
    free(sorted);
    if (st != LC_OK) {
        lc_multilock_free(ml);
        return st;
    }
    *out = ml;
    return LC_OK;
}

void lc_multilock_free(lc_multilock *ml)
{
    if (!ml)
        return;
    for (int i = 0; i < ml->n; i++)
        lc_lock_free(ml->locks[i]);
    free(ml->locks);
    free(ml);
}

lc_status lc_multilock_acquire(lc_multilock *ml, int wait_ms)
{
    if (!ml || wait_ms < 0)
        return lc_fail(LC_EINVAL, "multilock: NULL handle or negative wait");
    int64_t deadline = lc_now_ms() + wait_ms;
    for (int i = 0; i < ml->n; i++) {
        int64_t left = deadline - lc_now_ms();
        lc_status st = lc_lock_acquire(ml->locks[i], wait_ms && left > 0 ? (int)left : 0, NULL);
        if (st != LC_OK) {
            if (st == LC_EBUSY && wait_ms > 0)
                st = lc_fail(LC_ETIMEOUT, "multilock: %s not acquired in time",
                             lc_lock_name(ml->locks[i]));
            char msg[256];
            snprintf(msg, sizeof(msg), "%s", lc_errmsg());
            while (i-- > 0)
                lc_lock_release(ml->locks[i]);
            return lc_fail(st, "%s", msg);
        }
    }
    return LC_OK;
}

lc_status lc_multilock_release(lc_multilock *ml)
{
    if (!ml)
        return lc_fail(LC_EINVAL, "multilock: NULL handle");
    lc_status first = LC_OK;
    char msg[256] = "";
    for (int i = ml->n - 1; i >= 0; i--) {
        lc_status st = lc_lock_release(ml->locks[i]);
        if (st != LC_OK && first == LC_OK) {
            first = st;
            snprintf(msg, sizeof(msg), "%s", lc_errmsg());
        }
    }
    return first == LC_OK ? LC_OK : lc_fail(first, "%s", msg);
}

int lc_multilock_count(const lc_multilock *ml)
{
    return ml ? ml->n : 0;
}

lc_lock *lc_multilock_get(lc_multilock *ml, int i)
{
    return ml && i >= 0 && i < ml->n ? ml->locks[i] : NULL;
}
