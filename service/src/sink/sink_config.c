/*
 * sink_config — inventory-sink's settings from the table in sink_config.h: defaults, then the
 * JSON config file, then INVENTORY_SINK_* variables, then flags; and the database URL parser.
 */
#include "sink_config.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

enum opt_type { OPT_INT, OPT_STR };

struct sink_opt {
    const char *key;
    const char *flag;
    const char *env;
    enum opt_type type;
    long long def, lo, hi;
    const char *defstr;
    size_t cap;
    size_t offset;
    const char *help;
};

/* clang-format off */
#define ROW_INT(k, f, e, d, l, h, hp) \
    {#k, f, e, OPT_INT, d, l, h, NULL, 0, offsetof(struct sink_config, k), hp},
#define ROW_STR(k, f, e, d, c, hp) \
    {#k, f, e, OPT_STR, 0, 0, 0, d, c, offsetof(struct sink_config, k), hp},
static const struct sink_opt opts[] = {SINK_OPTIONS(ROW_INT, ROW_STR)};
#undef ROW_INT
#undef ROW_STR
/* clang-format on */
#define NOPTS (sizeof opts / sizeof opts[0])

static void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

void sink_config_usage(FILE *f)
{
    fputs("usage: inventory-sink [options]\n"
          "       inventory-sink reconcile --redis URL --db URL --sku S [--repair]\n"
          "Moves the order log (Redis streams inv:2:{S/k}:log) into MySQL/MariaDB; reconcile\n"
          "compares the database with Redis for one SKU (exit 0: equal, 1: differences),\n"
          "the SKU's log streams not yet drained by the sink included; --repair first writes\n"
          "Redis's order records into the database (missing rows added, statuses moved up).\n\n",
          f);
    for (size_t i = 0; i < NOPTS; i++) {
        const struct sink_opt *o = &opts[i];
        if (o->type == OPT_INT)
            fprintf(f, "  %s N  (%s, default %lld, %lld..%lld)\n      %s\n", o->flag, o->env,
                    o->def, o->lo, o->hi, o->help);
        else
            fprintf(f, "  %s V  (%s%s%s)\n      %s\n", o->flag, o->env,
                    o->defstr ? ", default " : "", o->defstr ? o->defstr : "", o->help);
    }
}

/* Sets option o of cfg from text s; origin names where it came from for the error. */
static int set_text(struct sink_config *cfg, const struct sink_opt *o, const char *s,
                    const char *origin, char *err, size_t errlen)
{
    char *base = (char *)cfg + o->offset;
    if (o->type == OPT_INT) {
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (*s == '\0' || *end != '\0' || errno != 0 || v < o->lo || v > o->hi) {
            seterr(err, errlen, "%s: %s must be an integer %lld..%lld, not \"%s\"", origin, o->flag,
                   o->lo, o->hi, s);
            return -1;
        }
        *(int *)(void *)base = (int)v;
        return 0;
    }
    if (strlen(s) >= o->cap) {
        seterr(err, errlen, "%s: %s is longer than %zu bytes", origin, o->flag, o->cap - 1);
        return -1;
    }
    memcpy(base, s, strlen(s) + 1);
    return 0;
}

static const struct sink_opt *find_flag(const char *flag)
{
    for (size_t i = 0; i < NOPTS; i++)
        if (strcmp(opts[i].flag, flag) == 0)
            return &opts[i];
    return NULL;
}

/* Reads the JSON file: an object whose keys are option keys, values strings or integers. */
static int load_file(struct sink_config *cfg, const char *path, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (root == NULL) {
        seterr(err, errlen, "config file %s: %s (line %d)", path, je.text, je.line);
        return -1;
    }
    int rc = 0;
    if (!json_is_object(root)) {
        seterr(err, errlen, "config file %s: not a JSON object", path);
        rc = -1;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (rc != 0)
            break;
        const struct sink_opt *o = NULL;
        for (size_t i = 0; i < NOPTS; i++)
            if (strcmp(opts[i].key, key) == 0 && strcmp(key, "config") != 0)
                o = &opts[i];
        if (o == NULL) {
            seterr(err, errlen, "config file %s: unknown key \"%s\"", path, key);
            rc = -1;
            break;
        }
        char buf[64];
        const char *s;
        if (json_is_string(v))
            s = json_string_value(v);
        else if (json_is_integer(v) && o->type == OPT_INT) {
            snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
            s = buf;
        } else {
            seterr(err, errlen, "config file %s: \"%s\" has the wrong type", path, key);
            rc = -1;
            break;
        }
        char origin[300];
        snprintf(origin, sizeof origin, "config file %s", path);
        rc = set_text(cfg, o, s, origin, err, errlen);
    }
    json_decref(root);
    return rc;
}

static int parse_level(struct sink_config *cfg, char *err, size_t errlen)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (strcmp(cfg->log_level, names[i]) == 0) {
            cfg->level = (enum config_log_level)i;
            return 0;
        }
    seterr(err, errlen, "--log-level must be debug, info, warn or error, not \"%s\"",
           cfg->log_level);
    return -1;
}

int sink_config_load(struct sink_config *cfg, int argc, char **argv, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < NOPTS; i++) {
        const struct sink_opt *o = &opts[i];
        if (o->type == OPT_INT)
            *(int *)(void *)((char *)cfg + o->offset) = (int)o->def;
        else if (o->defstr != NULL)
            set_text(cfg, o, o->defstr, "default", err, errlen);
    }
    int first = 1;
    if (argc > 1 && strcmp(argv[1], "reconcile") == 0) {
        cfg->reconcile = 1;
        first = 2;
    }
    /* The config file's path first (flag, else environment), so the others can override it. */
    const char *path = getenv("INVENTORY_SINK_CONFIG");
    for (int i = first; i + 1 < argc; i++)
        if (strcmp(argv[i], "--config") == 0)
            path = argv[i + 1];
    if (path != NULL && *path != '\0') {
        if (set_text(cfg, find_flag("--config"), path, "--config", err, errlen) != 0 ||
            load_file(cfg, path, err, errlen) != 0)
            return -1;
    }
    for (size_t i = 0; i < NOPTS; i++) {
        const char *v = getenv(opts[i].env);
        if (v != NULL && *v != '\0' && set_text(cfg, &opts[i], v, opts[i].env, err, errlen) != 0)
            return -1;
    }
    for (int i = first; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            sink_config_usage(stdout);
            return 1;
        }
        if (strcmp(argv[i], "--version") == 0) {
            printf("inventory-sink %s\n", INVENTORYD_VERSION);
            return 1;
        }
        if (cfg->reconcile && strcmp(argv[i], "--repair") == 0) {
            cfg->repair = 1; /* a bare flag, reconcile's only */
            continue;
        }
        const struct sink_opt *o = find_flag(argv[i]);
        if (o == NULL) {
            seterr(err, errlen, "unknown argument \"%s\" (see --help)", argv[i]);
            return -1;
        }
        if (i + 1 >= argc) {
            seterr(err, errlen, "%s needs a value", argv[i]);
            return -1;
        }
        if (set_text(cfg, o, argv[i + 1], "command line", err, errlen) != 0)
            return -1;
        i++;
    }
    if (parse_level(cfg, err, errlen) != 0)
        return -1;
    char why[256];
    if (strncmp(cfg->redis, "redis-cluster://", 16) != 0 &&
        !config_redis_url_valid(cfg->redis, why, sizeof why)) {
        seterr(err, errlen, "--redis: %s", why);
        return -1;
    }
    if (cfg->db[0] == '\0') {
        seterr(err, errlen, "--db (or INVENTORY_SINK_DB_URL) is required");
        return -1;
    }
    lc_mysql_url u;
    if (sink_db_url_parse(cfg->db, &u, why, sizeof why) != 0) {
        seterr(err, errlen, "--db: %s", why);
        return -1;
    }
    if (cfg->reconcile && cfg->sku[0] == '\0') {
        seterr(err, errlen, "reconcile needs --sku");
        return -1;
    }
    return 0;
}

int sink_db_url_parse(const char *url, lc_mysql_url *out, char *err, size_t errlen)
{
    return lc_mysql_url_parse(url, out, err, errlen) == LC_OK ? 0 : -1;
}
