/*
 * Unit tests of the stored order status table (service/src/store/order_status.h): its rows as
 * data (names, flags, changes, ranks), the enum's name/parse/can functions, the scripts' texts
 * (every status name an embedded script holds is a row's, and no ORDER_STATUS_ name is left),
 * the sink's rank (sink_db.c RANK names the rows in rank order), and the docs: docs/design.md's
 * status table and docs/api.md's status list and lifecycle diagram say what the rows say. Each
 * doc check also runs on a drifted copy (a change dropped, a status renamed, a row's cell
 * changed) and must find it. Takes well under a second.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "order_status.h"
#include "store_scripts.h"
#include "tree_text.h"

static void test_rows(void **state)
{
    (void)state;
    int ranks = 0;
    for (int i = 0; i < ORDER_STATUS_N; i++) {
        const struct order_status_row *r = &order_status_rows[i];
        assert_non_null(r->name);
        assert_int_equal(order_status_parse(r->name, strlen(r->name)), i);
        assert_string_equal(order_status_name((enum order_status)i), r->name);
        /* live and final are each other's opposite today; a final status has no change */
        assert_int_equal(r->live, !r->final);
        assert_int_equal(r->final, r->to[0] == '\0');
        assert_true(r->rank >= 1 && r->rank <= ORDER_STATUS_N);
        assert_false(ranks & (1 << r->rank)); /* ranks distinct */
        ranks |= 1 << r->rank;
        /* every word of `to` is a row, and the change goes up in rank */
        const char *w = r->to;
        while (*w) {
            size_t n = strcspn(w, " ");
            int t = order_status_parse(w, n);
            if (t < 0)
                fail_msg("%s: change to \"%.*s\", no row", r->name, (int)n, w);
            assert_true(order_status_rows[t].rank > r->rank);
            assert_true(order_status_can((enum order_status)i, (enum order_status)t));
            w += n;
            w += strspn(w, " ");
        }
        assert_false(order_status_can((enum order_status)i, (enum order_status)i));
    }
    assert_int_equal(order_status_parse("create", 6), -1);
    assert_int_equal(order_status_parse("createdx", 8), -1);
    assert_int_equal(order_status_parse("", 0), -1);
    assert_string_equal(order_status_name(ORDER_STATUS_N), "?");
    assert_false(order_status_can(ORDER_STATUS_N, ORDER_STATUS_CANCELLED));
}

/* The changes the scripts make (cancel.lua, confirm.lua, expire.lua; docs/design.md). */
static void test_changes(void **state)
{
    (void)state;
    static const char *const want[] = {"created>cancelled", "reserved>confirmed",
                                       "reserved>cancelled", "reserved>expired",
                                       "confirmed>cancelled"};
    int n = 0;
    for (int f = 0; f < ORDER_STATUS_N; f++)
        for (int t = 0; t < ORDER_STATUS_N; t++) {
            if (!order_status_can((enum order_status)f, (enum order_status)t))
                continue;
            char pair[40];
            snprintf(pair, sizeof(pair), "%s>%s", order_status_rows[f].name,
                     order_status_rows[t].name);
            int found = 0;
            for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
                found |= strcmp(pair, want[i]) == 0;
            if (!found)
                fail_msg("the table allows %s, no script makes it", pair);
            n++;
        }
    assert_int_equal(n, (int)(sizeof want / sizeof want[0]));
    assert_int_equal(order_status_reached(ORDER_STATUS_CREATED), 0);
    assert_int_equal(order_status_reached(ORDER_STATUS_RESERVED), 0);
    assert_int_equal(order_status_reached(ORDER_STATUS_CONFIRMED), 1);
    assert_int_equal(order_status_reached(ORDER_STATUS_EXPIRED), 1);
    assert_int_equal(order_status_reached(ORDER_STATUS_CANCELLED), 1);
}

/* The embedded scripts: the statuses in place of their names (embed_lua.cmake). */
static void test_scripts(void **state)
{
    (void)state;
    const char *const texts[] = {STORE_LUA_CANCEL, STORE_LUA_CONFIRM, STORE_LUA_EXPIRE,
                                 STORE_LUA_PART_FOLLOW, STORE_LUA_PART_UNDO};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        assert_null(strstr(texts[i], "ORDER_STATUS_"));
    assert_non_null(strstr(STORE_LUA_CONFIRM, "o.status = 'confirmed'"));
    assert_non_null(strstr(STORE_LUA_CANCEL, "order_end(ARGV[1], o, q, 'cancelled', now)"));
    assert_non_null(strstr(STORE_LUA_EXPIRE, "order_end(id, o, q, 'expired', now)"));
}

/* docs/design.md "### The stored statuses": | `name` | yes/no | changes | meaning |, one row
 * per status in the table's order. Returns the number of differences (printed). */
static int design_md_check(const char *doc)
{
    const char *sec = strstr(doc, "\n### The stored statuses");
    if (!sec) {
        print_error("docs/design.md: no \"### The stored statuses\"\n");
        return 1;
    }
    const char *line = strstr(sec, "\n|---");
    if (!line)
        return 1;
    int row = 0, failures = 0;
    for (line = strchr(line + 1, '\n'); line && line[1] == '|';
         line = strchr(line + 1, '\n'), row++) {
        const char *eol = strchr(line + 1, '\n');
        int len = eol ? (int)(eol - line - 1) : (int)strlen(line + 1);
        if (row >= ORDER_STATUS_N) {
            print_error("docs/design.md: status row %.*s: no row of order_status.h\n", len,
                        line + 1);
            failures++;
            continue;
        }
        const struct order_status_row *r = &order_status_rows[row];
        char want[512], to[160] = "";
        const char *w = r->to;
        while (*w) {
            size_t n = strcspn(w, " ");
            snprintf(to + strlen(to), sizeof(to) - strlen(to), "%s`%.*s`", to[0] ? ", " : "",
                     (int)n, w);
            w += n;
            w += strspn(w, " ");
        }
        snprintf(want, sizeof(want), "| `%s` | %s | %s | %s |", r->name, r->live ? "yes" : "no",
                 to[0] ? to : "— (final)", r->meaning);
        if ((int)strlen(want) != len || strncmp(want, line + 1, (size_t)len) != 0) {
            print_error("docs/design.md: status row %d: \"%.*s\", order_status.h says \"%s\"\n",
                        row, len, line + 1, want);
            failures++;
        }
    }
    if (row != ORDER_STATUS_N) {
        print_error("docs/design.md: %d status rows, order_status.h has %d\n", row, ORDER_STATUS_N);
        failures++;
    }
    return failures;
}

/* One UTF-8 code point at p: its length in bytes. */
static int cp_len(const char *p)
{
    unsigned char c = (unsigned char)*p;
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/*
 * docs/api.md "## Orders, holds and confirm": its list of an order's statuses ("`status` is
 * `created`, ... or `cancelled`") names every row, and its lifecycle diagram (the indented
 * lines after "An order goes through these statuses") draws exactly the table's changes. The
 * diagram is read as drawn: on a line, each status follows the one before it; a `┬` after a
 * status opens branches, and a line starting with `├` or `└` in that column continues from it.
 */
static int api_md_check(const char *doc)
{
    int failures = 0;
    /* the list */
    const char *list = strstr(doc, "`status` is `");
    if (!list) {
        print_error("docs/api.md: no \"`status` is `...`\" list\n");
        return 1;
    }
    const char *stop = list + strcspn(list, "(;."); /* the list ends at " (see", ";" or "." */
    int seen = 0, n = 0;
    for (const char *p = list + 12; p && p < stop; p = strchr(p + 1, '`')) {
        const char *q = strchr(p + 1, '`');
        if (!q || q > stop)
            break;
        int s = order_status_parse(p + 1, (size_t)(q - p - 1));
        if (s < 0) {
            print_error("docs/api.md: status list names `%.*s`, no row\n", (int)(q - p - 1), p + 1);
            failures++;
        } else {
            seen |= 1 << s;
        }
        n++;
        p = q;
    }
    if (seen != (1 << ORDER_STATUS_N) - 1 || n != ORDER_STATUS_N) {
        print_error(
            "docs/api.md: the status list names %d statuses, not each of the table's %d once\n", n,
            ORDER_STATUS_N);
        failures++;
    }
    /* the diagram */
    const char *d = strstr(doc, "An order goes through these statuses");
    if (!d || !(d = strstr(d, "\n\n    "))) {
        print_error("docs/api.md: no lifecycle diagram\n");
        return failures + 1;
    }
    int drawn[ORDER_STATUS_N][ORDER_STATUS_N] = {{0}};
    int branch[200];
    for (int c = 0; c < 200; c++)
        branch[c] = -1;
    for (const char *line = d + 2; strncmp(line, "    ", 4) == 0;) {
        const char *eol = strchr(line, '\n');
        if (!eol)
            eol = line + strlen(line);
        int col = 0, cur = -1, first = 1;
        for (const char *p = line; p < eol;) {
            if (*p >= 'a' && *p <= 'z') {
                const char *q = p;
                while (q < eol && ((*q >= 'a' && *q <= 'z') || *q == '_'))
                    q++;
                int s = order_status_parse(p, (size_t)(q - p));
                if (s >= 0) {
                    if (cur >= 0)
                        drawn[cur][s] = 1;
                    cur = s;
                }
                col += (int)(q - p);
                p = q;
                first = 0;
                continue;
            }
            if (*p != ' ') {
                if (first && (strncmp(p, "├", 3) == 0 || strncmp(p, "└", 3) == 0))
                    cur = col < 200 ? branch[col] : -1;
                else if (strncmp(p, "┬", 3) == 0 && col < 200)
                    branch[col] = cur;
                first = 0;
            }
            p += cp_len(p);
            col++;
        }
        line = *eol ? eol + 1 : eol;
    }
    for (int f = 0; f < ORDER_STATUS_N; f++)
        for (int t = 0; t < ORDER_STATUS_N; t++)
            if (drawn[f][t] != order_status_can((enum order_status)f, (enum order_status)t)) {
                print_error("docs/api.md: the diagram %s %s -> %s, order_status.h %s\n",
                            drawn[f][t] ? "draws" : "lacks", order_status_rows[f].name,
                            order_status_rows[t].name,
                            drawn[f][t] ? "has no such change" : "has it");
                failures++;
            }
    return failures;
}

static void test_design_md(void **state)
{
    (void)state;
    char *doc = tree_text("docs/design.md");
    assert_int_equal(design_md_check(doc), 0);
    /* drifted copies: a change dropped, a meaning changed, a row lost */
    char *bad =
        tree_drift(doc, "| `confirmed`, `cancelled`, `expired` |", "| `confirmed`, `cancelled` |");
    assert_true(design_md_check(bad) > 0);
    free(bad);
    bad = tree_drift(doc, "| `confirmed` | yes |", "| `confirmed` | no |");
    assert_true(design_md_check(bad) > 0);
    free(bad);
    bad = tree_drift(doc, "| `expired` | no | — (final) |", "| `expiring` | no | — (final) |");
    assert_true(design_md_check(bad) > 0);
    free(bad);
    free(doc);
}

static void test_api_md(void **state)
{
    (void)state;
    char *doc = tree_text("docs/api.md");
    assert_int_equal(api_md_check(doc), 0);
    /* drifted copies: a status renamed in the list, a change missing from the diagram, a
     * change the table does not have drawn */
    char *bad = tree_drift(doc, "`status` is `created`", "`status` is `placed`");
    assert_true(api_md_check(bad) > 0);
    free(bad);
    bad = tree_drift(doc, "├─ expires_at comes ──────────> expired",
                     "├─ expires_at comes ──────────> ended");
    assert_true(api_md_check(bad) > 0);
    free(bad);
    bad =
        tree_drift(doc, "──> created ──DELETE──> cancelled", "──> created ──confirm──> confirmed");
    assert_true(api_md_check(bad) > 0);
    free(bad);
    free(doc);
}

/* inventory-sink's database rank (sink_db.c RANK): the rows in rank order. */
static void test_sink_rank(void **state)
{
    (void)state;
    char *src = tree_text("service/src/sink/sink_db.c");
    char want[256] = "#define RANK(x) \"FIELD(\" x \"";
    for (int rank = 1; rank <= ORDER_STATUS_N; rank++)
        for (int i = 0; i < ORDER_STATUS_N; i++)
            if (order_status_rows[i].rank == rank)
                snprintf(want + strlen(want), sizeof(want) - strlen(want), ", '%s'",
                         order_status_rows[i].name);
    strcat(want, ")\"\n");
    if (!strstr(src, want))
        fail_msg("sink_db.c has no line %s", want);
    free(src);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows),    cmocka_unit_test(test_changes),
        cmocka_unit_test(test_scripts), cmocka_unit_test(test_design_md),
        cmocka_unit_test(test_api_md),  cmocka_unit_test(test_sink_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
