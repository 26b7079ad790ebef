/*
 * Unit tests of service/src/base/rules.c: RFC 3339 times parsed to ms since the epoch (valid forms,
 * offsets, fractions, and a table of garbage, impossible dates and out-of-range instants that
 * must be refused), formatted back ("YYYY-MM-DDTHH:MM:SS.mmmZ"), checked against libc's
 * gmtime_r over many random instants, and the rules as JSON; and the one table of rules
 * (rules_table.h): its rows as data, where store_commit_call and the commit script put the rules
 * it is given, and docs/api.md's rule table and docs/openapi.yaml's schemas saying what the rows
 * say (as test_config checks the settings' documents against config_options.h).
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "errors.h"
#include "rules.h"
#include "store.h"
#include "store_scripts.h"
#include "tree_text.h"

static int64_t parse_ok(const char *s)
{
    int64_t ms = -7;
    if (rules_parse_time(s, strlen(s), &ms) != 0)
        fail_msg("refused \"%s\"", s);
    return ms;
}

static void test_parse_valid(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        int64_t ms;
    } cases[] = {
        {"2026-11-25T18:00:00Z", 1795629600000LL},
        {"2026-11-25t18:00:00z", 1795629600000LL},
        {"2026-11-25T18:00:00.5Z", 1795629600500LL},
        {"2026-11-25T18:00:00.123Z", 1795629600123LL},
        {"2026-11-25T18:00:00.123999999Z", 1795629600123LL}, /* cut, not rounded */
        {"2026-11-25T20:00:00+02:00", 1795629600000LL},
        {"2026-11-25T12:30:00-05:30", 1795629600000LL},
        {"2026-11-25T18:00:00+00:00", 1795629600000LL},
        {"2026-11-25T18:00:00-00:00", 1795629600000LL},
        {"1970-01-01T00:00:00.001Z", 1},
        {"1970-01-01T00:00:01Z", 1000},
        {"1970-01-01T00:00:00-00:01", 60000}, /* local 1970, UTC a minute later */
        {"2000-02-29T00:00:00Z", 951782400000LL},
        {"2024-02-29T23:59:59.999Z", 1709251199999LL},
        {"9999-12-31T23:59:59.999Z", RULES_TIME_MAX},
        {"9999-12-31T23:59:59.999+01:00", RULES_TIME_MAX - 3600000},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t ms = parse_ok(cases[i].s);
        if (ms != cases[i].ms)
            fail_msg("\"%s\": %lld, expected %lld", cases[i].s, (long long)ms,
                     (long long)cases[i].ms);
    }
}

static void test_parse_invalid(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "now",
        "2026-11-25",                      /* a date alone */
        "2026-11-25T18:00:00",             /* no zone */
        "2026-11-25 18:00:00Z",            /* space for T */
        "2026-11-25T18:00Z",               /* no seconds */
        "2026-11-25T18:00:00.Z",           /* empty fraction */
        "2026-11-25T18:00:00.1234567890Z", /* 10 fraction digits */
        "2026-11-25T18:00:00,5Z",
        "2026-11-25T18:00:00+0200", /* offset without ':' */
        "2026-11-25T18:00:00+02",
        "2026-11-25T18:00:00+24:00",
        "2026-11-25T18:00:00+02:60",
        "2026-11-25T18:00:00ZZ", /* trailing data */
        "2026-11-25T18:00:00Z ",
        " 2026-11-25T18:00:00Z",
        "+2026-11-25T18:00:00Z",
        "2026-1-25T18:00:00Z",
        "20261-11-25T18:00:00Z",
        "2026-13-01T00:00:00Z",
        "2026-00-01T00:00:00Z",
        "2026-11-00T00:00:00Z",
        "2026-11-31T00:00:00Z",
        "2026-02-29T00:00:00Z", /* not a leap year */
        "1900-02-29T00:00:00Z", /* nor is 1900 */
        "2026-11-25T24:00:00Z",
        "2026-11-25T23:60:00Z",
        "2026-11-25T23:59:60Z", /* no leap seconds */
        "1969-12-31T23:59:59Z", /* before 1970 */
        "1970-01-01T00:00:00Z", /* the epoch itself: 0 means "none" */
        "1970-01-01T00:30:00+01:00",
        "0000-01-01T00:00:00Z",
        "9999-12-31T23:59:59-01:00", /* past 9999 in UTC */
        "2026-11-25T18:00:00\xc2\xa0Z",
        "2026-11-25T18:0a:00Z",
        "-026-11-25T18:00:00Z",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t ms = 42;
        if (rules_parse_time(bad[i], strlen(bad[i]), &ms) == 0)
            fail_msg("accepted \"%s\" as %lld", bad[i], (long long)ms);
        assert_int_equal(ms, 42);
    }
    int64_t ms = 42;
    assert_int_equal(rules_parse_time(NULL, 0, &ms), -1);
    /* The length bounds the text: no read past it, no NUL needed. */
    const char s[] = "2026-11-25T18:00:00Zjunk";
    assert_int_equal(rules_parse_time(s, 20, &ms), 0);
    assert_int_equal(ms, 1795629600000LL);
    assert_int_equal(rules_parse_time(s, 19, &ms), -1);
    const char nul[] = "2026-11-25T18:00:00Z\0";
    assert_int_equal(rules_parse_time(nul, sizeof(nul) - 1, &ms), -1);
}

static void test_format_time(void **state)
{
    (void)state;
    char buf[32];
    rules_format_time(1795629600000LL, buf);
    assert_string_equal(buf, "2026-11-25T18:00:00.000Z");
    rules_format_time(1795629600123LL, buf);
    assert_string_equal(buf, "2026-11-25T18:00:00.123Z");
    rules_format_time(1, buf);
    assert_string_equal(buf, "1970-01-01T00:00:00.001Z");
    rules_format_time(951782400000LL, buf);
    assert_string_equal(buf, "2000-02-29T00:00:00.000Z");
    rules_format_time(RULES_TIME_MAX, buf);
    assert_string_equal(buf, "9999-12-31T23:59:59.999Z");
    rules_format_time(RULES_TIME_MAX + 1000, buf); /* clamped */
    assert_string_equal(buf, "9999-12-31T23:59:59.999Z");
    rules_format_time(-5, buf);
    assert_string_equal(buf, "1970-01-01T00:00:00.000Z");
}

/* Random instants: the format agrees with gmtime_r field by field, and parses back. */
static void test_round_trip_against_gmtime(void **state)
{
    (void)state;
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int64_t ms = (int64_t)(x % (uint64_t)RULES_TIME_MAX) + 1;
        if (i < 1000) /* near the ends and the leap days too */
            ms = i % 2 ? RULES_TIME_MAX - (int64_t)(x % 400000000000ULL)
                       : 1 + (int64_t)(x % 1000000000000ULL);
        char buf[32], want[80];
        rules_format_time(ms, buf);
        time_t t = (time_t)(ms / 1000);
        struct tm tm;
        assert_non_null(gmtime_r(&t, &tm));
        snprintf(want, sizeof(want), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
        if (strcmp(buf, want) != 0)
            fail_msg("%lld: %s, gmtime_r says %s", (long long)ms, buf, want);
        assert_int_equal(parse_ok(buf), ms);
    }
}

static void test_json(void **state)
{
    (void)state;
    struct sku_rules r = {.limit_per_user = 2, .sale_start_ms = 1795629600000LL, .ttl_s = 600};
    json_t *o = json_object();
    assert_int_equal(rules_to_json(&r, o), 0);
    char *text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(text, "{\"hold_extend_max\":0,\"hold_extend_s\":0,\"limit_group\":\"\","
                              "\"limit_per_user\":2,\"queue_admit_pct\":0,\"queue_fifo\":0,"
                              "\"queue_max_active\":0,\"queue_paused\":0,\"queue_pow_bits\":0,"
                              "\"queue_rate\":0,\"queue_ticket_ttl_s\":0,"
                              "\"reservation_ttl_s\":600,"
                              "\"sale_end\":null,\"sale_start\":\"2026-11-25T18:00:00.000Z\"}");
    free(text);
    json_decref(o);
}

/* ---- the table (rules_table.h) ---- */

/* The rows as data: names unique, ranges sane, get and set the members they name. */
static void test_table_rows(void **state)
{
    (void)state;
    assert_int_equal(RULES_N, sizeof(rules_rows) / sizeof(rules_rows[0]));
    for (int i = 0; i < RULES_N; i++) {
        const struct rules_row *w = &rules_rows[i];
        assert_non_null(w->json);
        assert_non_null(w->meta);
        assert_true(w->lo >= 0 && w->lo <= w->hi);
        for (int j = 0; j < i; j++) {
            assert_string_not_equal(w->json, rules_rows[j].json);
            assert_string_not_equal(w->meta, rules_rows[j].meta);
        }
        assert_string_not_equal(w->meta, RULES_F_VERSION);
        struct sku_rules r;
        memset(&r, 0, sizeof(r));
        if (w->kind == RULES_KIND_STR) { /* a name of the row's longest length */
            char s[RULES_STR_MAX + 1];
            memset(s, 'g', (size_t)w->hi);
            rules_set_str(&r, i, s, (size_t)w->hi);
            assert_int_equal(strlen(rules_get_str(&r, i)), w->hi);
            assert_int_equal(rules_script_field(i)[0], '$');
            assert_string_equal(rules_script_field(i) + 1, w->meta);
        } else {
            rules_set(&r, i, w->hi);
            assert_null(rules_get_str(&r, i));
            assert_string_equal(rules_script_field(i), w->meta);
        }
        for (int j = 0; j < RULES_N; j++)
            assert_int_equal(rules_get(&r, j), j == i && w->kind != RULES_KIND_STR ? w->hi : 0);
    }
}

/* A STR row (limit_group): its values are "" or a name by the SKU name rules, at most
 * RULES_STR_MAX bytes; a longer one is cut when set; its meta text is the string itself, and
 * rules_to_json renders it as a string. */
static void test_str_rule(void **state)
{
    (void)state;
    int i = RULES_I_limit_group;
    assert_int_equal(rules_rows[i].kind, RULES_KIND_STR);
    assert_string_equal(rules_rows[i].meta, "grp");
    assert_true(rules_str_ok("", 0));
    assert_true(rules_str_ok("style-123", 9));
    assert_true(rules_str_ok("a.b:c_d-9", 9));
    assert_false(rules_str_ok("has space", 9));
    assert_false(rules_str_ok("x{y}", 4));
    assert_false(rules_str_ok("a/b", 3));
    char long_name[RULES_STR_MAX + 2];
    memset(long_name, 'a', sizeof(long_name));
    assert_true(rules_str_ok(long_name, RULES_STR_MAX));
    assert_false(rules_str_ok(long_name, RULES_STR_MAX + 1));
    struct sku_rules r;
    memset(&r, 0, sizeof(r));
    rules_set_meta_text(&r, i, "style-123", 9);
    assert_string_equal(r.limit_group, "style-123");
    char text[RULES_STR_MAX + 1];
    rules_meta_text(&r, i, text, sizeof(text));
    assert_string_equal(text, "style-123");
    rules_set_meta_text(&r, RULES_I_limit_per_user, "12", 2);
    assert_int_equal(r.limit_per_user, 12);
    rules_set_meta_text(&r, RULES_I_limit_per_user, "1x", 2);
    assert_int_equal(r.limit_per_user, 0);
    rules_set_str(&r, i, long_name, sizeof(long_name));
    assert_int_equal(strlen(r.limit_group), RULES_STR_MAX);
    rules_set(&r, i, 5); /* an integer set on a STR row changes nothing */
    assert_int_equal(strlen(r.limit_group), RULES_STR_MAX);
    rules_set_str(&r, i, "g1", 2);
    json_t *o = json_object();
    assert_int_equal(rules_to_json(&r, o), 0);
    assert_string_equal(json_string_value(json_object_get(o, "limit_group")), "g1");
    rules_set_str(&r, i, "", 0);
    assert_int_equal(rules_to_json(&r, o), 0);
    assert_string_equal(json_string_value(json_object_get(o, "limit_group")), "");
    json_decref(o);
}

/* The commit is given each rule of a row with an arg at that ARGV position, and the script reads
 * it there (the position is one number of store_scripts.h, put into the Lua text by the build). */
static void test_commit_args_from_the_table(void **state)
{
    (void)state;
    struct sku_rules r;
    memset(&r, 0, sizeof(r));
    for (int i = 0; i < RULES_N; i++)
        rules_set(&r, i, 1000 + i);
    r.version = 77;
    struct store_commit_in in = {.sku = "s",
                                 .k = 3,
                                 .version = 9,
                                 .qty = 1,
                                 .id = "id",
                                 .record = "{}",
                                 .idem = "",
                                 .expiry = "0",
                                 .rules = &r,
                                 .user = ""};
    struct store_commit_call c;
    store_commit_call(&in, &c);
    assert_int_equal(c.nargs, STORE_COMMIT_NARGS);
    assert_string_equal(c.args[STORE_COMMIT_ARG_RULES_VERSION - 1], "77");
    assert_string_equal(c.args[STORE_COMMIT_ARG_ITEMS - 1], ""); /* not a cart: no items */
    int given = 0;
#define ARG_(id, json, lo, hi, jtext, deftext, meta, arg, ...)                                     \
    if (arg > 0) {                                                                                 \
        char want[32], read[48];                                                                   \
        snprintf(want, sizeof(want), "%d", 1000 + RULES_I_##id);                                   \
        assert_string_equal(c.args[arg - 1], want);                                                \
        snprintf(read, sizeof(read), "tonumber(ARGV[%d])", arg);                                   \
        assert_non_null(strstr(STORE_LUA_COMMIT_BODY, read));                                      \
        given++;                                                                                   \
    }
#define ARG_TIME_(id, json, jtext, deftext, meta, arg, ...)                                        \
    ARG_(id, json, 0, 0, jtext, deftext, meta, arg, 0)
#define ARG_STR_(id, json, jtext, deftext, meta, arg, ...) assert_int_equal(arg, 0);
    RULES_TABLE(ARG_, ARG_TIME_, ARG_STR_)
#undef ARG_STR_
#undef ARG_
#undef ARG_TIME_
    assert_int_equal(given, 3); /* sale_start, sale_end, ttl: the limit is read from the meta */
    /* patch_rules.lua's window check names the two rows' meta fields */
    assert_non_null(strstr(STORE_LUA_PATCH_RULES, "by['sale_start']"));
    assert_string_equal(rules_rows[RULES_I_sale_start_ms].meta, "sale_start");
    assert_non_null(strstr(STORE_LUA_PATCH_RULES, "by['sale_end']"));
    assert_string_equal(rules_rows[RULES_I_sale_end_ms].meta, "sale_end");
}

/* The "an order it refuses" cell of a row: "409 `code`", or "—" for none. */
static void refusal_cell(const struct rules_row *w, char *out, size_t n)
{
    if (w->error == ERROR_NONE)
        snprintf(out, n, "—");
    else
        snprintf(out, n, "%d `%s`", error_http_status((enum error_code)w->error),
                 error_code_string((enum error_code)w->error));
}

/* docs/api.md "## Sale rules": one table row per rule, in the table's order, its cells
 * | `json` | jtext | deftext | refusal | meaning |. */
static void test_api_md_rule_table(void **state)
{
    (void)state;
    char *doc = tree_text("docs/api.md");
    const char *sec = strstr(doc, "\n## Sale rules");
    assert_non_null(sec);
    const char *end = strstr(sec + 1, "\n## ");
    const char *line = strstr(sec, "\n|---");
    assert_non_null(line);
    int row = 0, failures = 0;
    for (line = strchr(line + 1, '\n'); line && (!end || line < end) && line[1] == '|';
         line = strchr(line + 1, '\n'), row++) {
        char cells[5][160], want[5][160];
        const char *p = line + 3; /* past "\n| " */
        int n = 0;
        while (n < 5) {
            const char *bar = strstr(p, " |");
            if (!bar)
                break;
            snprintf(cells[n], sizeof(cells[n]), "%.*s", (int)(bar - p), p);
            n++;
            p = bar + 3;
        }
        if (row >= RULES_N || n < 5) {
            print_error("docs/api.md: rule table row %d: %.60s is no row of rules_table.h\n", row,
                        line + 1);
            failures++;
            continue;
        }
        const struct rules_row *w = &rules_rows[row];
        snprintf(want[0], sizeof(want[0]), "`%s`", w->json);
        snprintf(want[1], sizeof(want[1]), "%s", w->jtext);
        snprintf(want[2], sizeof(want[2]), "%s", w->deftext);
        refusal_cell(w, want[3], sizeof(want[3]));
        for (int c = 0; c < 4; c++)
            if (strcmp(cells[c], want[c]) != 0) {
                print_error("docs/api.md: rule %s, cell %d: \"%s\", rules_table.h says \"%s\"\n",
                            w->json, c + 1, cells[c], want[c]);
                failures++;
            }
    }
    if (row != RULES_N) {
        print_error("docs/api.md: %d rule rows, rules_table.h has %d\n", row, RULES_N);
        failures++;
    }
    free(doc);
    assert_int_equal(failures, 0);
}

/* The text of components/schemas/<name> in docs/openapi.yaml (4-space key, up to the next one),
 * or NULL. */
static char *yaml_schema(const char *doc, const char *name)
{
    char key[96];
    snprintf(key, sizeof(key), "\n    %s:\n", name);
    const char *b = strstr(doc, key);
    if (!b)
        return NULL;
    b += strlen(key);
    const char *e = b;
    while ((e = strchr(e, '\n')) &&
           !(e[1] == ' ' && e[2] == ' ' && e[3] == ' ' && e[4] == ' ' && e[5] != ' '))
        e++;
    size_t n = e ? (size_t)(e - b) + 1 : strlen(b); /* with its last line's newline */
    char *out = malloc(n + 1);
    assert_non_null(out);
    memcpy(out, b, n);
    out[n] = '\0';
    return out;
}

/* The names in the first "required: [...]" of block (may span lines), as ",a,b," into out. */
static void yaml_required(const char *block, char *out, size_t n)
{
    const char *r = strstr(block, "required: [");
    out[0] = '\0';
    if (!r)
        return;
    size_t k = 0;
    out[k++] = ',';
    for (r += 11; *r && *r != ']' && k + 2 < n; r++)
        if (*r != ' ' && *r != '\n')
            out[k++] = *r;
    out[k++] = ',';
    out[k] = '\0';
}

static int has_required(const char *block, const char *name)
{
    char req[1024], want[96];
    yaml_required(block, req, sizeof(req));
    snprintf(want, sizeof(want), ",%s,", name);
    return strstr(req, want) != NULL;
}

/* docs/openapi.yaml: each rule's request schema says its type and range, PUT's and PATCH's
 * bodies take it (PATCH's any non-empty subset: one anyOf branch each), and the answers (rules,
 * PUT's result, the status) require it; PATCH's body has no other property. */
static void test_openapi_rules(void **state)
{
    (void)state;
    char *doc = tree_text("docs/openapi.yaml");
    char *put = yaml_schema(doc, "PutSkuRequest"), *patch = yaml_schema(doc, "PatchSkuRequest"),
         *fields = yaml_schema(doc, "SkuRulesFields"),
         *status = yaml_schema(doc, "SkuStatusFields");
    assert_non_null(put);
    assert_non_null(patch);
    assert_non_null(fields);
    assert_non_null(status);
    int failures = 0;
    for (int i = 0; i < RULES_N; i++) {
        const struct rules_row *w = &rules_rows[i];
        char want[256];
        char *sch = yaml_schema(doc, w->schema);
        if (!sch) {
            print_error("docs/openapi.yaml: no schema %s (rule %s)\n", w->schema, w->json);
            failures++;
            continue;
        }
        if (w->kind == RULES_KIND_INT) {
            char lo[64], hi[64];
            snprintf(lo, sizeof(lo), "minimum: %lld\n", w->lo);
            snprintf(hi, sizeof(hi), "maximum: %lld\n", w->hi);
            if (!strstr(sch, "type: integer\n") || !strstr(sch, lo) || !strstr(sch, hi)) {
                print_error("docs/openapi.yaml: %s is not an integer %lld..%lld (rule %s)\n",
                            w->schema, w->lo, w->hi, w->json);
                failures++;
            }
        } else if (w->kind == RULES_KIND_STR) {
            char max[64];
            snprintf(max, sizeof(max), "maxLength: %lld\n", w->hi);
            if (!strstr(sch, "type: string\n") || !strstr(sch, max) ||
                !strstr(sch, "pattern: '^$|^[A-Za-z0-9_.:-]+$'\n")) {
                print_error("docs/openapi.yaml: %s is not a name or \"\" of at most %lld bytes "
                            "(rule %s)\n",
                            w->schema, w->hi, w->json);
                failures++;
            }
        } else if (!strstr(sch, "type: [string, 'null']\n") ||
                   !strstr(sch, "format: date-time\n")) {
            print_error("docs/openapi.yaml: %s is not a date-time or null (rule %s)\n", w->schema,
                        w->json);
            failures++;
        }
        free(sch);
        snprintf(want, sizeof(want), "\n        %s: {$ref: '#/components/schemas/%s'}\n", w->json,
                 w->schema);
        if (!strstr(put, want) || !strstr(patch, want)) {
            print_error("docs/openapi.yaml: PutSkuRequest / PatchSkuRequest lack %s", want + 1);
            failures++;
        }
        snprintf(want, sizeof(want), "\n        - required: [%s]\n", w->json);
        if (!strstr(patch, want)) {
            print_error("docs/openapi.yaml: PatchSkuRequest's anyOf lacks %s", want + 1);
            failures++;
        }
        snprintf(want, sizeof(want), "\n        %s: ", w->json);
        if (!has_required(fields, w->json) || !strstr(fields, want) ||
            !has_required(status, w->json) || !strstr(status, want)) {
            print_error("docs/openapi.yaml: SkuRulesFields / SkuStatusFields do not require %s\n",
                        w->json);
            failures++;
        }
    }
    /* PATCH's body: the rules and nothing else */
    const char *props = strstr(patch, "\n      properties:\n");
    assert_non_null(props);
    int nprops = 0;
    for (const char *l = strchr(props + 1, '\n');
         l && strncmp(l, "\n        ", 9) == 0 && l[9] != ' '; l = strchr(l + 1, '\n'))
        nprops++;
    if (nprops != RULES_N) {
        print_error("docs/openapi.yaml: PatchSkuRequest has %d properties, rules_table.h %d rows\n",
                    nprops, RULES_N);
        failures++;
    }
    free(put);
    free(patch);
    free(fields);
    free(status);
    free(doc);
    assert_int_equal(failures, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_valid),
        cmocka_unit_test(test_parse_invalid),
        cmocka_unit_test(test_format_time),
        cmocka_unit_test(test_round_trip_against_gmtime),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_table_rows),
        cmocka_unit_test(test_str_rule),
        cmocka_unit_test(test_commit_args_from_the_table),
        cmocka_unit_test(test_api_md_rule_table),
        cmocka_unit_test(test_openapi_rules),
    };
    return cmocka_run_group_tests_name("rules", tests, NULL, NULL);
}
