/*
 * config_options — the one table of inventoryd's settings (an X-macro list, as Redis's
 * createIntConfig rows and libuv's UV_ERRNO_MAP are). Each row says once what a setting is
 * called (config-file key, flag, environment variable), its default, its bounds or accepted
 * values and its help line; from these rows config.h declares the fields of struct config and
 * config.c builds the defaults, the flag / environment / config-file parsing, --help, the key
 * table (config_key_at) and the start-up description (config_describe). test_config checks
 * that config/inventoryd.json, docs/configuration.md and docs/inventoryd.1 list exactly these
 * rows with these defaults.
 *
 * Four kinds of row; a user of CONFIG_OPTIONS passes one macro for each:
 *
 *   INT(key, flag, env, def, lo, hi, help)
 *       int field `key`, an integer lo..hi, default def (a literal).
 *   INT_AUTO(key, flag, env, fn, deftext, lo, hi, help)
 *       as INT, but the default is computed at start by fn(lo, hi); deftext says how.
 *   BOOL(key, flag, env, def, help)
 *       int field `key`, 0 or 1 (true/false in the config file); a bare --flag means 1.
 *   OPT(name, field, type, dim, flag, arg, env, def, kind, accepted, help)
 *       a value given as text and set by its own parser, config.c's config_kind_<kind> (URLs,
 *       secrets read from files, enumerations, address lists): field `type field dim`,
 *       config-file key name (a string, NULL for --config, which has none), the flag's value
 *       shown as arg, default def as text ("none": the field stays zero/empty; any other text
 *       is parsed like a flag's value).
 *
 * Adding a setting: one row here, its consumer, and the three documents test_config checks.
 */
#ifndef INVENTORY_CONFIG_OPTIONS_H
#define INVENTORY_CONFIG_OPTIONS_H

/* clang-format off */
#define CONFIG_OPTIONS(INT, INT_AUTO, BOOL, OPT)                                                \
    OPT(NULL, config_path, char, [CONFIG_PATH_MAX], "--config", "FILE", "INVENTORY_CONFIG", \
        "none", config, "path of a readable JSON file",                                        \
        "JSON config file; keys are the snake_case of the flags")                              \
    INT(port, "--port", "INVENTORY_PORT", 8080, 1, 65535, "HTTP port")                         \
    OPT("bind", bind, char, [CONFIG_BIND_MAX], "--bind", "ADDR", "INVENTORY_BIND", "0.0.0.0",  \
        bind, "IPv4 or IPv6 address literal", "listen address")                                \
    OPT("redis", redis_url, char, [CONFIG_REDIS_URL_MAX], "--redis", "URL",                    \
        "INVENTORY_REDIS_URL", "redis://127.0.0.1:6379", redis,                                \
        "redis://[[user]:password@]host[:port][/db], unix:///path[?db=N] or "                  \
        "redis-cluster://[[user]:password@]host[:port][,host[:port]...]",                      \
        "Redis server URL (a cluster: its seed nodes)")                                        \
    OPT("redis_url_file", redis_url_file, char, [CONFIG_PATH_MAX], "--redis-url-file", "FILE", \
        "INVENTORY_REDIS_URL_FILE", "none", redis_url_file,                                    \
        "path of a file holding the Redis URL",                                                \
        "read the Redis URL (and its password) from a file, keeping it out of ps")             \
    OPT("admin_token", admin_token, char, [CONFIG_ADMIN_TOKEN_MAX + 1], "--admin-token", "T",  \
        "INVENTORY_ADMIN_TOKEN", "none", admin_token,                                          \
        "1..256 visible ASCII characters (0x21..0x7e)",                                        \
        "bearer token for admin endpoints; none: admin endpoints closed")                      \
    OPT("admin_token_file", admin_token_file, char, [CONFIG_PATH_MAX], "--admin-token-file",   \
        "FILE", "INVENTORY_ADMIN_TOKEN_FILE", "none", admin_token_file,                        \
        "path of a file holding the token",                                                    \
        "read the admin token from a file, keeping it out of ps")                              \
    BOOL(admin_allow_loopback, "--admin-allow-loopback", "INVENTORY_ADMIN_ALLOW_LOOPBACK", 0,  \
         "development only: without an admin token, admin endpoints accept loopback clients")  \
    OPT("trusted_proxies", trusted_proxies_text, char, [CONFIG_PROXIES_MAX],                   \
        "--trusted-proxies", "CIDRS", "INVENTORY_TRUSTED_PROXIES", "none", trusted_proxies,    \
        "IPv4/IPv6 CIDRs separated by commas or spaces",                                       \
        "proxies whose X-Forwarded-For / X-Real-IP name the client")                           \
    OPT("jwt_key_file", jwt_key_file, char, [CONFIG_PATH_MAX], "--jwt-key-file", "FILE",       \
        "INVENTORY_JWT_KEY_FILE", "none", file,                                                \
        "path of a readable file: an HS256 secret (32 bytes or more) or a PEM public key "     \
        "(RSA of 2048 bits or more: RS256; EC P-256: ES256)",                                  \
        "orders need Authorization: Bearer <JWT> signed with this key; the user is its sub")   \
    OPT("jwt_issuer", jwt_issuer, char, [CONFIG_JWT_CLAIM_MAX + 1], "--jwt-issuer", "ISS",     \
        "INVENTORY_JWT_ISSUER", "none", jwt_claim, "1..256 printable ASCII characters",        \
        "the iss claim every order's token must carry (needs jwt_key_file)")                   \
    OPT("jwt_audience", jwt_audience, char, [CONFIG_JWT_CLAIM_MAX + 1], "--jwt-audience",      \
        "AUD", "INVENTORY_JWT_AUDIENCE", "none", jwt_claim,                                    \
        "1..256 printable ASCII characters",                                                   \
        "a value the aud claim (a string or an array) of every order's token must hold "       \
        "(needs jwt_key_file)")                                                                \
    OPT("user_header", user_header, char, [CONFIG_USER_HEADER_MAX + 1], "--user-header",       \
        "NAME", "INVENTORY_USER_HEADER", "none", user_header,                                  \
        "an HTTP header name of 1..64 token characters (letters, digits, !#$%&'*+-.^_`|~)",    \
        "the header a trusted proxy (trusted_proxies) sets to the order's authenticated "      \
        "user; ignored from other peers")                                                      \
    BOOL(trust_body_user_id, "--trust-body-user-id", "INVENTORY_TRUST_BODY_USER_ID", 0,        \
         "development only: the order body's user_id is the user (any client may claim any "   \
         "user)")                                                                              \
    BOOL(limit_two_step, "--limit-two-step", "INVENTORY_LIMIT_TWO_STEP", 0,                    \
         "on one Redis too, check per-user limits with a reservation before the walk (as on a " \
         "Redis Cluster) rather than inside the order's commit")                               \
    OPT("confirm_token_file", confirm_token_file, char, [CONFIG_PATH_MAX],                     \
        "--confirm-token-file", "FILE", "INVENTORY_CONFIRM_TOKEN_FILE", "none", file,          \
        "path of a readable file holding 1..256 visible ASCII characters",                     \
        "the payment service's bearer token: confirming an order accepts it besides the "      \
        "admin token")                                                                         \
    OPT("queue_key_file", queue_key_file, char, [CONFIG_PATH_MAX], "--queue-key-file", "FILE", \
        "INVENTORY_QUEUE_KEY_FILE", "none", file,                                              \
        "path of a readable file holding a secret of 32 bytes or more (the same file on every " \
        "instance)",                                                                           \
        "the key that signs the waiting room's tickets and proof-of-work challenges; without " \
        "it a SKU with a waiting room admits no one here")                                     \
    INT_AUTO(threads, "--threads", "INVENTORY_THREADS", config_online_cpus,                    \
             "number of online CPUs", 1, 1024, "HTTP worker threads")                          \
    OPT("strategy", strategy, enum config_strategy, , "--strategy", "S", "INVENTORY_STRATEGY", \
        "segmented", strategy, "segmented, single-lock, atomic", "stock locking strategy")     \
    OPT("lock_redis", lock_redis, char, [4096], "--lock-redis", "URLS", "INVENTORY_LOCK_REDIS", \
        "none", lock_redis,                                                                    \
        "1..15 redis:// URLs separated by commas, independent masters (3 or 5 typically)",     \
        "guard segment locks with Redlock on these nodes; stock stays on --redis, fenced")     \
    OPT("lock_mysql", lock_mysql, char, [CONFIG_REDIS_URL_MAX], "--lock-mysql", "URL",         \
        "INVENTORY_LOCK_MYSQL", "none", mysql_url,                                            \
        "mysql://user[:password]@host[:port]/database",                                        \
        "guard segment locks with MySQL/MariaDB GET_LOCK; stock stays on --redis, fenced")     \
    OPT("lock_zookeeper", lock_zookeeper, char, [1024], "--lock-zookeeper", "HOSTS",          \
        "INVENTORY_LOCK_ZOOKEEPER", "none", lock_zookeeper,                                    \
        "HOST:PORT[,HOST:PORT...] of one ZooKeeper ensemble (1..15 servers)",                  \
        "guard segment locks with ZooKeeper (session timeout = --lock-lease-ms); stock stays " \
        "on --redis, fenced")                                                                  \
    INT(lock_lease_ms, "--lock-lease-ms", "INVENTORY_LOCK_LEASE_MS", 10000, 1, 3600000,        \
        "segment lock lease, renewed by the watchdog while held")                              \
    INT(lock_renewal, "--lock-renewal", "INVENTORY_LOCK_RENEWAL", 1, 0, 1,                     \
        "1: the watchdog renews a held lock's lease; 0: a hold longer than the lease is lost") \
    INT(lock_wait_ms, "--lock-wait-ms", "INVENTORY_LOCK_WAIT_MS", 2000, 0, 600000,             \
        "longest an order waits for a segment lock before 503 lock_timeout")                   \
    INT(hold_ms, "--hold-ms", "INVENTORY_HOLD_MS", 0, 0, 60000,                                \
        "simulated business work inside the critical section (benchmarks)")                    \
    INT(busy_hint_max_ms, "--busy-hint-max-ms", "INVENTORY_BUSY_HINT_MAX_MS", 20, 0, 1000,     \
        "longest a worker loop walks past a segment it found locked by another instance; "     \
        "0: no hint")                                                                          \
    BOOL(order_log, "--order-log", "INVENTORY_ORDER_LOG", 0,                                   \
         "append every change of an order to its segment's order log (a Redis stream, "        \
         "read by inventory-sink)")                                                            \
    INT(order_log_cap, "--order-log-cap", "INVENTORY_ORDER_LOG_CAP", 1000000, 1, 1000000000,   \
        "with --order-log: entries a segment's log may hold before new orders are refused "    \
        "(503: the sink is behind)")                                                           \
    INT(order_redis_call_budget, "--order-redis-call-budget",                                  \
        "INVENTORY_ORDER_REDIS_CALL_BUDGET", 256, 16, 100000,                                  \
        "most Redis calls one order may make; past it the order answers 503 unavailable, "     \
        "nothing changed")                                                                     \
    INT(max_quantity, "--max-quantity", "INVENTORY_MAX_QUANTITY", 100, 1, 1000000,             \
        "largest quantity one order may ask for")                                              \
    OPT("log_level", log_level, enum config_log_level, , "--log-level", "L",                   \
        "INVENTORY_LOG_LEVEL", "info", log_level, "debug, info, warn, error",                  \
        "least severe level logged")                                                           \
    INT(max_connections, "--max-connections", "INVENTORY_MAX_CONNECTIONS", 16384, 1, 1000000,  \
        "most concurrent HTTP connections; more are refused")                                  \
    INT(connection_timeout_s, "--connection-timeout-s", "INVENTORY_CONNECTION_TIMEOUT_S", 30,  \
        1, 3600, "idle HTTP connections are closed after this many seconds")                   \
    INT(connection_memory_kib, "--connection-memory-kib", "INVENTORY_CONNECTION_MEMORY_KIB",   \
        24, 2, 1024,                                                                           \
        "memory per HTTP connection for its request head and the answer's headers; "           \
        "heads over 8 KiB or that do not fit get 431")                                         \
    INT(redis_timeout_ms, "--redis-timeout-ms", "INVENTORY_REDIS_TIMEOUT_MS", 1000, 1, 60000,  \
        "Redis connect and command timeout")                                                   \
    INT(redis_replica_acks, "--redis-replica-acks", "INVENTORY_REDIS_REPLICA_ACKS", 0, 0, 16,  \
        "replicas that must have a commit (WAIT) before 201; on a WAIT timeout 503 with "      \
        "outcome unknown")                                                                     \
    INT(sold_out_recheck_ms, "--sold-out-recheck-ms", "INVENTORY_SOLD_OUT_RECHECK_MS", 500, 1, \
        1000, "a cached sold-out state is re-checked within this time, so a restock ends it")  \
    INT(status_refresh_ms, "--status-refresh-ms", "INVENTORY_STATUS_REFRESH_MS", 250, 0, 250,  \
        "GET /api/v1/skus/{sku} answers from a snapshot read from Redis at most this often "   \
        "per SKU (SPEC 15); 0: every read goes to Redis")                                      \
    INT(max_subscribers, "--max-subscribers", "INVENTORY_MAX_SUBSCRIBERS", 10000, 1, 1000000, \
        "most open status event streams (GET /api/v1/skus/{sku}/events); more get 503 with "  \
        "Retry-After")                                                                         \
    INT(events_heartbeat_s, "--events-heartbeat-s", "INVENTORY_EVENTS_HEARTBEAT_S", 15, 1,     \
        300, "seconds between the heartbeat comments of a status event stream")               \
    INT(shutdown_grace_ms, "--shutdown-grace-ms", "INVENTORY_SHUTDOWN_GRACE_MS", 5000, 0,      \
        600000, "on SIGTERM/SIGINT, longest wait for in-flight requests to finish")            \
    INT(rate_limit_rps, "--rate-limit-rps", "INVENTORY_RATE_LIMIT_RPS", 0, 0, 1000000,         \
        "requests per second per client IP before 429 rate_limited; 0: no limit")              \
    INT(rate_limit_burst, "--rate-limit-burst", "INVENTORY_RATE_LIMIT_BURST", 0, 0, 1000000,   \
        "requests a client IP may send at once above the rate; 0: rate_limit_rps")             \
    INT(user_rps, "--user-rps", "INVENTORY_USER_RPS", 0, 0, 1000000,                          \
        "requests per second per verified user on the waiting room's routes and on orders of " \
        "SKUs with one, counted across every instance (in Redis); 0: no limit")                \
    INT(max_connections_per_ip, "--max-connections-per-ip",                                    \
        "INVENTORY_MAX_CONNECTIONS_PER_IP", 0, 0, 1000000,                                     \
        "most concurrent HTTP connections of one client IP; 0: no limit")                      \
    OPT("access_log", access_log, char, [CONFIG_PATH_MAX], "--access-log", "FILE",             \
        "INVENTORY_ACCESS_LOG", "none", access_log,                                            \
        "a file path (appended to) or - (stdout)",                                             \
        "HTTP access log, one JSON object per request")

/* The modes: flags that are not settings (no value, no environment variable, no file key).
 *   MODE(flag, short_flag, action, help)      short_flag may be NULL */
#define CONFIG_MODES(MODE)                                                                     \
    MODE("--healthcheck", NULL, CONFIG_ACTION_HEALTHCHECK,                                     \
         "GET /healthz of the server this configuration describes; exit 0 when it answers "    \
         "200, else 1 (container HEALTHCHECK)")                                                \
    MODE("--help", "-h", CONFIG_ACTION_HELP, "print this help and exit")                      \
    MODE("--version", "-V", CONFIG_ACTION_VERSION, "print the version and exit")
/* clang-format on */

#endif
