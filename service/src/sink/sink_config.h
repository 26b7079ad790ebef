/*
 * sink_config — inventory-sink's settings: one X-macro table of rows of the settings engine
 * both programs share (config_engine.h; the row kinds as inventoryd's config_options.h
 * describes them), from which the fields of struct sink_config, the defaults, the flag /
 * environment / config-file parsing, the validation and --help are all derived.
 *
 *   INT(key, flag, env, def, lo, hi, help)     int field `key`, an integer lo..hi
 *   OPT(name, field, type, dim, flag, arg, env, def, kind, accepted, help)
 *                                              field `type field dim`, set by config_kind_<kind>
 *
 * Precedence (config.h's rules): defaults < the JSON config file (--config /
 * INVENTORY_SINK_CONFIG; keys are the snake_case of the flags, "_" keys are comments) <
 * environment < flags (--flag V or --flag=V). Secrets (the database URL carries a password) are
 * best given through the environment or the file, which ps does not show.
 */
#ifndef INVENTORY_SINK_CONFIG_H
#define INVENTORY_SINK_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "config.h"
#include "lockcore/lockcore_mysql.h"

#define SINK_URL_MAX 1024
#define SINK_NAME_MAX 128

/* clang-format off */
#define SINK_OPTIONS(INT, OPT)                                                                 \
    OPT(NULL, config, char, [CONFIG_PATH_MAX], "--config", "FILE", "INVENTORY_SINK_CONFIG",    \
        "none", config, "path of a readable JSON file",                                        \
        "JSON config file; keys are the snake_case of the flags")                              \
    OPT("redis", redis, char, [SINK_URL_MAX], "--redis", "URL", "INVENTORY_SINK_REDIS_URL",    \
        "redis://127.0.0.1:6379", redis,                                                       \
        "redis://[[user]:password@]host[:port][/db], unix:///path[?db=N] or "                  \
        "redis-cluster://[[user]:password@]host[:port][,host[:port]...]",                      \
        "Redis server URL of the order log (a cluster: its seed nodes)")                       \
    OPT("db", db, char, [SINK_URL_MAX], "--db", "URL", "INVENTORY_SINK_DB_URL", "none",        \
        mysql_url, "mysql://user[:password]@host[:port]/database",                             \
        "the shop's MySQL/MariaDB database (required)")                                        \
    INT(metrics_port, "--metrics-port", "INVENTORY_SINK_METRICS_PORT", 0, 0, 65535,            \
        "port of /metrics and /healthz (0: none)")                                             \
    OPT("consumer", consumer, char, [SINK_NAME_MAX], "--consumer", "NAME",                     \
        "INVENTORY_SINK_CONSUMER", "none", text, "up to 127 characters",                       \
        "consumer name in the group (none: <hostname>-<pid>; keep it across restarts)")        \
    INT(batch, "--batch", "INVENTORY_SINK_BATCH", 500, 1, 10000,                               \
        "entries per database transaction (and per stream read)")                              \
    INT(claim_idle_ms, "--claim-idle-ms", "INVENTORY_SINK_CLAIM_IDLE_MS", 30000, 100,          \
        86400000, "claim (XAUTOCLAIM) another consumer's entries pending longer than this")    \
    INT(maintain_ms, "--maintain-ms", "INVENTORY_SINK_MAINTAIN_MS", 5000, 100, 600000,         \
        "every this often: claim idle entries, trim the streams, measure lag and pending")     \
    INT(redis_timeout_ms, "--redis-timeout-ms", "INVENTORY_SINK_REDIS_TIMEOUT_MS", 2000, 100,  \
        60000, "deadline of every Redis command")                                              \
    INT(db_timeout_s, "--db-timeout-s", "INVENTORY_SINK_DB_TIMEOUT_S", 10, 1, 3600,            \
        "connect, read and write timeout of the database connection")                          \
    OPT("log_level", log_level, enum config_log_level, , "--log-level", "L",                   \
        "INVENTORY_SINK_LOG_LEVEL", "info", log_level, "debug, info, warn, error",             \
        "least severe level logged")                                                           \
    OPT("sku", sku, char, [128], "--sku", "S", "INVENTORY_SINK_SKU", "none", text,             \
        "up to 127 characters", "reconcile: the SKU to compare")

/* The modes: flags that are no setting. --repair is reconcile's only.
 *   MODE(flag, short_flag, action, help) */
#define SINK_MODES(MODE)                                                                       \
    MODE("--repair", NULL, CONFIG_ACTION_RUN,                                                  \
         "reconcile: first write Redis's order records into the database (missing rows "       \
         "added, statuses moved up)")                                                          \
    MODE("--help", "-h", CONFIG_ACTION_HELP, "print this help and exit")                      \
    MODE("--version", NULL, CONFIG_ACTION_VERSION, "print the version and exit")
/* clang-format on */

/* The fields come from the rows (config.h's CONFIG_FIELD_*), in the table's order. */
struct sink_config {
    SINK_OPTIONS(CONFIG_FIELD_INT, CONFIG_FIELD_OPT)
    int reconcile; /* 1: the `reconcile` subcommand */
    int repair;    /* 1: reconcile --repair (backfill the database first) */
};

/* Fills cfg from the defaults, the config file, the environment and argv (argv[1] may be the
 * word "reconcile"). Returns 0 when the sink (or reconcile) should run, 1 when --help or
 * --version was printed (exit 0), -1 on a bad setting (err holds the reason; exit 2). */
int sink_config_load(struct sink_config *cfg, int argc, char **argv, char *err, size_t errlen);

/* Writes the usage text to f. */
void sink_config_usage(FILE *f);

/* Parses a database URL mysql://user[:password]@host[:port]/database (%XX escapes allowed in
 * user and password; port default 3306) with lockcore's parser (lc_mysql_url_parse, the one
 * the MySQL lock backend uses). Returns 0 and fills the fields (NUL-terminated, within their
 * caps), or -1 with the reason in err. */
int sink_db_url_parse(const char *url, lc_mysql_url *out, char *err, size_t errlen);

#endif
