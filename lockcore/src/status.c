/*
 * Status names and the thread-local error message behind lc_errmsg().
 */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "base_internal.h"

static _Thread_local char errmsg[LC_ERRSTR_MAX];

const char *lc_status_name(lc_status st)
{
    switch (st) {
    case LC_OK: return "LC_OK";
    case LC_EINVAL: return "LC_EINVAL";
    case LC_ENOMEM: return "LC_ENOMEM";
    case LC_EIO: return "LC_EIO";
    case LC_EREDIS: return "LC_EREDIS";
    case LC_EBUSY: return "LC_EBUSY";
    case LC_ETIMEOUT: return "LC_ETIMEOUT";
    case LC_ENOTHELD: return "LC_ENOTHELD";
    case LC_ELOST: return "LC_ELOST";
    case LC_ESTATE: return "LC_ESTATE";
    case LC_EDOWN: return "LC_EDOWN";
    }
    return "LC_UNKNOWN";
}

const char *lc_errmsg(void)
{
    return errmsg;
}

lc_status lc_fail(lc_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errmsg, sizeof(errmsg), fmt, ap);
    va_end(ap);
    return st;
}

int64_t lc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
