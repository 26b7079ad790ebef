/*
 * validate — strict parsing of client input: names, headers and the JSON request bodies.
 * See validate.h for the rules. jansson does the JSON grammar (with duplicate keys and \u0000
 * refused); this file turns its errors into messages that name the field at fault and checks
 * the type and range of every known field.
 */
#include "validate.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define SKU_RULE "[A-Za-z0-9_.:-]{1,64}"
#define GOT_MAX 40 /* longest rendering of an offending value quoted in a message */

/* An integer field of a body, for range messages. */
struct int_field {
    const char *name;
    int64_t min, max;
};

static void fail(struct validate_error *err, enum error_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Fills *err; the message is forced to printable ASCII (it may quote client bytes). */
static void fail(struct validate_error *err, enum error_code code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    for (char *p = err->message; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
            *p = '?';
    err->code = code;
}

bool validate_sku(const char *s, size_t len)
{
    if (!s || len == 0 || len > VALIDATE_SKU_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == ':' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

bool validate_printable(const char *s, size_t len)
{
    if (!s || len == 0 || len > VALIDATE_PRINTABLE_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return false;
    return true;
}

static char lower(char c)
{
    return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

/* Case-insensitive comparison of s[0..n) with the lowercase literal lit. */
static bool ci_equal(const char *s, size_t n, const char *lit)
{
    if (strlen(lit) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (lower(s[i]) != lit[i])
            return false;
    return true;
}

static const char *skip_ows(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

bool validate_content_type(const char *value)
{
    static const char media[] = "application/json";
    if (!value)
        return false;
    const char *p = skip_ows(value);
    size_t mlen = sizeof(media) - 1;
    if (strlen(p) < mlen || !ci_equal(p, mlen, media))
        return false;
    p = skip_ows(p + mlen);
    /* Parameters: ; name=value or ; name="value". Only charset is checked. */
    while (*p == ';') {
        p = skip_ows(p + 1);
        if (*p == '\0')
            break; /* a trailing ";" is harmless */
        const char *name = p;
        while (*p && *p != '=' && *p != ';' && *p != ' ' && *p != '\t')
            p++;
        size_t nlen = (size_t)(p - name);
        if (*p != '=' || nlen == 0)
            return false;
        p++;
        const char *val = p;
        size_t vlen;
        if (*p == '"') {
            val = ++p;
            while (*p && *p != '"')
                p++;
            if (*p != '"')
                return false;
            vlen = (size_t)(p - val);
            p++;
        } else {
            while (*p && *p != ';' && *p != ' ' && *p != '\t')
                p++;
            vlen = (size_t)(p - val);
        }
        if (ci_equal(name, nlen, "charset") && !ci_equal(val, vlen, "utf-8"))
            return false;
        p = skip_ows(p);
    }
    return *p == '\0';
}

/* Renders a JSON value for a message: compact, ASCII-only, cut to GOT_MAX characters. */
static void render(const json_t *v, char *buf, size_t cap)
{
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_ENSURE_ASCII);
    if (!text) {
        snprintf(buf, cap, "(unprintable)");
        return;
    }
    if (strlen(text) > GOT_MAX)
        snprintf(buf, cap, "%.*s...", GOT_MAX, text);
    else
        snprintf(buf, cap, "%s", text);
    free(text);
}

/* Finds the top-level member that byte offset pos of body belongs to, jansson-style: pos is just
 * after the offending token. key_mode: the token is a key of the top-level object (duplicate
 * key); otherwise it is inside the value of a top-level member. Copies the member's name into
 * key and returns true when it is a plain name ([A-Za-z0-9_.-], < keycap chars); false when
 * the token is not in such a member or the name needs escaping. */
static bool member_at(const char *b, size_t len, size_t pos, bool key_mode, char *key,
                      size_t keycap)
{
    size_t end = pos < len ? pos : len;
    int depth = 0;
    bool object = false, in_str = false, esc = false, expect_key = false, in_value = false;
    size_t str_start = 0, cand_s = 0, cand_e = 0, key_s = 0, key_e = 0;

    for (size_t i = 0; i < end; i++) {
        char c = b[i];
        if (in_str) {
            if (esc) {
                esc = false;
            } else if (c == '\\') {
                esc = true;
            } else if (c == '"') {
                in_str = false;
                if (object && depth == 1 && expect_key) {
                    cand_s = str_start + 1;
                    cand_e = i;
                    expect_key = false;
                    if (key_mode && i + 1 == pos) {
                        key_s = cand_s;
                        key_e = cand_e;
                        goto found;
                    }
                }
            }
            continue;
        }
        switch (c) {
        case '"':
            in_str = true;
            str_start = i;
            break;
        case '{':
            if (depth == 0) {
                object = true;
                expect_key = true;
            }
            depth++;
            break;
        case '[': depth++; break;
        case '}':
        case ']': depth--; break;
        case ':':
            if (object && depth == 1) {
                key_s = cand_s;
                key_e = cand_e;
                in_value = true;
            }
            break;
        case ',':
            if (object && depth == 1) {
                expect_key = true;
                in_value = false;
            }
            break;
        default: break;
        }
    }
    if (key_mode || !object || depth < 1 || !in_value)
        return false;
found:
    if (key_e <= key_s || key_e - key_s >= keycap)
        return false;
    for (size_t i = key_s; i < key_e; i++) {
        char c = b[i];
        bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == '-';
        if (!ok)
            return false;
    }
    memcpy(key, b + key_s, key_e - key_s);
    key[key_e - key_s] = '\0';
    return true;
}

static const struct int_field *find_int_field(const struct int_field *fields, size_t n,
                                              const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(fields[i].name, name) == 0)
            return &fields[i];
    return NULL;
}

/* Turns a jansson parse error into a message naming the field when one can be told. */
static void fail_parse(const char *body, size_t len, const json_error_t *je,
                       const struct int_field *fields, size_t nfields, struct validate_error *err)
{
    char key[33];
    size_t pos = (size_t)(je->position > 0 ? je->position : 0);

    switch (json_error_code(je)) {
    case json_error_duplicate_key:
        if (member_at(body, len, pos, true, key, sizeof(key))) {
            fail(err, ERROR_INVALID_REQUEST, "%s: duplicate key", key);
            return;
        }
        fail(err, ERROR_INVALID_REQUEST, "body: duplicate key (line %d, column %d)", je->line,
             je->column);
        return;
    case json_error_numeric_overflow:
        if (member_at(body, len, pos, false, key, sizeof(key))) {
            const struct int_field *f = find_int_field(fields, nfields, key);
            /* The number is the text just before pos. */
            size_t e = pos < len ? pos : len, s = e;
            while (s > 0 && strchr("0123456789+-.eE", body[s - 1]) && body[s - 1] != '\0')
                s--;
            int n = (int)(e - s > GOT_MAX ? GOT_MAX : e - s);
            if (f)
                fail(err, ERROR_INVALID_REQUEST,
                     "%s: must be an integer between %" PRId64 " and %" PRId64 ", got %.*s%s", key,
                     f->min, f->max, n, body + s, (e - s > GOT_MAX) ? "..." : "");
            else
                fail(err, ERROR_INVALID_REQUEST, "%s: number out of range, got %.*s%s", key, n,
                     body + s, (e - s > GOT_MAX) ? "..." : "");
            return;
        }
        fail(err, ERROR_INVALID_REQUEST, "body: number out of range (line %d, column %d)", je->line,
             je->column);
        return;
    case json_error_null_character:
        if (member_at(body, len, pos, false, key, sizeof(key))) {
            fail(err, ERROR_INVALID_REQUEST, "%s: must not contain NUL (\\u0000) characters", key);
            return;
        }
        fail(err, ERROR_INVALID_REQUEST,
             "body: strings must not contain NUL (\\u0000) characters (line %d, column %d)",
             je->line, je->column);
        return;
    default:
        fail(err, ERROR_INVALID_REQUEST, "body: invalid JSON: %s (line %d, column %d)", je->text,
             je->line, je->column);
        return;
    }
}

/* Parses body as one JSON object. Returns a NEW reference, or NULL with *err filled. */
static json_t *load_object(const char *body, size_t len, const struct int_field *fields,
                           size_t nfields, struct validate_error *err)
{
    if (len > VALIDATE_MAX_BODY) {
        fail(err, ERROR_BODY_TOO_LARGE, "body: must be at most %d bytes, got %zu",
             VALIDATE_MAX_BODY, len);
        return NULL;
    }
    if (!body || len == 0) {
        fail(err, ERROR_INVALID_REQUEST, "body: is required (a JSON object)");
        return NULL;
    }
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        fail_parse(body, len, &je, fields, nfields, err);
        return NULL;
    }
    if (!json_is_object(root)) {
        fail(err, ERROR_INVALID_REQUEST, "body: must be a JSON object");
        json_decref(root);
        return NULL;
    }
    return root;
}

/* Reads integer field f of obj into *out. Absent: *out = dflt when !required, else an error.
 * Returns 0 or -1 with *err filled. */
static int get_int(const json_t *obj, const struct int_field *f, bool required, int64_t dflt,
                   int64_t *out, struct validate_error *err)
{
    const json_t *v = json_object_get(obj, f->name);
    if (!v) {
        if (!required) {
            *out = dflt;
            return 0;
        }
        fail(err, ERROR_INVALID_REQUEST,
             "%s: is required (an integer between %" PRId64 " and %" PRId64 ")", f->name, f->min,
             f->max);
        return -1;
    }
    if (!json_is_integer(v) || json_integer_value(v) < f->min || json_integer_value(v) > f->max) {
        char got[GOT_MAX + 8];
        render(v, got, sizeof(got));
        fail(err, ERROR_INVALID_REQUEST,
             "%s: must be an integer between %" PRId64 " and %" PRId64 ", got %s", f->name, f->min,
             f->max, got);
        return -1;
    }
    *out = (int64_t)json_integer_value(v);
    return 0;
}

/* Reads string field name of obj into buf (cap bytes) if present and accepted by check.
 * *present tells whether it was there. Returns 0 or -1 with *err filled; rule is the text that
 * describes an acceptable value. */
static int get_string(const json_t *obj, const char *name, bool required,
                      bool (*check)(const char *, size_t), const char *rule, char *buf, size_t cap,
                      bool *present, struct validate_error *err)
{
    const json_t *v = json_object_get(obj, name);
    *present = v != NULL;
    if (!v) {
        if (!required)
            return 0;
        fail(err, ERROR_INVALID_REQUEST, "%s: is required (%s)", name, rule);
        return -1;
    }
    if (!json_is_string(v) || !check(json_string_value(v), json_string_length(v)) ||
        json_string_length(v) >= cap) {
        char got[GOT_MAX + 8];
        render(v, got, sizeof(got));
        fail(err, ERROR_INVALID_REQUEST, "%s: must be %s, got %s", name, rule, got);
        return -1;
    }
    memcpy(buf, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

/* A ticket's text: 1 to TICKET_TEXT_MAX - 1 printable ASCII characters (what it says is
 * ticket_check's to judge, with the SKU's rules). */
static bool ticket_text_ok(const char *s, size_t len)
{
    if (len == 0 || len >= TICKET_TEXT_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return false;
    return true;
}

int validate_order_body(const char *body, size_t len, int64_t max_quantity,
                        struct validate_order *out, struct validate_error *err)
{
    const struct int_field quantity = {"quantity", 1, max_quantity < 1 ? 1 : max_quantity};
    json_t *root = load_object(body, len, &quantity, 1, err);
    if (!root)
        return -1;
    memset(out, 0, sizeof(*out));
    bool present;
    int rc = -1;
    if (json_object_get(root, "items")) {
        /* a cart (SPEC §17): validate_cart_body parses it; one lookup more for a one-SKU body */
        out->is_cart = true;
        json_decref(root);
        return 0;
    }
    if (get_string(root, "sku", true, validate_sku, "a string matching " SKU_RULE, out->sku,
                   sizeof(out->sku), &present, err) ||
        get_int(root, &quantity, false, 1, &out->quantity, err) ||
        get_string(root, "user_id", false, validate_printable,
                   "a string of 1 to 128 printable ASCII characters", out->user_id,
                   sizeof(out->user_id), &out->has_user_id, err) ||
        get_string(root, "ticket", false, ticket_text_ok,
                   "a waiting room's ticket: a string of 1 to 799 printable ASCII characters",
                   out->ticket, sizeof(out->ticket), &out->has_ticket, err))
        goto done;
    rc = 0;
done:
    json_decref(root);
    return rc;
}

/* Prefixes err's message with "items[i]." (the field at fault is the item's). */
static void item_fail(struct validate_error *err, int i)
{
    char m[sizeof(err->message)];
    memcpy(m, err->message, sizeof(m));
    int n = snprintf(err->message, sizeof(err->message), "items[%d].", i);
    if (n > 0 && (size_t)n < sizeof(err->message))
        memcpy(err->message + n, m, sizeof(err->message) - (size_t)n - 1);
    err->message[sizeof(err->message) - 1] = '\0';
}

int validate_cart_body(const char *body, size_t len, int64_t max_quantity,
                       struct validate_cart *out, struct validate_error *err)
{
    const struct int_field quantity = {"quantity", 1, max_quantity < 1 ? 1 : max_quantity};
    json_t *root = load_object(body, len, &quantity, 1, err);
    if (!root)
        return -1;
    memset(out, 0, sizeof(*out));
    int rc = -1;
    bool present;
    const json_t *items = json_object_get(root, "items");
    if (json_object_get(root, "sku")) {
        fail(err, ERROR_ITEMS_AND_SKU,
             "items: an order is either one SKU (sku, quantity) or a cart (items), not both");
        goto done;
    }
    if (!json_is_array(items) || json_array_size(items) < 1 ||
        json_array_size(items) > VALIDATE_CART_MAX) {
        fail(err, ERROR_INVALID_REQUEST, "items: must be an array of 1 to %d items",
             VALIDATE_CART_MAX);
        goto done;
    }
    if (get_string(root, "user_id", false, validate_printable,
                   "a string of 1 to 128 printable ASCII characters", out->user_id,
                   sizeof(out->user_id), &out->has_user_id, err))
        goto done;
    out->n = (int)json_array_size(items);
    for (int i = 0; i < out->n; i++) {
        const json_t *it = json_array_get(items, (size_t)i);
        struct validate_cart_item *ci = &out->items[i];
        if (!json_is_object(it)) {
            fail(err, ERROR_INVALID_REQUEST,
                 "items[%d]: must be an object {\"sku\": ..., \"quantity\": ...}", i);
            goto done;
        }
        if (get_string(it, "sku", true, validate_sku, "a string matching " SKU_RULE, ci->sku,
                       sizeof(ci->sku), &present, err) ||
            get_int(it, &quantity, false, 1, &ci->quantity, err) ||
            get_string(it, "ticket", false, ticket_text_ok,
                       "a waiting room's ticket: a string of 1 to 799 printable ASCII characters",
                       ci->ticket, sizeof(ci->ticket), &ci->has_ticket, err)) {
            item_fail(err, i);
            goto done;
        }
        for (int j = 0; j < i; j++)
            if (strcmp(out->items[j].sku, ci->sku) == 0) {
                fail(err, ERROR_DUPLICATE_SKU, "items[%d].sku: %s is already items[%d]", i, ci->sku,
                     j);
                goto done;
            }
    }
    rc = 0;
done:
    json_decref(root);
    return rc;
}

/* The integer fields a PUT may carry: the SKU's stock and segments, then the INT rows of
 * rules_table.h (a PATCH's: those alone), for the messages of numbers too large for jansson. */
#define RULE_INT_FIELD_(id, json, lo, hi, ...) {json, lo, hi},
#define RULE_NO_FIELD_(...)
static const struct int_field sku_fields[] = {
    {"stock", 0, VALIDATE_STOCK_MAX},
    {"segments", 1, VALIDATE_SEGMENTS_MAX},
    RULES_TABLE(RULE_INT_FIELD_, RULE_NO_FIELD_, RULE_NO_FIELD_)};
#define SKU_NFIELDS (sizeof(sku_fields) / sizeof(sku_fields[0]))

/* Reads time field name of obj, if present, into *ms: an RFC 3339 string, or null (0). Sets
 * bit in *fields when present. 0, or -1 with *err filled. */
static int get_time(const json_t *obj, const char *name, unsigned bit, int64_t *ms,
                    unsigned *fields, struct validate_error *err)
{
    const json_t *v = json_object_get(obj, name);
    if (!v)
        return 0;
    *fields |= bit;
    if (json_is_null(v)) {
        *ms = 0;
        return 0;
    }
    if (json_is_string(v) && rules_parse_time(json_string_value(v), json_string_length(v), ms) == 0)
        return 0;
    char got[GOT_MAX + 8];
    render(v, got, sizeof(got));
    fail(err, ERROR_INVALID_REQUEST,
         "%s: must be an RFC 3339 date-time between 1970-01-01T00:00:00Z (excluded) and "
         "9999-12-31T23:59:59.999Z, such as \"2026-11-25T18:00:00Z\", or null, got %s",
         name, got);
    return -1;
}

/* Reads STR rule i of obj, if present, into r: "" (none) or a name by the SKU name rules.
 * Sets bit in *fields when present. 0, or -1 with *err filled. */
static int get_rule_str(const json_t *obj, int i, struct sku_rules *r, unsigned *fields,
                        struct validate_error *err)
{
    const char *name = rules_rows[i].json;
    const json_t *v = json_object_get(obj, name);
    if (!v)
        return 0;
    *fields |= 1u << i;
    if (json_is_string(v) && rules_str_ok(json_string_value(v), json_string_length(v))) {
        rules_set_str(r, i, json_string_value(v), json_string_length(v));
        return 0;
    }
    char got[GOT_MAX + 8];
    render(v, got, sizeof(got));
    fail(err, ERROR_INVALID_REQUEST,
         "%s: must be \"\" (none) or a string matching " SKU_RULE ", got %s", name, got);
    return -1;
}

/* Reads an optional integer rule field f of obj into *v, setting bit in *fields when present. */
static int get_rule_int(const json_t *obj, const struct int_field *f, unsigned bit, int64_t *v,
                        unsigned *fields, struct validate_error *err)
{
    if (json_object_get(obj, f->name))
        *fields |= bit;
    return get_int(obj, f, false, 0, v, err);
}

/* Reads the rule fields of obj (rules_rows) into *r (0 for those absent), *fields the ones
 * present, and checks that sale_end is after sale_start when both are set. 0, or -1 with *err
 * filled. */
static int get_rules(const json_t *obj, struct sku_rules *r, unsigned *fields,
                     struct validate_error *err)
{
    memset(r, 0, sizeof(*r));
    *fields = 0;
    for (int i = 0; i < RULES_N; i++) {
        const struct rules_row *row = &rules_rows[i];
        int64_t v = 0;
        if (row->kind == RULES_KIND_STR) {
            if (get_rule_str(obj, i, r, fields, err))
                return -1;
            continue;
        }
        if (row->kind == RULES_KIND_TIME) {
            if (get_time(obj, row->json, 1u << i, &v, fields, err))
                return -1;
        } else {
            const struct int_field f = {row->json, row->lo, row->hi};
            if (get_rule_int(obj, &f, 1u << i, &v, fields, err))
                return -1;
        }
        rules_set(r, i, v);
    }
    /* k below 100 % would admit fewer buyers than there are units: the units left over would
     * never be offered (issue 32); 0 means the default, 150 % */
    if (r->queue_admit_pct > 0 && r->queue_admit_pct < 100) {
        fail(err, ERROR_INVALID_REQUEST, "%s: must be 0 (150 %%) or 100..%lld (percent), got %lld",
             rules_rows[RULES_I_queue_admit_pct].json, (long long)RULES_QUEUE_PCT_MAX,
             (long long)r->queue_admit_pct);
        return -1;
    }
    if (r->sale_start_ms && r->sale_end_ms && r->sale_end_ms <= r->sale_start_ms) {
        fail(err, ERROR_INVALID_REQUEST, "%s: must be after %s",
             rules_rows[RULES_I_sale_end_ms].json, rules_rows[RULES_I_sale_start_ms].json);
        return -1;
    }
    return 0;
}

int validate_put_sku_body(const char *body, size_t len, struct validate_put_sku *out,
                          struct validate_error *err)
{
    json_t *root = load_object(body, len, sku_fields, SKU_NFIELDS, err);
    if (!root)
        return -1;
    int rc = -1;
    unsigned fields;
    if (get_int(root, &sku_fields[0], true, 0, &out->stock, err) ||
        get_int(root, &sku_fields[1], true, 0, &out->segments, err) ||
        get_rules(root, &out->rules, &fields, err))
        goto done;
    rc = 0;
done:
    json_decref(root);
    return rc;
}

int validate_patch_rules_body(const char *body, size_t len, struct validate_patch_rules *out,
                              struct validate_error *err)
{
    json_t *root = load_object(body, len, sku_fields + 2, SKU_NFIELDS - 2, err);
    if (!root)
        return -1;
    int rc = get_rules(root, &out->rules, &out->fields, err);
    if (rc == 0 && out->fields == 0) {
        char names[256] = "";
        size_t n = 0;
        for (int i = 0; i < RULES_N && n < sizeof(names); i++)
            n += (size_t)snprintf(names + n, sizeof(names) - n, "%s%s", i ? ", " : "",
                                  rules_rows[i].json);
        fail(err, ERROR_INVALID_REQUEST, "body: must set at least one of %s", names);
        rc = -1;
    }
    json_decref(root);
    return rc;
}

int validate_group_body(const char *body, size_t len, int64_t *limit, struct validate_error *err)
{
    static const struct int_field f = {"limit_per_user", 1, RULES_LIMIT_MAX};
    json_t *root = load_object(body, len, &f, 1, err);
    if (!root)
        return -1;
    int rc = get_int(root, &f, true, 0, limit, err);
    json_decref(root);
    return rc;
}

int validate_restock_body(const char *body, size_t len, struct validate_restock *out,
                          struct validate_error *err)
{
    static const struct int_field quantity = {"quantity", 1, VALIDATE_STOCK_MAX};
    json_t *root = load_object(body, len, &quantity, 1, err);
    if (!root)
        return -1;
    int rc = get_int(root, &quantity, true, 0, &out->quantity, err);
    json_decref(root);
    return rc;
}

int validate_extend_body(const char *body, size_t len, int64_t *seconds, struct validate_error *err)
{
    static const struct int_field secs = {"seconds", 1, RULES_TTL_MAX};
    *seconds = 0;
    if (!body || len == 0)
        return 0;
    json_t *root = load_object(body, len, &secs, 1, err);
    if (!root)
        return -1;
    int rc = get_int(root, &secs, false, 0, seconds, err);
    json_decref(root);
    return rc;
}
