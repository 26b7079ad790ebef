/*
 * rules — see rules.h: RFC 3339 times to and from ms since the epoch, and the rules as JSON.
 * The calendar arithmetic is the proleptic Gregorian day count of H. Hinnant's
 * days_from_civil / civil_from_days: no libc time zone state, so it is the same on every
 * thread and in every TZ.
 */
#include <stdio.h>

#include "errors.h"
#include "rules.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "validate.h"

#define MS_PER_DAY 86400000LL

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian; y >= 1). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = y / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* The date of day z (days since 1970-01-01, z >= 0). */
static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
    z += 719468;
    int64_t era = z / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static int days_in_month(int64_t y, int m)
{
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 && leap ? 29 : days[m - 1];
}

/* Reads n decimal digits at s[*i] (within len) into *out; advances *i. 0, or -1. */
static int digits(const char *s, size_t len, size_t *i, int n, int *out)
{
    int v = 0;
    for (int k = 0; k < n; k++, (*i)++) {
        if (*i >= len || s[*i] < '0' || s[*i] > '9')
            return -1;
        v = v * 10 + (s[*i] - '0');
    }
    *out = v;
    return 0;
}

/* The character c at s[*i], advancing past it; 0, or -1 when another is there. */
static int expect(const char *s, size_t len, size_t *i, char c)
{
    if (*i >= len || s[*i] != c)
        return -1;
    (*i)++;
    return 0;
}

int rules_parse_time(const char *s, size_t len, int64_t *ms)
{
    size_t i = 0;
    int y, mo, d, h, mi, sec, frac = 0;
    if (!s || digits(s, len, &i, 4, &y) || expect(s, len, &i, '-') || digits(s, len, &i, 2, &mo) ||
        expect(s, len, &i, '-') || digits(s, len, &i, 2, &d))
        return -1;
    if (i >= len || (s[i] != 'T' && s[i] != 't'))
        return -1;
    i++;
    if (digits(s, len, &i, 2, &h) || expect(s, len, &i, ':') || digits(s, len, &i, 2, &mi) ||
        expect(s, len, &i, ':') || digits(s, len, &i, 2, &sec))
        return -1;
    if (i < len && s[i] == '.') {
        i++;
        int n = 0;
        for (; i < len && s[i] >= '0' && s[i] <= '9'; i++, n++)
            if (n < 3)
                frac = frac * 10 + (s[i] - '0');
        if (n == 0 || n > 9)
            return -1;
        for (; n < 3; n++)
            frac *= 10;
    }
    int64_t offset_min = 0;
    if (i < len && (s[i] == 'Z' || s[i] == 'z')) {
        i++;
    } else if (i < len && (s[i] == '+' || s[i] == '-')) {
        int sign = s[i] == '-' ? -1 : 1, oh, om;
        i++;
        if (digits(s, len, &i, 2, &oh) || expect(s, len, &i, ':') || digits(s, len, &i, 2, &om) ||
            oh > 23 || om > 59)
            return -1;
        offset_min = sign * (oh * 60 + om);
    } else {
        return -1;
    }
    if (i != len || y < 1970 || y > 9999 || mo < 1 || mo > 12 || d < 1 ||
        d > days_in_month(y, mo) || h > 23 || mi > 59 || sec > 59)
        return -1;
    int64_t t = days_from_civil(y, mo, d) * MS_PER_DAY +
                ((int64_t)h * 3600 + (int64_t)mi * 60 + sec - offset_min * 60) * 1000 + frac;
    if (t < RULES_TIME_MIN || t > RULES_TIME_MAX)
        return -1;
    *ms = t;
    return 0;
}

void rules_format_time(int64_t ms, char out[32])
{
    if (ms < 0)
        ms = 0;
    if (ms > RULES_TIME_MAX)
        ms = RULES_TIME_MAX;
    int64_t days = ms / MS_PER_DAY, rest = ms % MS_PER_DAY, y;
    int m, d;
    civil_from_days(days, &y, &m, &d);
    /* "%04u-%02u-%02uT%02u:%02u:%02u.%03uZ" written digit by digit: once per order, and
     * snprintf's parsing of the format was most of the cost (issue 23). */
    unsigned f[7] = {(unsigned)(y % 10000),
                     (unsigned)m % 100u,
                     (unsigned)d % 100u,
                     (unsigned)(rest / 3600000 % 100),
                     (unsigned)(rest / 60000 % 60),
                     (unsigned)(rest / 1000 % 60),
                     (unsigned)(rest % 1000)};
    static const char width[7] = {4, 2, 2, 2, 2, 2, 3},
                      after[7] = {'-', '-', 'T', ':', ':', '.', 'Z'};
    char *p = out;
    for (int i = 0; i < 7; i++) {
        for (int w = width[i] - 1; w >= 0; w--) {
            p[w] = (char)('0' + f[i] % 10);
            f[i] /= 10;
        }
        p += width[i];
        *p++ = after[i];
    }
    *p = '\0';
}

/* A time member: the RFC 3339 string, or null for 0. */
static json_t *time_json(int64_t ms)
{
    if (ms == 0)
        return json_null();
    char buf[32];
    rules_format_time(ms, buf);
    return json_string(buf);
}

int rules_to_json(const struct sku_rules *r, json_t *obj)
{
    int rc = 0;
    for (int i = 0; i < RULES_N; i++) {
        int64_t v = rules_get(r, i);
        json_t *j = rules_rows[i].kind == RULES_KIND_STR    ? json_string(rules_get_str(r, i))
                    : rules_rows[i].kind == RULES_KIND_TIME ? time_json(v)
                                                            : json_integer((json_int_t)v);
        rc |= json_object_set_new(obj, rules_rows[i].json, j);
    }
    return rc ? -1 : 0;
}

/* clang-format off */
#define ROW_INT_(id, json, lo, hi, jtext, deftext, meta, arg, judged, error, schema)               \
    [RULES_I_##id] = {RULES_KIND_INT, json, lo, hi, jtext, deftext, meta, judged, error, schema},
#define ROW_TIME_(id, json, jtext, deftext, meta, arg, judged, error, schema)                     \
    [RULES_I_##id] = {RULES_KIND_TIME, json, RULES_TIME_MIN, RULES_TIME_MAX, jtext, deftext,      \
                      meta, judged, error, schema},
#define ROW_STR_(id, json, jtext, deftext, meta, arg, judged, error, schema)                      \
    [RULES_I_##id] = {RULES_KIND_STR, json, 0, RULES_STR_MAX, jtext, deftext, meta, judged,       \
                      error, schema},
/* clang-format on */
const struct rules_row rules_rows[RULES_N] = {RULES_TABLE(ROW_INT_, ROW_TIME_, ROW_STR_)};

/* clang-format off */
#define GET_(id, ...)                                                                              \
    case RULES_I_##id: return (int64_t)r->id;
#define GET_NONE_(id, ...)                                                                         \
    case RULES_I_##id: return 0;
/* clang-format on */
int64_t rules_get(const struct sku_rules *r, int i)
{
    switch (i) {
        RULES_TABLE(GET_, GET_, GET_NONE_)
    default: return 0;
    }
}

#define SET_INT_(id, ...)                                                                          \
    case RULES_I_##id:                                                                             \
        r->id = (long long)v;                                                                      \
        return;
#define SET_TIME_(id, ...)                                                                         \
    case RULES_I_##id: r->id = v; return;
void rules_set(struct sku_rules *r, int i, int64_t v)
{
#define SET_NONE_(id, ...)                                                                         \
    case RULES_I_##id: return;
    switch (i) {
        RULES_TABLE(SET_INT_, SET_TIME_, SET_NONE_)
    default: return;
    }
}

#define STR_GET_(id, ...)
#define STR_GET_STR_(id, ...)                                                                      \
    case RULES_I_##id: return r->id;
const char *rules_get_str(const struct sku_rules *r, int i)
{
    switch (i) {
        RULES_TABLE(STR_GET_, STR_GET_, STR_GET_STR_)
    default: return NULL;
    }
}

#define STR_SET_STR_(id, ...)                                                                      \
    case RULES_I_##id: dst = r->id; break;
void rules_set_str(struct sku_rules *r, int i, const char *s, size_t len)
{
    char *dst = NULL;
    switch (i) {
        RULES_TABLE(STR_GET_, STR_GET_, STR_SET_STR_)
    default: return;
    }
    if (len > RULES_STR_MAX)
        len = RULES_STR_MAX;
    memcpy(dst, s, len);
    dst[len] = '\0';
}

int rules_str_ok(const char *s, size_t len)
{
    return len == 0 || (len <= RULES_STR_MAX && validate_sku(s, len));
}

/* "$<field>" of each STR row, the others' field as it is (rules_script_field). */
#define SF_INT_(id, json, lo, hi, jtext, deftext, meta, ...) [RULES_I_##id] = meta,
#define SF_TIME_(id, json, jtext, deftext, meta, ...) [RULES_I_##id] = meta,
#define SF_STR_(id, json, jtext, deftext, meta, ...) [RULES_I_##id] = "$" meta,
static const char *const script_fields[RULES_N] = {RULES_TABLE(SF_INT_, SF_TIME_, SF_STR_)};

const char *rules_script_field(int i)
{
    return i >= 0 && i < RULES_N ? script_fields[i] : "";
}

void rules_meta_text(const struct sku_rules *r, int i, char *out, size_t n)
{
    if (rules_rows[i].kind == RULES_KIND_STR)
        snprintf(out, n, "%s", rules_get_str(r, i));
    else
        snprintf(out, n, "%" PRId64, rules_get(r, i));
}

void rules_set_meta_text(struct sku_rules *r, int i, const char *t, size_t len)
{
    if (rules_rows[i].kind == RULES_KIND_STR) {
        rules_set_str(r, i, t, len);
        return;
    }
    char buf[24];
    long long v = 0;
    if (len > 0 && len < sizeof(buf)) {
        memcpy(buf, t, len);
        buf[len] = '\0';
        char *end;
        v = strtoll(buf, &end, 10);
        if (*end)
            v = 0;
    }
    rules_set(r, i, v);
}
