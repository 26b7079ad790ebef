/* A SKU's sale rules: their times as text; see rules.h. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "rules.h"

void rules_format_time(int64_t ms, char out[32])
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    char buf[64];
    int n = snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
    if (n < 0 || n > 31) /* a year past 9999: not a time the service writes */
        n = 0;
    memcpy(out, buf, (size_t)n);
    out[n] = '\0';
}
