/*
 * config — every inventoryd setting (SPEC §4 plus the service keys below), loaded in layers:
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

#include "proxy.h"

#ifndef INVENTORYD_VERSION
#define INVENTORYD_VERSION "0.0.0" /* CMake defines the real one from project(VERSION) */
#endif

#define CONFIG_PATH_MAX 4096
#define CONFIG_BIND_MAX 64
#define CONFIG_REDIS_URL_MAX 1024
#define CONFIG_ADMIN_TOKEN_MAX 256
#define CONFIG_PROXIES_MAX 1024 /* text of trusted_proxies */
#define CONFIG_LOCK_NODES_MAX 15 /* Redlock nodes of lock_redis */

enum config_strategy {
    STRATEGY_SEGMENTED,   /* "segmented": N segments, one lock each (the product) */
    STRATEGY_SINGLE_LOCK, /* "single-lock": one lock per SKU (the baseline) */
    STRATEGY_ATOMIC       /* "atomic": lock-free Lua decrement (the ceiling) */
};

/* Ordered by severity: a message at level L is logged when L >= config.log_level. */
enum config_log_level { CONFIG_LOG_DEBUG, CONFIG_LOG_INFO, CONFIG_LOG_WARN, CONFIG_LOG_ERROR };

/* What config_load() asks the caller to do when it returns 1. */
enum config_action {
    CONFIG_ACTION_RUN = 0,  /* start the service (config_load returned 0) */
    CONFIG_ACTION_HELP,     /* print config_usage() on stdout, exit 0 */
    CONFIG_ACTION_VERSION,  /* print config_version() on stdout, exit 0 */
    CONFIG_ACTION_HEALTHCHECK /* --healthcheck: GET /healthz of the configured server, exit 0
                                 when it answers 200, else 1 (config_load returned 0) */
};

struct config {
    char config_path[CONFIG_PATH_MAX];  /* the config file read; "" when none */
    int port;                           /* 1..65535, default 8080 */
    char bind[CONFIG_BIND_MAX];         /* IPv4/IPv6 literal, default "0.0.0.0" */
    char redis_url[CONFIG_REDIS_URL_MAX]; /* default "redis://127.0.0.1:6379" */
    char admin_token[CONFIG_ADMIN_TOKEN_MAX + 1]; /* "" = none: admin endpoints closed
                                                     (unless admin_allow_loopback) */
    char admin_token_file[CONFIG_PATH_MAX]; /* where admin_token was read from; "" = not a file */
    char redis_url_file[CONFIG_PATH_MAX];   /* where redis_url was read from; "" = not a file */
    int admin_allow_loopback;           /* 0..1, default 0: 1 = without an admin token, admin
                                           endpoints accept loopback clients (development) */
    char trusted_proxies_text[CONFIG_PROXIES_MAX]; /* as given, "" = none */
    struct proxy_list trusted_proxies;  /* parsed: peers whose X-Forwarded-For is believed */
    int threads;                        /* 1..1024, default the number of online CPUs */
    enum config_strategy strategy;      /* default STRATEGY_SEGMENTED */
    char lock_redis[4096];              /* Redlock's node URLs, comma-separated; "" = none: the
                                           segment locks live on redis_url */
    int lock_redis_n;                   /* how many URLs lock_redis holds (0 = none) */
    int lock_lease_ms;                  /* 1..3600000, default 10000 */
    int lock_renewal;                   /* 0..1, default 1: the watchdog renews held leases;
                                           0: a hold ends when its lease does (fault tests) */
    int lock_wait_ms;                   /* 0..600000, default 2000 */
    int hold_ms;                        /* 0..60000, default 0 */
    int busy_hint_max_ms;               /* 0..1000, default 20; 0: no busy-elsewhere hint */
    int order_redis_call_budget;        /* 16..100000, default 256: Redis calls per order */
    int max_quantity;                   /* 1..1000000, default 100 */
    enum config_log_level log_level;    /* default CONFIG_LOG_INFO */
    int max_connections;                /* 1..1000000, default 4096 */
    int connection_timeout_s;           /* idle HTTP connection timeout, 1..3600, default 30 */
    int connection_memory_kib;          /* libmicrohttpd's pool per connection, 2..1024, default 4 */
    int redis_timeout_ms;               /* connect/command timeout, 1..60000, default 1000 */
    int redis_replica_acks;             /* 0..16, default 0: replicas that must have a commit
                                           (WAIT after it, on the same master) before 201 */
    int sold_out_recheck_ms;            /* 1..1000, default 500: a cached sold-out state is
                                           re-checked (so a restock ends it) within this bound */
    int shutdown_grace_ms;              /* 0..600000, default 5000: in-flight drain on SIGTERM */
    int rate_limit_rps;                 /* 0..1000000, default 0 (off): token-bucket rate per
                                           client IP; over it, 429 rate_limited */
    int rate_limit_burst;               /* 0..1000000, default 0: the bucket size; 0 means
                                           rate_limit_rps */
    int max_connections_per_ip;         /* 0..1000000, default 0 (off): concurrent connections
                                           per client IP (more are closed at once) */
    char access_log[CONFIG_PATH_MAX];   /* JSON access log: a path, "-" (stdout) or "" (none) */
    enum config_action action;          /* set by config_load() */
};

/* Description of one setting, for help and documentation checks. Every field is a static
 * string; name is NULL for --config (it has no config-file key). */
struct config_key {
    const char *name;      /* config-file key, e.g. "lock_lease_ms" */
    const char *flag;      /* e.g. "--lock-lease-ms" */
    const char *env;       /* e.g. "INVENTORY_LOCK_LEASE_MS" */
    const char *def;       /* the default, as text */
    const char *range;     /* the accepted values, as text */
    const char *help;      /* one line */
};

/* Fills *out with the built-in defaults (threads = online CPUs clamped to 1..1024). */
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
int config_load(struct config *out, int argc, char **argv, char **envp, char *err,
                size_t errlen);

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

/* Names of enum values as used on the command line: "segmented", "single-lock", "atomic";
 * "debug", "info", "warn", "error". Static strings; "unknown" for values outside the enum. */
/* Copies the i-th (0-based) URL of cfg->lock_redis into buf: 0, or -1 when there is no such URL
 * or it does not fit. */
int config_lock_redis_url(const struct config *cfg, int i, char *buf, size_t len);

const char *config_strategy_name(enum config_strategy s);
const char *config_log_level_name(enum config_log_level l);

/* Syntactic check of a Redis URL: redis://[[user]:password@]host[:port][/db] or
 * unix:///path[?db=N] (the forms lockcore accepts; user and password may be %-encoded, an IPv6
 * host goes in brackets, db is 0..100000). Returns true when valid; otherwise false and, when
 * why is non-NULL, a short reason in why (never quoting the URL, which may hold a password). */
bool config_redis_url_valid(const char *url, char *why, size_t whylen);

/* The table of settings: config_key_count() entries, config_key_at(i) for i below that
 * (NULL past the end). The first entry is --config. Static data. */
size_t config_key_count(void);
const struct config_key *config_key_at(size_t i);

#endif
