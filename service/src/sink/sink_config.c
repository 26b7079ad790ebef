/*
 * sink_config — inventory-sink's settings: the table of sink_config.h given to the settings
 * engine inventoryd uses (config_engine.h: defaults, the JSON config file, INVENTORY_SINK_*
 * variables, flags, --help); around it the `reconcile` subcommand, --repair, and the checks
 * across settings. And the database URL parser.
 */
#include "sink_config.h"

#include <stdarg.h>
#include <string.h>

#include "config_engine.h"

/* clang-format off */
#define ROW_INT(...) CONFIG_KEY_INT(struct sink_config, __VA_ARGS__)
#define ROW_OPT(...) CONFIG_KEY_OPT(struct sink_config, __VA_ARGS__)
static const struct config_row rows[] = {SINK_OPTIONS(ROW_INT, ROW_OPT)};
#undef ROW_INT
#undef ROW_OPT
static const struct config_mode modes[] = {SINK_MODES(CONFIG_MODE_ROW)};
/* clang-format on */
static const struct config_table table = {rows, sizeof rows / sizeof rows[0], modes,
                                          sizeof modes / sizeof modes[0]};
enum { MODE_REPAIR = 0 }; /* the index of --repair in SINK_MODES */

/* Every integer default within its own bounds, checked when compiling. */
#define CHECK_INT(key, flag, env, def, lo, hi, help)                                               \
    _Static_assert((lo) <= (def) && (def) <= (hi), #key ": default outside its bounds");
#define CHECK_NONE(...)
SINK_OPTIONS(CHECK_INT, CHECK_NONE)

static void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static const char usage_head[] =
    "Usage: inventory-sink [OPTION]...\n"
    "       inventory-sink reconcile --redis URL --db URL --sku S [--repair]\n"
    "Moves the order log (Redis streams inv:2:{S/k}:log) into MySQL/MariaDB; reconcile\n"
    "compares the database with Redis for one SKU (exit 0: equal, 1: differences),\n"
    "the SKU's log streams not yet drained by the sink included; --repair first writes\n"
    "Redis's order records into the database (missing rows added, statuses moved up).\n"
    "\n"
    "Options (each also VALUE via --option=VALUE; accepted values, [default]):\n";

static const char usage_footer[] =
    "\n"
    "Every option can also be set by its environment variable INVENTORY_SINK_<NAME>\n"
    "(e.g. INVENTORY_SINK_BATCH; the URLs are INVENTORY_SINK_REDIS_URL and\n"
    "INVENTORY_SINK_DB_URL) or in the config file under its snake_case name\n"
    "(\"claim_idle_ms\"). Precedence: default < config file < environment < option.\n"
    "An invalid value exits with status 2. Documentation: docs/deployment.md.\n";

void sink_config_usage(FILE *f)
{
    static char buf[8192];
    config_table_usage(&table, usage_head, usage_footer, buf, sizeof buf);
    fputs(buf, f);
}

int sink_config_load(struct sink_config *cfg, int argc, char **argv, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    config_table_defaults(&table, cfg);
    if (argc > 1 && strcmp(argv[1], "reconcile") == 0) {
        cfg->reconcile = 1; /* the engine reads argv[1..): the subcommand takes argv[0]'s place */
        argc--;
        argv++;
    }
    enum config_action action;
    unsigned seen;
    int rc = config_table_load(&table, cfg, argc, argv, NULL, &action, &seen, err, errlen);
    if (rc == 1 && action == CONFIG_ACTION_HELP)
        sink_config_usage(stdout);
    else if (rc == 1)
        printf("inventory-sink %s\n", INVENTORYD_VERSION);
    if (rc != 0)
        return rc;
    if (seen >> MODE_REPAIR & 1u) {
        if (!cfg->reconcile) {
            seterr(err, errlen, "\"--repair\": unknown option (reconcile's only; see --help)");
            return -1;
        }
        cfg->repair = 1;
    }
    if (cfg->db[0] == '\0') {
        seterr(err, errlen, "--db (or INVENTORY_SINK_DB_URL) is required");
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
