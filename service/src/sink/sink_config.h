/*
 * sink_config — inventory-sink's settings: one X-macro table (as inventoryd's
 * config_options.h), from which the fields of struct sink_config, the defaults, the flag /
 * environment / config-file parsing and --help are all derived.
 *
 *   INT(key, flag, env, def, lo, hi, help)    int field `key`, an integer lo..hi
 *   STR(key, flag, env, def, cap, help)       char field `key[cap]`; def NULL: empty
 *
 * Precedence: defaults < the JSON config file (--config / INVENTORY_SINK_CONFIG; keys are the
 * snake_case of the flags) < environment < flags. Secrets (the database URL carries a password)
 * are best given through the environment or the file, which ps does not show.
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
#define SINK_OPTIONS(INT, STR)                                                                 \
    STR(config, "--config", "INVENTORY_SINK_CONFIG", NULL, 4096,                               \
        "JSON config file; keys are the snake_case of the flags")                              \
    STR(redis, "--redis", "INVENTORY_SINK_REDIS_URL", "redis://127.0.0.1:6379", SINK_URL_MAX,  \
        "Redis URL: redis://[[user]:password@]host[:port][/db], unix:///path or "              \
        "redis-cluster://host:port[,host:port...]")                                            \
    STR(db, "--db", "INVENTORY_SINK_DB_URL", NULL, SINK_URL_MAX,                               \
        "database URL: mysql://user:password@host[:port]/database (required)")                 \
    INT(metrics_port, "--metrics-port", "INVENTORY_SINK_METRICS_PORT", 0, 0, 65535,            \
        "port of /metrics and /healthz (0: none)")                                             \
    STR(consumer, "--consumer", "INVENTORY_SINK_CONSUMER", NULL, SINK_NAME_MAX,                \
        "consumer name in the group (default: <hostname>-<pid>; keep it across restarts)")     \
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
    STR(log_level, "--log-level", "INVENTORY_SINK_LOG_LEVEL", "info", 16,                      \
        "debug, info, warn or error")                                                          \
    STR(sku, "--sku", "INVENTORY_SINK_SKU", NULL, 128, "reconcile: the SKU to compare")
/* clang-format on */

struct sink_config {
#define SINK_FIELD_INT(key, flag, env, def, lo, hi, help) int key;
#define SINK_FIELD_STR(key, flag, env, def, cap, help) char key[cap];
    SINK_OPTIONS(SINK_FIELD_INT, SINK_FIELD_STR)
#undef SINK_FIELD_INT
#undef SINK_FIELD_STR
    int reconcile;               /* 1: the `reconcile` subcommand */
    int repair;                  /* 1: reconcile --repair (backfill the database first) */
    enum config_log_level level; /* log_level parsed */
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
