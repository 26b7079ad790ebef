/*
 * The key schema's table (service/store_keys.txt, made store_keys_gen.h by
 * cmake/embed_keys.cmake) against what must agree with it:
 *   - docs/design.md "## Key schema": its table names every key of the table once (each code
 *     span of a row's first column is one key) and no other, each with the table's type (the
 *     second column), as test_rules checks docs/api.md against rules_table.h;
 *   - service/src/store/store.c, the one place the service builds a key (from the same
 *     store_keys_gen.h, so this holds by construction; it stays as the proof): store_seg_keys
 *     fills one field per segment row named by a plain word, and struct seg_keys has no other
 *     field;
 *     store_sku_key and store.h's prefix and separator are the table's; store_registry_key and
 *     store_holds_key are its two keys outside any SKU; store_user_key builds a user's own
 *     keys (inv:2:{@U}:…).
 * The design.md read is $TEST_KEYS_DESIGN_MD when set (how a drifted copy is shown failing),
 * else the tree's. Well under a second.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store.h"
#include "store_keys_gen.h"

#ifndef INVENTORY_SOURCE_DIR
#error "INVENTORY_SOURCE_DIR must be defined (the tree's root)"
#endif

struct row {
    enum store_keys_scope scope;
    const char *name, *type;
    int kept;
};

static const struct row rows[] = {
#define ROW(scope, name, type, kept) {scope, name, type, kept},
    STORE_KEYS_ROWS(ROW)
#undef ROW
};

/* A row's key as docs/design.md writes it: inv:2:skus, inv:2:{S}:meta, inv:2:{S/k}:stock. */
static void row_key(const struct row *r, char *buf, size_t len)
{
    if (r->scope == STORE_KEYS_GLOBAL)
        snprintf(buf, len, STORE_KEYS_PREFIX "%s", r->name);
    else if (r->scope == STORE_KEYS_SKU)
        snprintf(buf, len, STORE_KEYS_PREFIX "{S}:%s", r->name);
    else if (r->scope == STORE_KEYS_USER)
        snprintf(buf, len, STORE_KEYS_PREFIX "{@U}:%s", r->name);
    else if (r->scope == STORE_KEYS_GROUP)
        snprintf(buf, len, STORE_KEYS_PREFIX "{G=G}:%s", r->name);
    else
        snprintf(buf, len, STORE_KEYS_PREFIX "{S" STORE_KEYS_SEG_SEP "k}:%s", r->name);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    if (text != NULL && fread(text, 1, (size_t)n, f) != (size_t)n) {
        free(text);
        text = NULL;
    }
    if (text != NULL)
        text[n] = '\0';
    fclose(f);
    return text;
}

static void test_design_md_table(void **state)
{
    (void)state;
    char path[1024];
    const char *env = getenv("TEST_KEYS_DESIGN_MD");
    snprintf(path, sizeof path, "%s", env ? env : INVENTORY_SOURCE_DIR "/docs/design.md");
    char *doc = read_text(path);
    if (doc == NULL)
        fail_msg("cannot read %s", path);
    char *sec = strstr(doc, "\n## Key schema\n");
    if (sec == NULL)
        fail_msg("%s: no \"## Key schema\" section", path);
    char *table = strstr(sec, "\n| key | type |");
    if (table == NULL)
        fail_msg("%s: \"## Key schema\" has no | key | type | table", path);
    int seen[STORE_KEYS_N] = {0};
    int errors = 0, nrows = 0;
    char *line = strchr(table + 1, '\n') + 1; /* past the header */
    line = strchr(line, '\n') + 1;            /* past |---| */
    while (strncmp(line, "| ", 2) == 0) {
        char *eol = strchr(line, '\n');
        char *c1 = line + 2, *c1end = strstr(c1, " | ");
        char *c2 = c1end ? c1end + 3 : NULL, *c2end = c2 ? strstr(c2, " | ") : NULL;
        nrows++;
        if (c2end == NULL || (eol && c2end > eol)) {
            print_error("%s: key table row %d has no type column\n", path, nrows);
            errors++;
            break;
        }
        /* each code span of the first column is a key */
        for (char *p = c1; p < c1end;) {
            char *open = memchr(p, '`', (size_t)(c1end - p));
            char *close = open ? memchr(open + 1, '`', (size_t)(c1end - open - 1)) : NULL;
            if (close == NULL)
                break;
            char key[256], want[256];
            snprintf(key, sizeof key, "%.*s", (int)(close - open - 1), open + 1);
            int found = -1;
            for (int i = 0; i < STORE_KEYS_N; i++) {
                row_key(&rows[i], want, sizeof want);
                if (strcmp(want, key) == 0)
                    found = i;
            }
            if (found < 0) {
                print_error("%s: key table row %d: %s is no row of service/store_keys.txt\n", path,
                            nrows, key);
                errors++;
            } else {
                if (seen[found]++)
                    print_error("%s: %s is in the key table twice\n", path, key), errors++;
                size_t tl = strlen(rows[found].type);
                if ((size_t)(c2end - c2) != tl || strncmp(c2, rows[found].type, tl) != 0) {
                    print_error("%s: %s: type \"%.*s\", service/store_keys.txt says \"%s\"\n", path,
                                key, (int)(c2end - c2), c2, rows[found].type);
                    errors++;
                }
            }
            p = close + 1;
        }
        if (eol == NULL)
            break;
        line = eol + 1;
    }
    for (int i = 0; i < STORE_KEYS_N; i++) {
        if (!seen[i]) {
            char want[256];
            row_key(&rows[i], want, sizeof want);
            print_error("%s: the key table lacks %s (service/store_keys.txt)\n", path, want);
            errors++;
        }
    }
    free(doc);
    if (errors)
        fail_msg("%d difference(s) between %s's key table and service/store_keys.txt", errors,
                 path);
}

static void test_store_builds_the_table(void **state)
{
    (void)state;
    assert_string_equal(STORE_KEY_PREFIX, STORE_KEYS_PREFIX);
    assert_string_equal(STORE_SEG_SEP, STORE_KEYS_SEG_SEP);
    /* each segment row named by a plain word is a field of struct seg_keys, with its name */
    struct seg_keys sk;
    store_seg_keys("S", 3, &sk);
    int nfields = 0;
#define FIELD(f)                                                                                   \
    assert_string_equal(sk.f, STORE_KEYS_PREFIX "{S" STORE_KEYS_SEG_SEP "3}:" #f);                 \
    nfields++;
    STORE_KEYS_SEG_FIELDS(FIELD)
#undef FIELD
    /* and struct seg_keys has no field the table lacks */
    if (sizeof(struct seg_keys) != (size_t)nfields * STORE_KEY_MAX)
        fail_msg("struct seg_keys has %zu keys, service/store_keys.txt %d plain segment rows",
                 sizeof(struct seg_keys) / STORE_KEY_MAX, nfields);
    /* SKU-wide keys: store_sku_key with the row's name; the two keys of no SKU */
    int nglobal = 0;
    for (int i = 0; i < STORE_KEYS_N; i++) {
        char want[256], got[STORE_KEY_MAX];
        if (rows[i].scope == STORE_KEYS_SKU && strchr(rows[i].name, '<') == NULL) {
            store_sku_key(got, "S", rows[i].name);
            snprintf(want, sizeof want, STORE_KEYS_PREFIX "{S}:%s", rows[i].name);
            assert_string_equal(got, want);
        } else if (rows[i].scope == STORE_KEYS_USER) {
            char ugot[STORE_USER_KEY_MAX];
            store_user_key(ugot, "U", rows[i].name);
            snprintf(want, sizeof want, STORE_KEYS_PREFIX "{@U}:%s", rows[i].name);
            assert_string_equal(ugot, want);
        } else if (rows[i].scope == STORE_KEYS_GROUP) {
            store_group_key(got, "G", rows[i].name);
            snprintf(want, sizeof want, STORE_KEYS_PREFIX "{G=G}:%s", rows[i].name);
            assert_string_equal(got, want);
        } else if (rows[i].scope == STORE_KEYS_GLOBAL) {
            snprintf(want, sizeof want, STORE_KEYS_PREFIX "%s", rows[i].name);
            if (strcmp(want, store_registry_key()) != 0 && strcmp(want, store_holds_key()) != 0)
                fail_msg("%s: neither store_registry_key() nor store_holds_key()", want);
            nglobal++;
        }
    }
    assert_int_equal(nglobal, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_design_md_table),
        cmocka_unit_test(test_store_builds_the_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
