/*
 * config — every inventoryd setting (SPEC §4 plus the service keys; the rows of
 * config_options.h), loaded in layers:
 *
 *     built-in default  <  JSON config file  <  INVENTORY_* environment  <  --flags
 *
 * Each layer overrides the ones before it; every value is validated where it is read, so an
 * invalid value anywhere (even one a later layer overrides) is an error. The config file is one
 * JSON object whose keys are the snake_case of the flags (--lock-lease-ms -> "lock_lease_ms");
 * keys starting with '_' are comments and are ignored, a null value means "not set here", any
 * other unknown key is an error. An empty environment variable counts as unset. Flags take their
 * value as "--port 8080" or "--port=8080". docs/configuration.md lists every key.
 *
 * No allocation survives a call: struct config is plain data (fixed-size strings), copy it at
 * will. Not thread-safe while loading (reads the environment); load once at startup.
 */
#ifndef INVENTORY_CONFIG_H
#define INVENTORY_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

/* The most sold_out_recheck_ms may be (the upper bound of its row in config_options.h, which
 * test_config checks against this): how far behind a rule change an instance's cached rules may
 * be, whatever its configuration (stock.c's wait before answering a change that may end a
 * refusal made from the cache). */
#define CONFIG_RECHECK_MAX_MS 1000
#include "config_options.h"
#include "proxy.h"

#ifndef INVENTORYD_VERSION
#define INVENTORYD_VERSION "0.0.0" /* CMake defines the real one from project(VERSION) */
#endif

#define CONFIG_PATH_MAX 4096
#define CONFIG_BIND_MAX 64
#define CONFIG_REDIS_URL_MAX 1024
#define CONFIG_ADMIN_TOKEN_MAX 256
#define CONFIG_PROXIES_MAX 1024  /* text of trusted_proxies */
#define CONFIG_LOCK_NODES_MAX 15 /* Redlock nodes of lock_redis */
#define CONFIG_JWT_CLAIM_MAX 256 /* jwt_issuer, jwt_audience */
#define CONFIG_USER_HEADER_MAX 64

enum config_strategy {
    STRATEGY_SEGMENTED,   /* "segmented": N segments, one lock each (the product) */
    STRATEGY_SINGLE_LOCK, /* "single-lock": one lock per SKU (the baseline) */
    STRATEGY_ATOMIC       /* "atomic": lock-free Lua decrement (the ceiling) */
};

/* Ordered by severity: a message at level L is logged when L >= config.log_level. */
enum config_log_level { CONFIG_LOG_DEBUG, CONFIG_LOG_INFO, CONFIG_LOG_WARN, CONFIG_LOG_ERROR };

/* What config_load() asks the caller to do when it returns 1. */
enum config_action {
    CONFIG_ACTION_RUN = 0,    /* start the service (config_load returned 0) */
    CONFIG_ACTION_HELP,       /* print config_usage() on stdout, exit 0 */
    CONFIG_ACTION_VERSION,    /* print config_version() on stdout, exit 0 */
    CONFIG_ACTION_HEALTHCHECK /* --healthcheck: GET /healthz of the configured server, exit 0
                                 when it answers 200, else 1 (config_load returned 0) */
};

/* The fields of the settings come from the rows of config_options.h (an INT row's field is its
 * key, an OPT row names its field), in the table's order; what each means, its bounds and its
 * default are said there once. After them, what config_load derives. */
#define CONFIG_FIELD_INT(key, ...) int key;
#define CONFIG_FIELD_OPT(name, field, type, dim, ...) type field dim;
struct config {
    CONFIG_OPTIONS(CONFIG_FIELD_INT, CONFIG_FIELD_INT, CONFIG_FIELD_INT, CONFIG_FIELD_OPT)
    struct proxy_list trusted_proxies; /* trusted_proxies_text parsed: peers whose
                                          X-Forwarded-For is believed */
    int lock_redis_n;                  /* how many URLs lock_redis holds (0 = none) */
    enum config_action action;         /* set by config_load() */
};

/* Description of one setting, for help and documentation checks. Every field is a static
 * string; name is NULL for --config (it has no config-file key). */
struct config_key {
    const char *name;  /* config-file key, e.g. "lock_lease_ms" */
    const char *flag;  /* e.g. "--lock-lease-ms" */
    const char *arg;   /* its value in --help and the docs, e.g. "N"; "" for a switch */
    const char *env;   /* e.g. "INVENTORY_LOCK_LEASE_MS" */
    const char *def;   /* the default, as text ("none": not set) */
    const char *range; /* the accepted values, as text ("lo..hi" for an integer) */
    const char *help;  /* one line */
};

/* Fills *out with the built-in defaults: each row's default of config_options.h (threads:
 * the online CPUs clamped to 1..1024). */
void config_defaults(struct config *out);

/* Loads the configuration: defaults, then the config file named by --config or
 * INVENTORY_CONFIG (if any), then the environment, then argv[1..argc). envp is a
 * NULL-terminated "NAME=value" array, or NULL to use the process environment.
 * Returns:
 *   0  *out is ready to run with (out->action == CONFIG_ACTION_RUN);
 *      With --healthcheck, out->action is CONFIG_ACTION_HEALTHCHECK (the configuration is
 *      loaded as for a run, to know the port and address to probe);
 *   1  --help/-h or --version/-V was given: *out holds defaults and out->action says which
 *      text to print on stdout (config_usage() or config_version()); then exit 0. These win
 *      over any other argument, valid or not;
 *  -1  an invalid value, unknown key or flag, or unreadable config file: err holds ONE message
 *      "<key>: <what is wrong> (<where it came from>)"; the caller prints it and exits 2.
 *      *out is unspecified.
 * err may be NULL when errlen is 0. argv strings are only read. */
int config_load(struct config *out, int argc, char **argv, char **envp, char *err, size_t errlen);

/* The --help text (static, ends with a newline). */
const char *config_usage(void);

/* The --version text, "inventoryd <version>\n" (static). */
const char *config_version(void);

/* Writes the effective configuration as one compact JSON object with the config-file key names
 * (plus "config": the file read, or null) into buf, NUL-terminated. The admin token is shown as
 * "***" (null when unset) and a password in the Redis URL as "***".
 * Returns the length of the JSON text (like snprintf). When that is >= len, buf holds "" (never
 * a truncated object); -1 when out of memory. */
int config_describe(const struct config *cfg, char *buf, size_t len);

/* Copies the i-th (0-based) URL of cfg->lock_redis into buf: 0, or -1 when there is no such URL
 * or it does not fit. */
int config_lock_redis_url(const struct config *cfg, int i, char *buf, size_t len);

/* Names of enum values as used on the command line: "segmented", "single-lock", "atomic";
 * "debug", "info", "warn", "error". Static strings; "unknown" for values outside the enum. */
const char *config_strategy_name(enum config_strategy s);
const char *config_log_level_name(enum config_log_level l);

/* Syntactic check of a Redis URL: redis://[[user]:password@]host[:port][/db] or
 * unix:///path[?db=N] (the forms lockcore accepts; user and password may be %-encoded, an IPv6
 * host goes in brackets, db is 0..100000). Returns true when valid; otherwise false and, when
 * why is non-NULL, a short reason in why (never quoting the URL, which may hold a password). */
bool config_redis_url_valid(const char *url, char *why, size_t whylen);

/* 1 when the stock lives on a Redis Cluster (redis_url is redis-cluster://): keys of different
 * slots are then never in one script. */
int config_redis_cluster(const struct config *cfg);

/* Reads the secret file at path into buf (cap >= 2 bytes, NUL-terminated), without the trailing
 * newline, carriage return or blanks an editor or `echo` leaves; regular files only, opened
 * without blocking (a FIFO named by mistake does not hang the start). Returns NULL, or a short
 * reason (static text, never the contents: a file too large for buf, holding a NUL byte, or
 * empty). buf is zeroed on failure. */
const char *config_read_secret(const char *path, char *buf, size_t cap);

/* The table of settings, the rows of config_options.h in order: config_key_count() entries,
 * config_key_at(i) for i below that (NULL past the end). The first entry is --config. Static
 * data. */
size_t config_key_count(void);
const struct config_key *config_key_at(size_t i);

#endif
