/*
 * config — loading and validating inventoryd's settings from defaults, a JSON file, the
 * environment and the command line (see config.h for the rules).
 *
 * The engine (config_engine.h) is generic over a table of rows and the struct they fill: the
 * defaults, the layers, --help. inventory-sink's settings (sink_config.h) are such a table;
 * inventoryd's are the rows of config_options.h; keys[] below is built from them, and so are
 * the defaults (config_defaults parses each row's default text as a flag's value), --help
 * (config_usage), the key table (config_key_at) and config_describe. The loader walks the
 * layers in precedence order and applies each value through its row, so a setting is
 * validated identically wherever it comes from, and the error names the key and the layer that
 * supplied it. Integer and 0/1 rows are handled here generically; an OPT row names its kind,
 * config_kind_<name> below: the parser that sets its field and the function that shows it
 * (the kinds both programs use are config_engine.h's).
 */
#include "config.h"
#include "config_engine.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "lockcore/lockcore_mysql.h"

extern char **environ;

#define SET_FN(name)                                                                               \
    static int set_##name(void *cfg, const struct config_row *k, const char *s,                    \
                          const struct config_origin *o, char *err, size_t errlen);
#define SHOW_FN(name) static json_t *show_##name(const void *cfg, const struct config_row *k);
SET_FN(config)
SET_FN(bind)
SET_FN(redis)
SET_FN(redis_url_file)
SET_FN(admin_token)
SET_FN(admin_token_file)
SET_FN(trusted_proxies)
SET_FN(strategy)
SET_FN(lock_redis)
SET_FN(mysql_url)
SET_FN(lock_zookeeper)
SET_FN(log_level)
SET_FN(access_log)
SET_FN(file)
SET_FN(jwt_claim)
SET_FN(user_header)
SHOW_FN(text)
SHOW_FN(path)
SHOW_FN(redis)
SHOW_FN(admin_token)
SHOW_FN(strategy)
SHOW_FN(lock_redis)
SHOW_FN(mysql_url)
SHOW_FN(log_level)
static int config_online_cpus(int lo, int hi);

SET_FN(text)

/* The shared kinds (config_engine.h), then inventoryd's own. */
const struct config_kind config_kind_config = {set_config, show_path, false, NULL};
const struct config_kind config_kind_text = {set_text, show_text, false, NULL};
const struct config_kind config_kind_redis = {set_redis, show_redis, false, NULL};
const struct config_kind config_kind_mysql_url = {set_mysql_url, show_mysql_url, false, NULL};
const struct config_kind config_kind_log_level = {set_log_level, show_log_level, false, NULL};
static const struct config_kind config_kind_bind = {set_bind, show_text, false, NULL};
static const struct config_kind config_kind_redis_url_file = {set_redis_url_file, show_path, false,
                                                              "redis"};
static const struct config_kind config_kind_admin_token = {set_admin_token, show_admin_token, true,
                                                           NULL};
static const struct config_kind config_kind_admin_token_file = {set_admin_token_file, show_path,
                                                                false, "admin_token"};
static const struct config_kind config_kind_trusted_proxies = {set_trusted_proxies, show_text,
                                                               false, NULL};
static const struct config_kind config_kind_strategy = {set_strategy, show_strategy, false, NULL};
static const struct config_kind config_kind_lock_redis = {set_lock_redis, show_lock_redis, false,
                                                          NULL};
static const struct config_kind config_kind_lock_zookeeper = {set_lock_zookeeper, show_text, false,
                                                              NULL};
static const struct config_kind config_kind_access_log = {set_access_log, show_path, false, NULL};
static const struct config_kind config_kind_file = {set_file, show_path, false, NULL};
static const struct config_kind config_kind_jwt_claim = {set_jwt_claim, show_text, false, NULL};
static const struct config_kind config_kind_user_header = {set_user_header, show_text, false, NULL};

/* One row per row of config_options.h. */
#define KEY_INT(...) CONFIG_KEY_INT(struct config, __VA_ARGS__)
#define KEY_INT_AUTO(...) CONFIG_KEY_INT_AUTO(struct config, __VA_ARGS__)
#define KEY_BOOL(...) CONFIG_KEY_BOOL(struct config, __VA_ARGS__)
#define KEY_OPT(...) CONFIG_KEY_OPT(struct config, __VA_ARGS__)

static const struct config_row keys[] = {CONFIG_OPTIONS(KEY_INT, KEY_INT_AUTO, KEY_BOOL, KEY_OPT)};

#define NKEYS (sizeof(keys) / sizeof(keys[0]))

/* Every integer default within its own bounds, checked when compiling. */
#define CHECK_INT(key, flag, env, def, lo, hi, help)                                               \
    _Static_assert((lo) <= (def) && (def) <= (hi), #key ": default outside its bounds");
#define CHECK_BOOL(key, flag, env, def, help)                                                      \
    _Static_assert((def) == 0 || (def) == 1, #key ": default neither 0 nor 1");
#define CHECK_NONE(...)
CONFIG_OPTIONS(CHECK_INT, CHECK_NONE, CHECK_BOOL, CHECK_NONE)

/* The modes (--help, --version, --healthcheck): flags that are no setting. */
static const struct config_mode modes[] = {CONFIG_MODES(CONFIG_MODE_ROW)};
#define NMODES (sizeof(modes) / sizeof(modes[0]))

/* inventoryd's table. */
static const struct config_table table = {keys, NKEYS, modes, NMODES};

static const char version_text[] = "inventoryd " INVENTORYD_VERSION "\n";

const char *config_version(void)
{
    return version_text;
}

size_t config_key_count(void)
{
    return NKEYS;
}

const struct config_key *config_key_at(size_t i)
{
    return i < NKEYS ? &keys[i].pub : NULL;
}

/* The int field of an INT or BOOL row. */
static int *int_field(void *cfg, const struct config_row *k)
{
    return (int *)(void *)((char *)cfg + k->offset);
}

static int int_value(const void *cfg, const struct config_row *k)
{
    return *(const int *)(const void *)((const char *)cfg + k->offset);
}

/* The text field of an OPT row (setting it; text rows only). */
static char *text_field(void *cfg, const struct config_row *k)
{
    return (char *)cfg + k->offset;
}

/* The text field of an OPT row (showing it; text rows only). */
static const char *text_value(const void *cfg, const struct config_row *k)
{
    return (const char *)cfg + k->offset;
}

static const char *const strategy_names[] = {"segmented", "single-lock", "atomic"};
static const char *const level_names[] = {"debug", "info", "warn", "error"};

int config_lock_redis_url(const struct config *cfg, int i, char *buf, size_t len)
{
    const char *p = cfg->lock_redis;
    for (int k = 0; k < i && p; k++) {
        p = strchr(p, ',');
        if (p)
            p++;
    }
    if (!p || i < 0 || i >= cfg->lock_redis_n || len == 0)
        return -1;
    size_t n = strcspn(p, ",");
    if (n >= len)
        return -1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return 0;
}

const char *config_strategy_name(enum config_strategy s)
{
    return (unsigned)s < 3 ? strategy_names[s] : "unknown";
}

const char *config_log_level_name(enum config_log_level l)
{
    return (unsigned)l < 4 ? level_names[l] : "unknown";
}

/* ---- messages ------------------------------------------------------------------------- */

static void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Quotes s for a message: "...", non-printable bytes as \xNN, cut after 40 characters. */
static void quote(const char *s, char *buf, size_t cap)
{
    size_t o = 0;
    buf[o++] = '"';
    for (size_t i = 0; s[i] && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i == 40) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (c < 0x20 || c > 0x7e || c == '"' || c == '\\')
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        else
            buf[o++] = (char)c;
    }
    buf[o++] = '"';
    buf[o] = '\0';
}

/* Renders a JSON value for a message, compact and cut to 40 characters. */
static void render_json(const json_t *v, char *buf, size_t cap)
{
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_ENSURE_ASCII);
    if (!text) {
        snprintf(buf, cap, "(unprintable)");
        return;
    }
    if (strlen(text) > 40)
        snprintf(buf, cap, "%.40s...", text);
    else
        snprintf(buf, cap, "%s", text);
    free(text);
}

/* Edit distance of two short strings (capped inputs), for "did you mean" hints. */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 64;
    size_t prev[64], cur[64];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof(prev));
    }
    return prev[lb];
}

/* The closest known name to s (flag when flags, else config-file key), or NULL if none is
 * near: within 2 edits, or 3 for names of 8 characters or more. */
static const char *closest(const struct config_table *t, const char *s, bool flags)
{
    const char *best = NULL;
    size_t best_d = strlen(s) >= 8 ? 4 : 3;
    for (size_t i = 0; i < t->nrows; i++) {
        const char *cand = flags ? t->rows[i].pub.flag : t->rows[i].pub.name;
        if (!cand)
            continue;
        size_t d = distance(s, cand);
        if (d < best_d) {
            best_d = d;
            best = cand;
        }
    }
    return best;
}

/* ---- value checks ---------------------------------------------------------------------- */

/* Copies s to buf (cap bytes) with every byte outside printable ASCII replaced by '?', so a
 * message stays one printable line whatever a file name or a file holds. */
static void printable_copy(const char *s, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", s);
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
            *p = '?';
}

/* Zeroes a buffer that held a secret in a way the compiler may not drop. */
static void explicit_clear(char *buf, size_t len)
{
    volatile char *p = buf;
    while (len--)
        *p++ = 0;
}

const char *config_read_secret(const char *path, char *buf, size_t cap)
{
    /* Non-blocking and regular files only: a FIFO, a terminal or /dev/stdin named by mistake
     * must not hang the start-up (Docker secrets and systemd credentials are regular files). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return strerror(errno);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return "not a regular file";
    }
    size_t n = 0;
    const char *problem = NULL;
    for (;;) {
        char extra;
        char *dst = n < cap - 1 ? buf + n : &extra;
        size_t want = n < cap - 1 ? cap - 1 - n : 1;
        ssize_t r = read(fd, dst, want);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            problem = strerror(errno);
            break;
        }
        if (r == 0)
            break;
        if (dst == &extra) {
            problem = "the file is too large";
            break;
        }
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    if (!problem && strlen(buf) != n)
        problem = "the file holds a NUL byte";
    while (!problem && n > 0 &&
           (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        buf[--n] = '\0';
    if (!problem && n == 0)
        problem = "the file is empty";
    if (problem)
        explicit_clear(buf, cap);
    return problem;
}

/* Strict decimal integer: optional '-', digits only, nothing else. Values beyond +-10^18
 * saturate (they are out of every range anyway). */
static bool parse_int(const char *s, long long *out)
{
    const char *p = s;
    bool neg = *p == '-';
    if (neg)
        p++;
    if (*p == '\0')
        return false;
    long long v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        v = v < 100000000000000000LL ? v * 10 + (*p - '0') : 1000000000000000000LL;
    }
    *out = neg ? -v : v;
    return true;
}

static bool token_ok(const char *s, size_t len)
{
    if (len == 0 || len > CONFIG_ADMIN_TOKEN_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
            return false;
    return true;
}

static bool bind_ok(const char *s)
{
    unsigned char addr[16];
    return strlen(s) < CONFIG_BIND_MAX &&
           (inet_pton(AF_INET, s, addr) == 1 || inet_pton(AF_INET6, s, addr) == 1);
}

static bool is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Checks a %-encoded URL part s[0..n): valid escapes, no '/', '@' or control characters,
 * decoded length < cap. */
static bool url_part_ok(const char *s, size_t n, size_t cap)
{
    size_t decoded = 0;
    for (size_t i = 0; i < n; i++, decoded++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '%') {
            if (i + 2 >= n)
                return false;
            if (!is_hex(s[i + 1]) || !is_hex(s[i + 2]))
                return false;
            i += 2;
        } else if (c < 0x21 || c > 0x7e || c == '/' || c == '@') {
            return false;
        }
    }
    return decoded < cap;
}

/* Decimal integer s[0..n) in [lo, hi]. */
static bool url_int_ok(const char *s, size_t n, long lo, long hi)
{
    if (n == 0 || n > 9)
        return false;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    return v >= lo && v <= hi;
}

static bool why(char *buf, size_t len, const char *text)
{
    if (buf && len)
        snprintf(buf, len, "%s", text);
    return false;
}

/* host[:port] in p[0..hostend): a name, an IPv4 address or [IPv6], port 1..65535. */
static bool hostport_ok(const char *p, const char *hostend, char *whybuf, size_t whylen)
{
    const char *portsep = NULL;
    if (*p == '[') {
        const char *rb = memchr(p, ']', (size_t)(hostend - p));
        char v6[64];
        unsigned char addr[16];
        if (!rb)
            return why(whybuf, whylen, "unterminated [IPv6] host");
        size_t hl = (size_t)(rb - p - 1);
        if (hl == 0 || hl >= sizeof(v6))
            return why(whybuf, whylen, "bad [IPv6] host");
        memcpy(v6, p + 1, hl);
        v6[hl] = '\0';
        if (inet_pton(AF_INET6, v6, addr) != 1)
            return why(whybuf, whylen, "bad [IPv6] host");
        if (rb + 1 < hostend) {
            if (rb[1] != ':')
                return why(whybuf, whylen, "junk after the [IPv6] host");
            portsep = rb + 1;
        }
    } else {
        portsep = memchr(p, ':', (size_t)(hostend - p));
        const char *he = portsep ? portsep : hostend;
        if (he == p)
            return why(whybuf, whylen, "missing host");
        if (he - p > 255)
            return why(whybuf, whylen, "host longer than 255 characters");
        for (const char *s = p; s < he; s++) {
            char c = *s;
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '-' || c == '_'))
                return why(whybuf, whylen, "bad character in host");
        }
    }
    if (portsep && !url_int_ok(portsep + 1, (size_t)(hostend - portsep - 1), 1, 65535))
        return why(whybuf, whylen, "port must be a number 1..65535");
    return true;
}

/* The seed list of a redis-cluster:// URL in p[0..end): host[:port][,host[:port]...] (at most
 * 16), optionally followed by "/" or "/0" (a cluster has only db 0). */
static bool cluster_nodes_ok(const char *p, const char *end, char *whybuf, size_t whylen)
{
    const char *slash = memchr(p, '/', (size_t)(end - p));
    if (slash) {
        if (!(end - slash == 1 || (end - slash == 2 && slash[1] == '0')))
            return why(whybuf, whylen, "a Redis Cluster has only db 0");
        end = slash;
    }
    int n = 0;
    while (p < end || n == 0) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *he = comma ? comma : end;
        if (++n > 16)
            return why(whybuf, whylen, "at most 16 cluster nodes");
        if (!hostport_ok(p, he, whybuf, whylen))
            return false;
        p = comma ? comma + 1 : end;
        if (comma && p == end)
            return why(whybuf, whylen, "missing host after ','");
    }
    return true;
}

bool config_redis_url_valid(const char *url, char *whybuf, size_t whylen)
{
    if (!url || !*url)
        return why(whybuf, whylen, "empty");
    if (strlen(url) >= CONFIG_REDIS_URL_MAX)
        return why(whybuf, whylen, "longer than 1023 characters");
    for (const char *s = url; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
            return why(whybuf, whylen, "contains a control or non-ASCII character");

    if (strncmp(url, "unix://", 7) == 0) {
        const char *path = url + 7;
        const char *q = strchr(path, '?');
        size_t plen = q ? (size_t)(q - path) : strlen(path);
        if (plen == 0 || path[0] != '/')
            return why(whybuf, whylen, "the unix socket path must be absolute (unix:///path)");
        if (plen > 107)
            return why(whybuf, whylen, "the unix socket path is longer than 107 bytes");
        if (q && (strncmp(q, "?db=", 4) != 0 || !url_int_ok(q + 4, strlen(q + 4), 0, 100000)))
            return why(whybuf, whylen, "only ?db=N (0..100000) may follow the socket path");
        return true;
    }
    if (strncmp(url, "rediss://", 9) == 0)
        return why(whybuf, whylen, "TLS (rediss://) is not supported");
    bool cluster = strncmp(url, "redis-cluster://", 16) == 0;
    if (!cluster && strncmp(url, "redis://", 8) != 0)
        return why(whybuf, whylen, "must start with redis://, redis-cluster:// or unix://");

    const char *p = url + (cluster ? 16 : 8);
    const char *end = p + strlen(p);
    const char *slash = strchr(p, '/');
    const char *at = NULL;
    for (const char *s = p; s < (slash ? slash : end); s++)
        if (*s == '@')
            at = s;
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (!colon)
            return why(whybuf, whylen, "credentials must be written [user]:password@");
        if (!url_part_ok(p, (size_t)(colon - p), 128))
            return why(whybuf, whylen, "bad user name (too long, bad %-escape or character)");
        if (!url_part_ok(colon + 1, (size_t)(at - colon - 1), 256))
            return why(whybuf, whylen, "bad password (too long, bad %-escape or character)");
        p = at + 1;
    }
    if (cluster)
        return cluster_nodes_ok(p, end, whybuf, whylen);
    const char *hostend = slash ? slash : end;
    if (!hostport_ok(p, hostend, whybuf, whylen))
        return false;
    if (slash && slash + 1 < end && !url_int_ok(slash + 1, (size_t)(end - slash - 1), 0, 100000))
        return why(whybuf, whylen, "db must be a number 0..100000");
    return true;
}

/* ---- applying one value ---------------------------------------------------------------- */

/* The key a message names: the row's config-file key ("config" for --config, which has none). */
static const char *key_name(const struct config_row *k)
{
    return k->pub.name ? k->pub.name : "config";
}

/* An INT row from the text s or the JSON value j (exactly one is non-NULL). */
static int set_int(void *cfg, const struct config_row *k, const char *s, const json_t *j,
                   const struct config_origin *o, char *err, size_t errlen)
{
    char got[192];
    long long v = 0;
    bool ok;
    if (j) {
        ok = json_is_integer(j);
        v = ok ? (long long)json_integer_value(j) : 0;
        render_json(j, got, sizeof(got));
    } else {
        ok = parse_int(s, &v);
        quote(s, got, sizeof(got));
    }
    if (!ok || v < k->min || v > k->max) {
        seterr(err, errlen, "%s: must be an integer between %lld and %lld, got %s (%s %s)",
               key_name(k), k->min, k->max, got, o->what, o->name);
        return -1;
    }
    *int_field(cfg, k) = (int)v;
    return 0;
}

/* A BOOL row: "0"/"1" as text; true, false, 0 or 1 in the config file. */
static int set_bool(void *cfg, const struct config_row *k, const char *s, const json_t *j,
                    const struct config_origin *o, char *err, size_t errlen)
{
    char got[192];
    int v = -1;
    if (j) {
        if (json_is_boolean(j))
            v = json_is_true(j) ? 1 : 0;
        else if (json_is_integer(j) && (json_integer_value(j) == 0 || json_integer_value(j) == 1))
            v = (int)json_integer_value(j);
        render_json(j, got, sizeof(got));
    } else {
        if (strcmp(s, "0") == 0 || strcmp(s, "1") == 0)
            v = s[0] - '0';
        quote(s, got, sizeof(got));
    }
    if (v < 0) {
        seterr(err, errlen, "%s: must be 0 or 1 (true or false in the config file), got %s (%s %s)",
               key_name(k), got, o->what, o->name);
        return -1;
    }
    *int_field(cfg, k) = v;
    return 0;
}

/* Sets key k of cfg from the text s (flag, environment or the row's default) or the JSON value
 * j (config file; exactly one of s, j is non-NULL). Returns 0, or -1 with err = "<key>:
 * <problem> (<origin>)". */
static int apply(const struct config_table *t, void *cfg, const struct config_row *k, const char *s,
                 const json_t *j, const struct config_origin *o, char *err, size_t errlen)
{
    if (k->row == CONFIG_INT_ROW)
        return set_int(cfg, k, s, j, o, err, errlen);
    if (k->row == CONFIG_BOOL_ROW)
        return set_bool(cfg, k, s, j, o, err, errlen);
    if (j) {
        if (!json_is_string(j) || strlen(json_string_value(j)) != json_string_length(j)) {
            char got[192];
            render_json(j, got, sizeof(got));
            seterr(err, errlen, "%s: must be a string, got %s (%s %s)", key_name(k),
                   k->kind->secret ? "another type" : got, o->what, o->name);
            return -1;
        }
        s = json_string_value(j);
    }
    if (k->kind->set(cfg, k, s, o, err, errlen))
        return -1;
    /* The value given itself: the file that gave it before (its partner row) is forgotten. */
    for (size_t i = 0; i < t->nrows; i++) {
        const struct config_row *f = &t->rows[i];
        if (k->pub.name && f->row == CONFIG_OPT_ROW && f->kind->partner &&
            strcmp(f->kind->partner, k->pub.name) == 0)
            memset((char *)cfg + f->offset, 0, f->size);
    }
    return 0;
}

/* A file path of 1..CONFIG_PATH_MAX-1 bytes; what adds to the message ("" or " or -"). */
static int path_ok(const struct config_row *k, const char *s, const char *what,
                   const struct config_origin *o, char *err, size_t errlen)
{
    if (*s && strlen(s) < CONFIG_PATH_MAX)
        return 0;
    seterr(err, errlen, "%s: must be a file path of 1..%d bytes%s (%s %s)", key_name(k),
           CONFIG_PATH_MAX - 1, what, o->what, o->name);
    return -1;
}

static int set_config(void *cfg, const struct config_row *k, const char *s,
                      const struct config_origin *o, char *err, size_t errlen)
{
    if (path_ok(k, s, "", o, err, errlen))
        return -1;
    snprintf(text_field(cfg, k), k->size, "%s", s);
    return 0;
}

/* Any text shorter than the field. */
static int set_text(void *cfg, const struct config_row *k, const char *s,
                    const struct config_origin *o, char *err, size_t errlen)
{
    if (strlen(s) >= k->size) {
        seterr(err, errlen, "%s: longer than %zu characters (%s %s)", key_name(k), k->size - 1,
               o->what, o->name);
        return -1;
    }
    snprintf(text_field(cfg, k), k->size, "%s", s);
    return 0;
}

static int set_access_log(void *cfg_, const struct config_row *k, const char *s,
                          const struct config_origin *o, char *err, size_t errlen)
{
    struct config *cfg = cfg_;
    if (path_ok(k, s, " or -", o, err, errlen))
        return -1;
    snprintf(cfg->access_log, sizeof(cfg->access_log), "%s", s);
    return 0;
}

/* A file read at start by the setting's consumer (identity.h: jwt_key_file,
 * confirm_token_file), which refuses the start when it cannot use it; here only the path. */
static int set_file(void *cfg_, const struct config_row *k, const char *s,
                    const struct config_origin *o, char *err, size_t errlen)
{
    struct config *cfg = cfg_;
    if (path_ok(k, s, "", o, err, errlen))
        return -1;
    snprintf(text_field(cfg, k), k->size, "%s", s);
    return 0;
}

/* A claim value a token must carry: 1..CONFIG_JWT_CLAIM_MAX printable ASCII characters. */
static int set_jwt_claim(void *cfg_, const struct config_row *k, const char *s,
                         const struct config_origin *o, char *err, size_t errlen)
{
    struct config *cfg = cfg_;
    size_t n = strlen(s);
    bool ok = n > 0 && n <= CONFIG_JWT_CLAIM_MAX;
    for (size_t i = 0; ok && i < n; i++)
        ok = (unsigned char)s[i] >= 0x20 && (unsigned char)s[i] <= 0x7e;
    if (!ok) {
        char got[192];
        quote(s, got, sizeof(got));
        seterr(err, errlen, "%s: must be 1..%d printable ASCII characters, got %s (%s %s)",
               key_name(k), CONFIG_JWT_CLAIM_MAX, got, o->what, o->name);
        return -1;
    }
    snprintf(text_field(cfg, k), k->size, "%s", s);
    return 0;
}

/* An HTTP header name: 1..CONFIG_USER_HEADER_MAX token characters (RFC 9110 tchar). */
static int set_user_header(void *cfg_, const struct config_row *k, const char *s,
                           const struct config_origin *o, char *err, size_t errlen)
{
    struct config *cfg = cfg_;
    size_t n = strlen(s);
    bool ok = n > 0 && n <= CONFIG_USER_HEADER_MAX;
    for (size_t i = 0; ok && i < n; i++) {
        char c = s[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             (c != '\0' && strchr("!#$%&'*+-.^_`|~", c));
    }
    if (!ok) {
        char got[192];
        quote(s, got, sizeof(got));
        seterr(err, errlen,
               "%s: must be an HTTP header name of 1..%d letters, digits or !#$%%&'*+-.^_`|~, "
               "got %s (%s %s)",
               key_name(k), CONFIG_USER_HEADER_MAX, got, o->what, o->name);
        return -1;
    }
    snprintf(text_field(cfg, k), k->size, "%s", s);
    return 0;
}

static int set_bind(void *cfg_, const struct config_row *k, const char *s,
                    const struct config_origin *o, char *err, size_t errlen)
{
    struct config *cfg = cfg_;
    char got[192];
    if (!bind_ok(s)) {
        quote(s, got, sizeof(got));
        seterr(err, errlen, "%s: must be an IPv4 or IPv6 address literal, got %s (%s %s)",
               key_name(k), got, o->what, o->name);
        return -1;
    }
    snprintf(cfg->bind, sizeof(cfg->bind), "%s", s);
    return 0;
}

static int set_redis(void *cfg, const struct config_row *k, const char *s,
                     const struct config_origin *o, char *err, size_t errlen)
{
    char reason[128];
    if (!config_redis_url_valid(s, reason, sizeof(reason))) {
        /* Not quoted: the URL may carry a password. */
        seterr(err, errlen,
               "%s: invalid URL: %s; expected redis://[[user]:password@]host[:port][/db], "
               "unix:///path or redis-cluster://host:port[,host:port...] (%s %s)",
               key_name(k), reason, o->what, o->name);
        return -1;
    }
    snprintf(text_field(cfg, k), k->size, "%s", s);
    return 0;
}

static int set_admin_token(void *cfg_, const struct config_row *k, const char *s,
                           const struct config_origin *o, char *err, size_t errlen)
{
    struct config *cfg = cfg_;
    if (!token_ok(s, strlen(s))) {
        /* Not quoted: it is a secret. */
        seterr(err, errlen,
               "%s: must be 1 to %d visible ASCII characters (no spaces or control characters) "
               "(%s %s)",
               key_name(k), CONFIG_ADMIN_TOKEN_MAX, o->what, o->name);
        return -1;
    }
    snprintf(cfg->admin_token, sizeof(cfg->admin_token), "%s", s);
    return 0;
}

/* Reads the secret file named by s into secret (cap bytes) for key k; its printable path goes
 * in path (CONFIG_PATH_MAX bytes). Returns 0, or -1 with err set. */
static int secret_file(const struct config_row *k, const char *s, char *path, char *secret,
                       size_t cap, const struct config_origin *o, char *err, size_t errlen)
{
    if (path_ok(k, s, "", o, err, errlen))
        return -1;
    printable_copy(s, path, CONFIG_PATH_MAX);
    const char *problem = config_read_secret(s, secret, cap);
    if (problem) {
        seterr(err, errlen, "%s: cannot read %s: %s (%s %s)", key_name(k), path, problem, o->what,
               o->name);
        return -1;
    }
    return 0;
}

static int set_admin_token_file(void *cfg_, const struct config_row *k, const char *s,
                                const struct config_origin *o, char *err, size_t errlen)
{
    struct config *cfg = cfg_;
    char path[CONFIG_PATH_MAX], secret[CONFIG_REDIS_URL_MAX + 2];
    if (secret_file(k, s, path, secret, sizeof(secret), o, err, errlen))
        return -1;
    /* The contents are a secret: never quoted. */
    int rc = 0;
    if (!token_ok(secret, strlen(secret))) {
        seterr(err, errlen,
               "%s: %s must hold 1 to %d visible ASCII characters (no spaces or control "
               "characters; a trailing newline is allowed) (%s %s)",
               key_name(k), path, CONFIG_ADMIN_TOKEN_MAX, o->what, o->name);
        rc = -1;
    } else {
        snprintf(cfg->admin_token, sizeof(cfg->admin_token), "%s", secret);
        snprintf(cfg->admin_token_file, sizeof(cfg->admin_token_file), "%s", s);
    }
    explicit_clear(secret, sizeof(secret));
    return rc;
}

static int set_redis_url_file(void *cfg_, const struct config_row *k, const char *s,
                              const struct config_origin *o, char *err, size_t errlen)
{
    struct config *cfg = cfg_;
    char path[CONFIG_PATH_MAX], secret[CONFIG_REDIS_URL_MAX + 2], reason[128];
    if (secret_file(k, s, path, secret, sizeof(secret), o, err, errlen))
        return -1;
    int rc = 0;
    if (!config_redis_url_valid(secret, reason, sizeof(reason))) {
        seterr(err, errlen, "%s: %s does not hold a valid Redis URL: %s (%s %s)", key_name(k), path,
               reason, o->what, o->name);
        rc = -1;
    } else {
        /* valid, so shorter than the field */
        snprintf(cfg->redis_url, sizeof(cfg->redis_url), "%.*s", CONFIG_REDIS_URL_MAX - 1, secret);
        snprintf(cfg->redis_url_file, sizeof(cfg->redis_url_file), "%s", s);
    }
    explicit_clear(secret, sizeof(secret));
    return rc;
}

static int set_trusted_proxies(void *cfg_, const struct config_row *k, const char *s,
                               const struct config_origin *o, char *err, size_t errlen)
{
    struct config *cfg = cfg_;
    char reason[128];
    if (strlen(s) >= sizeof(cfg->trusted_proxies_text)) {
        seterr(err, errlen, "%s: longer than %zu characters (%s %s)", key_name(k),
               sizeof(cfg->trusted_proxies_text) - 1, o->what, o->name);
        return -1;
    }
    if (proxy_parse_list(s, &cfg->trusted_proxies, reason, sizeof(reason)) != 0) {
        seterr(err, errlen, "%s: %s (%s %s)", key_name(k), reason, o->what, o->name);
        return -1;
    }
    snprintf(cfg->trusted_proxies_text, sizeof(cfg->trusted_proxies_text), "%s", s);
    return 0;
}

static int set_lock_redis(void *cfg_, const struct config_row *k, const char *s,
                          const struct config_origin *o, char *err, size_t errlen)
{
    struct config *cfg = cfg_;
    /* Not quoted in messages: a URL may carry a password. */
    char reason[128];
    if (strlen(s) >= sizeof(cfg->lock_redis)) {
        seterr(err, errlen, "%s: longer than %zu characters (%s %s)", key_name(k),
               sizeof(cfg->lock_redis) - 1, o->what, o->name);
        return -1;
    }
    int n = 0;
    for (const char *p = s;; n++) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char url[CONFIG_REDIS_URL_MAX];
        if (n >= CONFIG_LOCK_NODES_MAX || len == 0 || len >= sizeof(url)) {
            seterr(err, errlen, "%s: must be 1..%d Redis URLs separated by commas (%s %s)",
                   key_name(k), CONFIG_LOCK_NODES_MAX, o->what, o->name);
            return -1;
        }
        memcpy(url, p, len);
        url[len] = '\0';
        if (!config_redis_url_valid(url, reason, sizeof(reason))) {
            seterr(err, errlen, "%s: URL %d is invalid: %s (%s %s)", key_name(k), n + 1, reason,
                   o->what, o->name);
            return -1;
        }
        if (!end)
            break;
        p = end + 1;
    }
    snprintf(cfg->lock_redis, sizeof(cfg->lock_redis), "%s", s);
    cfg->lock_redis_n = n + 1;
    return 0;
}

static int set_mysql_url(void *cfg, const struct config_row *k, const char *s,
                         const struct config_origin *o, char *err, size_t errlen)
{
    /* Not quoted in messages: the URL carries a password. */
    char reason[128];
    lc_mysql_url u;
    if (strlen(s) >= k->size) {
        seterr(err, errlen, "%s: longer than %zu characters (%s %s)", key_name(k), k->size - 1,
               o->what, o->name);
        return -1;
    }
    if (lc_mysql_url_parse(s, &u, reason, sizeof(reason)) != LC_OK) {
        seterr(err, errlen, "%s: %s (%s %s)", key_name(k), reason, o->what, o->name);
        return -1;
    }
    snprintf(text_field(cfg, k), k->size, "%s", s);
    return 0;
}

/* --lock-zookeeper: HOST:PORT[,HOST:PORT...], 1..CONFIG_LOCK_NODES_MAX servers, each a host
 * without spaces or '/' (no chroot) and a port 1..65535. */
static int set_lock_zookeeper(void *cfg_, const struct config_row *k, const char *s,
                              const struct config_origin *o, char *err, size_t errlen)
{
    struct config *cfg = cfg_;
    if (strlen(s) >= sizeof(cfg->lock_zookeeper)) {
        seterr(err, errlen, "%s: longer than %zu characters (%s %s)", key_name(k),
               sizeof(cfg->lock_zookeeper) - 1, o->what, o->name);
        return -1;
    }
    int n = 0;
    for (const char *p = s;; n++) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *colon = NULL; /* the last ':' (an IPv6 host has others) */
        for (size_t i = 0; i < len; i++)
            colon = p[i] == ':' ? p + i : colon;
        size_t hostlen = colon ? (size_t)(colon - p) : 0;
        char *stop = NULL;
        long port = colon ? strtol(colon + 1, &stop, 10) : 0;
        int ok = n < CONFIG_LOCK_NODES_MAX && hostlen > 0 && colon + 1 < p + len &&
                 stop == p + len && port >= 1 && port <= 65535;
        for (size_t i = 0; ok && i < hostlen; i++)
            ok = p[i] > ' ' && p[i] != '/' && p[i] != 0x7f;
        if (!ok) {
            seterr(err, errlen,
                   "%s: must be 1..%d HOST:PORT separated by commas (server %d is not) (%s %s)",
                   key_name(k), CONFIG_LOCK_NODES_MAX, n + 1, o->what, o->name);
            return -1;
        }
        if (!end)
            break;
        p = end + 1;
    }
    snprintf(cfg->lock_zookeeper, sizeof(cfg->lock_zookeeper), "%s", s);
    return 0;
}

/* The index of s in names[0..n), or -1 with err = "<key>: must be one of <the row's accepted
 * values>, got ...". */
static int choice(const struct config_row *k, const char *const *names, int n, const char *s,
                  const struct config_origin *o, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    char got[192];
    quote(s, got, sizeof(got));
    seterr(err, errlen, "%s: must be one of %s, got %s (%s %s)", key_name(k), k->pub.range, got,
           o->what, o->name);
    return -1;
}

static int set_strategy(void *cfg_, const struct config_row *k, const char *s,
                        const struct config_origin *o, char *err, size_t errlen)
{
    struct config *cfg = cfg_;
    int i = choice(k, strategy_names, 3, s, o, err, errlen);
    if (i >= 0)
        cfg->strategy = (enum config_strategy)i;
    return i < 0 ? -1 : 0;
}

static int set_log_level(void *cfg, const struct config_row *k, const char *s,
                         const struct config_origin *o, char *err, size_t errlen)
{
    int i = choice(k, level_names, 4, s, o, err, errlen);
    if (i >= 0)
        *(enum config_log_level *)(void *)((char *)cfg + k->offset) = (enum config_log_level)i;
    return i < 0 ? -1 : 0;
}

/* ---- defaults -------------------------------------------------------------------------- */

/* threads' default: the online CPUs, clamped to lo..hi. */
static int config_online_cpus(int lo, int hi)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus < lo ? lo : cpus > hi ? hi : (int)cpus;
}

void config_table_defaults(const struct config_table *t, void *out)
{
    for (size_t i = 0; i < t->nrows; i++) {
        const struct config_row *k = &t->rows[i];
        struct config_origin o = {"default of", k->pub.flag};
        if (k->auto_default)
            *int_field(out, k) = k->auto_default((int)k->min, (int)k->max);
        else if (strcmp(k->pub.def, "none") != 0 && apply(t, out, k, k->pub.def, NULL, &o, NULL, 0))
            abort(); /* a row with an invalid default (test_config and test_sink_config say
                        which) */
    }
}

void config_defaults(struct config *out)
{
    memset(out, 0, sizeof(*out));
    config_table_defaults(&table, out);
    out->action = CONFIG_ACTION_RUN;
}

/* ---- layers ---------------------------------------------------------------------------- */

/* The value of environment variable name, or NULL when unset or empty. */
static const char *env_get(char **envp, const char *name)
{
    size_t n = strlen(name);
    for (char **e = envp; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return (*e)[n + 1] ? *e + n + 1 : NULL;
    return NULL;
}

/* jansson's parse error for a message: without the source text it quotes (" near '...'"),
 * which may be part of a secret (an admin token, a Redis password: a raw newline inside the
 * token's string is enough), except for a duplicate key, where that text is the key's name. */
static void json_error_for_message(const json_error_t *je, char *buf, size_t cap)
{
    printable_copy(je->text, buf, cap);
    char *near = strstr(buf, " near ");
    if (near && json_error_code(je) != json_error_duplicate_key)
        *near = '\0';
}

/* The row whose config-file key is name, or NULL. */
static const struct config_row *key_named(const struct config_table *t, const char *name)
{
    for (size_t i = 0; i < t->nrows; i++)
        if (t->rows[i].pub.name && strcmp(t->rows[i].pub.name, name) == 0)
            return &t->rows[i];
    return NULL;
}

/* A setting given both as a value and as a file in one layer is ambiguous: -1 with err set
 * when the environment (root NULL) or the config file root (read from path) holds both. */
static int partner_conflict(const struct config_table *t, char **envp, const json_t *root,
                            const char *path, char *err, size_t errlen)
{
    for (size_t i = 0; i < t->nrows; i++) {
        const struct config_row *b = &t->rows[i], *a;
        if (b->row != CONFIG_OPT_ROW || !b->kind->partner || !(a = key_named(t, b->kind->partner)))
            continue;
        if (!root && env_get(envp, a->pub.env) && env_get(envp, b->pub.env)) {
            seterr(err, errlen, "%s: both %s and %s are set; set one of them (environment)",
                   a->pub.name, a->pub.env, b->pub.env);
            return -1;
        }
        const json_t *va = root ? json_object_get(root, a->pub.name) : NULL;
        const json_t *vb = root ? json_object_get(root, b->pub.name) : NULL;
        if (va && vb && !json_is_null(va) && !json_is_null(vb)) {
            seterr(err, errlen,
                   "%s: both \"%s\" and \"%s\" are set; set one of them (config file %s)",
                   a->pub.name, a->pub.name, b->pub.name, path);
            return -1;
        }
    }
    return 0;
}

/* Applies every key of the JSON object root (the config file read from path). */
static int load_config_object(const struct config_table *t, void *cfg, json_t *root,
                              const char *path, char *err, size_t errlen)
{
    if (!json_is_object(root)) {
        seterr(err, errlen, "config: %s must hold one JSON object", path);
        return -1;
    }
    if (partner_conflict(t, NULL, root, path, err, errlen))
        return -1;
    struct config_origin o = {"config file", path};
    const char *name;
    json_t *value;
    json_object_foreach(root, name, value)
    {
        if (name[0] == '_')
            continue; /* comment */
        const struct config_row *k = key_named(t, name);
        if (!k) {
            char q[192];
            const char *hint = closest(t, name, false);
            quote(name, q, sizeof(q));
            seterr(err, errlen, "%s: unknown key%s%s%s (config file %s)", q,
                   hint ? ", did you mean \"" : "", hint ? hint : "", hint ? "\"?" : "", path);
            return -1;
        }
        if (!json_is_null(value) && apply(t, cfg, k, NULL, value, &o, err, errlen))
            return -1; /* null: not set here */
    }
    return 0;
}

static int load_file(const struct config_table *t, void *cfg, const char *file, char *err,
                     size_t errlen)
{
    char path[CONFIG_PATH_MAX];
    printable_copy(file, path, sizeof(path));
    json_error_t je;
    json_t *root = json_load_file(file, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        char why[JSON_ERROR_TEXT_LENGTH];
        json_error_for_message(&je, why, sizeof(why));
        if (je.line > 0)
            seterr(err, errlen, "config: invalid JSON in %s at line %d, column %d: %s", path,
                   je.line, je.column, why);
        else
            seterr(err, errlen, "config: cannot read %s: %s", path, why);
        return -1;
    }
    int rc = load_config_object(t, cfg, root, path, err, errlen);
    json_decref(root);
    return rc;
}

/* The mode (--help, ...) named by arg[0..n), or NULL. */
static const struct config_mode *mode_named(const struct config_table *t, const char *arg, size_t n)
{
    for (size_t i = 0; i < t->nmodes; i++)
        if ((strlen(t->modes[i].flag) == n && strncmp(t->modes[i].flag, arg, n) == 0) ||
            (t->modes[i].short_flag && strlen(t->modes[i].short_flag) == n &&
             strncmp(t->modes[i].short_flag, arg, n) == 0))
            return &t->modes[i];
    return NULL;
}

/* Parses the option at argv[*i] (advancing *i past its value). Sets *k to its key, or to NULL
 * with *m set for a mode (--help, --version, --healthcheck, ...). Returns 0, or -1 with err
 * set. */
static int next_flag(const struct config_table *t, int argc, char **argv, int *i,
                     const struct config_row **k, const char **value, const struct config_mode **m,
                     char *err, size_t errlen)
{
    const char *arg = argv[*i];
    *k = NULL;
    *value = NULL;
    *m = mode_named(t, arg, strlen(arg));
    if (*m)
        return 0;
    char q[192];
    if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
        quote(arg, q, sizeof(q));
        seterr(err, errlen, "%s: unexpected argument (options start with --; see --help)", q);
        return -1;
    }
    const char *eq = strchr(arg, '=');
    size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
    for (size_t j = 0; j < t->nrows && !*k; j++)
        if (strlen(t->rows[j].pub.flag) == nlen && strncmp(t->rows[j].pub.flag, arg, nlen) == 0)
            *k = &t->rows[j];
    if (!*k) {
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)(nlen < 63 ? nlen : 63), arg);
        const char *hint = closest(t, name, true);
        quote(name, q, sizeof(q));
        if (mode_named(t, name, strlen(name)))
            seterr(err, errlen, "%s: takes no value", name);
        else
            seterr(err, errlen, "%s: unknown option%s%s%s (see --help)", q,
                   hint ? ", did you mean " : "", hint ? hint : "", hint ? "?" : "");
        return -1;
    }
    if (eq) {
        *value = eq + 1;
    } else if ((*k)->row == CONFIG_BOOL_ROW) {
        *value = "1"; /* a bare switch */
    } else if (*i + 1 < argc) {
        *value = argv[++*i];
    } else {
        seterr(err, errlen, "%s: missing value (see --help)", (*k)->pub.flag);
        return -1;
    }
    return 0;
}

/* Pass 1 over argv: syntax only, so --help/--version win wherever they are and --config is
 * known before the file layer. Returns 1 with *action for a mode that ends the load; else 0,
 * or -1 with the first error, with *config_path the --config flag's value (or NULL) and *seen
 * the other modes given (bit i: mode i). */
static int scan_flags(const struct config_table *t, int argc, char **argv, const char **config_path,
                      enum config_action *action, unsigned *seen, char *err, size_t errlen)
{
    bool bad = false;
    for (int i = 1; i < argc; i++) {
        const struct config_row *k;
        const struct config_mode *m;
        const char *value;
        char e[512];
        if (next_flag(t, argc, argv, &i, &k, &value, &m, e, sizeof(e))) {
            if (!bad)
                seterr(err, errlen, "%s", e);
            bad = true;
        } else if (m && (m->action == CONFIG_ACTION_HELP || m->action == CONFIG_ACTION_VERSION)) {
            *action = m->action;
            seterr(err, errlen, "%s", "");
            return 1;
        } else if (m) {
            *seen |= 1u << (m - t->modes);
        } else if (k == &t->rows[0]) {
            *config_path = value;
        }
    }
    return bad ? -1 : 0;
}

int config_table_load(const struct config_table *t, void *out, int argc, char **argv, char **envp,
                      enum config_action *action, unsigned *seen, char *err, size_t errlen)
{
    const struct config_row *config_row = &t->rows[0];
    if (!envp)
        envp = environ;
    seterr(err, errlen, "%s", "");
    *action = CONFIG_ACTION_RUN;
    *seen = 0;
    const char *config_path = NULL;
    int rc = scan_flags(t, argc, argv, &config_path, action, seen, err, errlen);
    if (rc != 0)
        return rc;

    /* Layer 1: the config file. */
    if (config_path) {
        struct config_origin o = {"flag", config_row->pub.flag};
        if (apply(t, out, config_row, config_path, NULL, &o, err, errlen))
            return -1;
    } else if ((config_path = env_get(envp, config_row->pub.env))) {
        struct config_origin o = {"environment", config_row->pub.env};
        if (apply(t, out, config_row, config_path, NULL, &o, err, errlen))
            return -1;
    }
    const char *file = text_value(out, config_row);
    if (file[0] && load_file(t, out, file, err, errlen))
        return -1;

    /* Layer 2: the environment. */
    if (partner_conflict(t, envp, NULL, NULL, err, errlen))
        return -1;
    for (size_t j = 0; j < t->nrows; j++) {
        const char *v = env_get(envp, t->rows[j].pub.env);
        struct config_origin o = {"environment", t->rows[j].pub.env};
        if (&t->rows[j] != config_row && v && apply(t, out, &t->rows[j], v, NULL, &o, err, errlen))
            return -1;
    }

    /* Layer 3: the flags, in order (the last of a repeated flag wins). */
    for (int i = 1; i < argc; i++) {
        const struct config_row *k;
        const struct config_mode *m;
        const char *value;
        if (next_flag(t, argc, argv, &i, &k, &value, &m, err, errlen))
            return -1; /* not reached: pass 1 accepted the syntax */
        if (!k)
            continue; /* a mode */
        struct config_origin o = {"flag", k->pub.flag};
        if (k != config_row && apply(t, out, k, value, NULL, &o, err, errlen))
            return -1;
    }
    return 0;
}

int config_load(struct config *out, int argc, char **argv, char **envp, char *err, size_t errlen)
{
    config_defaults(out);
    enum config_action action;
    unsigned seen;
    int rc = config_table_load(&table, out, argc, argv, envp, &action, &seen, err, errlen);
    if (rc != 0) {
        out->action = rc == 1 ? action : CONFIG_ACTION_RUN;
        return rc;
    }
    if (out->lock_redis_n && out->lock_zookeeper[0]) {
        seterr(err, errlen, "%s",
               "lock_redis and lock_zookeeper: the segment locks live in one place; set one");
        return -1;
    }
    if (out->strategy == STRATEGY_SINGLE_LOCK && config_redis_cluster(out)) {
        seterr(err, errlen,
               "strategy: single-lock needs one Redis (its SKU lock guards keys in "
               "other cluster slots); use segmented or atomic with redis-cluster://");
        return -1;
    }
    if (out->lock_redis_n && out->lock_mysql[0]) {
        seterr(err, errlen,
               "lock_redis and lock_mysql: both are set; the segment locks live in "
               "one place, set one of them");
        return -1;
    }
    if (out->lock_mysql[0] && out->lock_zookeeper[0]) {
        seterr(err, errlen, "%s",
               "lock_mysql and lock_zookeeper: the segment locks live in one place; set one");
        return -1;
    }
    bool healthcheck = false; /* the mode that does not end the load */
    for (size_t i = 0; i < NMODES; i++)
        healthcheck |= (seen >> i & 1u) && modes[i].action == CONFIG_ACTION_HEALTHCHECK;
    out->action = healthcheck ? CONFIG_ACTION_HEALTHCHECK : CONFIG_ACTION_RUN;
    return 0;
}

/* ---- --help ---------------------------------------------------------------------------- */

#define USAGE_WIDTH 79  /* columns of --help */
#define USAGE_INDENT 31 /* where an option's text starts */

struct text {
    char *buf;
    size_t cap, len;
};

static void add(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void add(struct text *t, const char *fmt, ...)
{
    if (t->len >= t->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    t->len += n > 0 ? (size_t)n : 0;
}

/* One option: "  <flags>" then words, wrapped at USAGE_WIDTH with continuation lines indented
 * to USAGE_INDENT (a word longer than a line gets a line of its own). */
static void add_option(struct text *t, const char *flags, const char *words)
{
    add(t, "  %-*s", USAGE_INDENT - 3, flags);
    size_t col = 2 + (strlen(flags) > USAGE_INDENT - 3 ? strlen(flags) : USAGE_INDENT - 3);
    for (const char *w = words; *w;) {
        size_t n = strcspn(w, " ");
        if (col + 1 + n > USAGE_WIDTH && col > USAGE_INDENT) {
            add(t, "\n%*s", USAGE_INDENT - 1, "");
            col = USAGE_INDENT - 1;
        }
        add(t, " %.*s", (int)n, w);
        col += 1 + n;
        w += n;
        w += strspn(w, " ");
    }
    add(t, "\n");
}

static const char usage_head[] =
    "Usage: inventoryd [OPTION]...\n"
    "HTTP flash-sale order service: segmented stock with per-segment distributed locks on Redis.\n"
    "\n"
    "Options (each also VALUE via --option=VALUE; accepted values, [default]):\n";

static const char usage_footer[] =
    "\n"
    "Every option can also be set by its environment variable INVENTORY_<NAME> (e.g.\n"
    "INVENTORY_LOCK_LEASE_MS; the Redis URL is INVENTORY_REDIS_URL) or in the config file\n"
    "under its snake_case name (\"lock_lease_ms\"). Precedence: default < config file <\n"
    "environment < option. An invalid value exits with status 2.\n"
    "\n"
    "Signals: SIGTERM/SIGINT drain and exit 0; SIGHUP re-opens the access log.\n"
    "Manual: man inventoryd (docs/inventoryd.1). Documentation: docs/configuration.md,\n"
    "docs/api.md and docs/openapi.yaml in the source tree, installed under\n"
    "share/doc/inventoryd; GET / of a running instance is its live dashboard.\n";

size_t config_table_usage(const struct config_table *tab, const char *head, const char *footer,
                          char *buf, size_t cap)
{
    struct text t = {buf, cap, 0};
    if (cap == 0)
        return 0;
    buf[0] = '\0';
    add(&t, "%s", head);
    for (size_t i = 0; i < tab->nrows; i++) {
        const struct config_key *k = &tab->rows[i].pub;
        char flags[64], words[512];
        snprintf(flags, sizeof(flags), "%s%s%s", k->flag, k->arg[0] ? " " : "", k->arg);
        snprintf(words, sizeof(words), "%s; %s [%s]", k->help, k->range, k->def);
        add_option(&t, flags, words);
    }
    for (size_t i = 0; i < tab->nmodes; i++) {
        const struct config_mode *m = &tab->modes[i];
        char flags[64];
        snprintf(flags, sizeof(flags), "%s%s%s", m->short_flag ? m->short_flag : "",
                 m->short_flag ? ", " : "", m->flag);
        add_option(&t, flags, m->help);
    }
    add(&t, "%s", footer);
    return t.len < cap ? t.len : cap - 1;
}

const char *config_usage(void)
{
    static char buf[16384];
    if (!buf[0]) /* main's thread only, before any other starts */
        config_table_usage(&table, usage_head, usage_footer, buf, sizeof(buf));
    return buf;
}

/* ---- describe -------------------------------------------------------------------------- */

int config_redis_cluster(const struct config *cfg)
{
    return strncmp(cfg->redis_url, "redis-cluster://", 16) == 0;
}

/* Copies a Redis URL with the password (if any) replaced by ***. */
static void mask_url(const char *url, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", url);
    size_t skip = strncmp(url, "redis://", 8) == 0            ? 8
                  : strncmp(url, "redis-cluster://", 16) == 0 ? 16
                                                              : 0;
    if (!skip)
        return;
    const char *p = url + skip;
    const char *slash = strchr(p, '/');
    const char *hostend = slash ? slash : p + strlen(p);
    const char *at = NULL;
    for (const char *s = p; s < hostend; s++)
        if (*s == '@')
            at = s;
    if (!at)
        return;
    const char *colon = memchr(p, ':', (size_t)(at - p));
    if (!colon)
        return;
    snprintf(buf, cap, "%.*s***%s", (int)(colon + 1 - url), url, at);
}

static json_t *show_text(const void *cfg, const struct config_row *k)
{
    return json_string(text_value(cfg, k));
}

/* A path: null when "", non-printable bytes as '?' (the log line stays valid JSON). */
static json_t *show_path(const void *cfg, const struct config_row *k)
{
    const char *path = text_value(cfg, k);
    if (!path[0])
        return json_null();
    char copy[CONFIG_PATH_MAX];
    printable_copy(path, copy, sizeof(copy));
    return json_string(copy);
}

static json_t *show_redis(const void *cfg, const struct config_row *k)
{
    char url[CONFIG_REDIS_URL_MAX + 8];
    mask_url(text_value(cfg, k), url, sizeof(url));
    return json_string(url);
}

static json_t *show_admin_token(const void *cfg_, const struct config_row *k)
{
    const struct config *cfg = cfg_;
    (void)k;
    return cfg->admin_token[0] ? json_string("***") : json_null();
}

static json_t *show_strategy(const void *cfg_, const struct config_row *k)
{
    const struct config *cfg = cfg_;
    (void)k;
    return json_string(config_strategy_name(cfg->strategy));
}

static json_t *show_log_level(const void *cfg, const struct config_row *k)
{
    return json_string(config_log_level_name(
        *(const enum config_log_level *)(const void *)((const char *)cfg + k->offset)));
}

/* The server and database, never the user or password. */
static json_t *show_mysql_url(const void *cfg, const struct config_row *k)
{
    const char *url = text_value(cfg, k);
    lc_mysql_url u;
    if (!url[0] || lc_mysql_url_parse(url, &u, NULL, 0) != LC_OK)
        return json_null();
    char buf[CONFIG_REDIS_URL_MAX];
    snprintf(buf, sizeof(buf), "mysql://***@%s:%u/%s", u.host, u.port, u.database);
    return json_string(buf);
}

/* How many nodes, never their URLs (passwords). */
static json_t *show_lock_redis(const void *cfg_, const struct config_row *k)
{
    const struct config *cfg = cfg_;
    (void)k;
    return cfg->lock_redis_n ? json_integer(cfg->lock_redis_n) : json_null();
}

int config_describe(const struct config *cfg, char *buf, size_t len)
{
    json_t *o = json_object();
    if (!o)
        return -1;
    int bad = 0;
    for (size_t i = 0; i < NKEYS; i++) {
        const struct config_row *k = &keys[i];
        json_t *v =
            k->row == CONFIG_OPT_ROW ? k->kind->show(cfg, k) : json_integer(int_value(cfg, k));
        bad |= json_object_set_new(o, key_name(k), v);
    }
    if (bad) {
        json_decref(o);
        return -1;
    }
    size_t n = json_dumpb(o, NULL, 0, JSON_COMPACT);
    if (n == 0) {
        json_decref(o);
        return -1;
    }
    if (n < len) {
        json_dumpb(o, buf, len, JSON_COMPACT);
        buf[n] = '\0';
    } else if (len > 0) {
        buf[0] = '\0';
    }
    json_decref(o);
    return (int)n;
}
