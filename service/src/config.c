/*
 * config — loading and validating inventoryd's settings from defaults, a JSON file, the
 * environment and the command line (see config.h for the rules).
 *
 * One table (keys[] below) describes every setting: its config-file key, flag, environment
 * variable, default, range and how to parse it. The loader walks the layers in precedence order
 * and applies each value through the same table entry, so a setting is validated identically
 * wherever it comes from, and the error names the key and the layer that supplied it.
 */
#include "config.h"

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

extern char **environ;

enum kind {
    K_CONFIG,
    K_INT,
    K_BIND,
    K_REDIS,
    K_TOKEN,
    K_STRATEGY,
    K_LOG_LEVEL,
    K_TOKEN_FILE, /* a file holding the admin token */
    K_REDIS_FILE, /* a file holding the Redis URL */
    K_BOOL,       /* 0/1; as a flag, bare "--name" means 1 */
    K_CIDRS,      /* trusted_proxies */
    K_ACCESS_LOG, /* a file path or "-" */
    K_LOCK_REDIS  /* Redis URLs separated by commas: Redlock's nodes */
};

struct keydef {
    struct config_key pub;
    enum kind kind;
    long long min, max; /* K_INT */
    size_t offset;      /* K_INT: offset of the int field in struct config */
};

#define INT_KEY(field, flag, env, def, lo, hi, help)                                       \
    {{#field, flag, env, #def, #lo ".." #hi, help}, K_INT, lo, hi, offsetof(struct config, field)}

static const struct keydef keys[] = {
    {{NULL, "--config", "INVENTORY_CONFIG", "none", "path of a JSON file",
      "JSON config file; keys are the snake_case of the flags"},
     K_CONFIG, 0, 0, 0},
    INT_KEY(port, "--port", "INVENTORY_PORT", 8080, 1, 65535, "HTTP port"),
    {{"bind", "--bind", "INVENTORY_BIND", "0.0.0.0", "IPv4 or IPv6 address literal",
      "listen address"},
     K_BIND, 0, 0, 0},
    {{"redis", "--redis", "INVENTORY_REDIS_URL", "redis://127.0.0.1:6379",
      "redis://[[user]:password@]host[:port][/db], unix:///path[?db=N] or "
      "redis-cluster://[[user]:password@]host[:port][,host[:port]...]",
      "Redis server URL (a cluster: its seed nodes)"},
     K_REDIS, 0, 0, 0},
    {{"redis_url_file", "--redis-url-file", "INVENTORY_REDIS_URL_FILE", "none",
      "path of a file holding the Redis URL", "read the Redis URL (and its password) from a file"},
     K_REDIS_FILE, 0, 0, 0},
    {{"admin_token", "--admin-token", "INVENTORY_ADMIN_TOKEN", "none",
      "1..256 visible ASCII characters (0x21..0x7e)",
      "bearer token for admin endpoints; none: admin endpoints closed"},
     K_TOKEN, 0, 0, 0},
    {{"admin_token_file", "--admin-token-file", "INVENTORY_ADMIN_TOKEN_FILE", "none",
      "path of a file holding the token", "read the admin token from a file"},
     K_TOKEN_FILE, 0, 0, 0},
    {{"admin_allow_loopback", "--admin-allow-loopback", "INVENTORY_ADMIN_ALLOW_LOOPBACK", "0",
      "0..1 (the bare flag means 1)",
      "development only: without an admin token, admin endpoints accept loopback clients"},
     K_BOOL, 0, 1, offsetof(struct config, admin_allow_loopback)},
    {{"trusted_proxies", "--trusted-proxies", "INVENTORY_TRUSTED_PROXIES", "none",
      "IPv4/IPv6 CIDRs separated by commas or spaces",
      "proxies whose X-Forwarded-For / X-Real-IP name the client"},
     K_CIDRS, 0, 0, 0},
    {{"threads", "--threads", "INVENTORY_THREADS", "number of CPUs", "1..1024",
      "HTTP worker threads"},
     K_INT, 1, 1024, offsetof(struct config, threads)},
    {{"strategy", "--strategy", "INVENTORY_STRATEGY", "segmented",
      "segmented, single-lock, atomic", "stock locking strategy"},
     K_STRATEGY, 0, 0, 0},
    {{"lock_redis", "--lock-redis", "INVENTORY_LOCK_REDIS", "none",
      "1..15 redis:// URLs separated by commas, independent masters (3 or 5 typically)",
      "guard segment locks with Redlock on these nodes; stock stays on --redis, fenced"},
     K_LOCK_REDIS, 0, 0, 0},
    INT_KEY(lock_lease_ms, "--lock-lease-ms", "INVENTORY_LOCK_LEASE_MS", 10000, 1, 3600000,
            "segment lock lease, renewed by the watchdog while held"),
    INT_KEY(lock_renewal, "--lock-renewal", "INVENTORY_LOCK_RENEWAL", 1, 0, 1,
            "1: the watchdog renews a held lock's lease; 0: a hold longer than the lease is lost"),
    INT_KEY(lock_wait_ms, "--lock-wait-ms", "INVENTORY_LOCK_WAIT_MS", 2000, 0, 600000,
            "longest an order waits for a segment lock before 503 lock_timeout"),
    INT_KEY(hold_ms, "--hold-ms", "INVENTORY_HOLD_MS", 0, 0, 60000,
            "simulated business work inside the critical section (benchmarks)"),
    INT_KEY(busy_hint_max_ms, "--busy-hint-max-ms", "INVENTORY_BUSY_HINT_MAX_MS", 20, 0, 1000,
            "longest a worker loop walks past a segment it found locked by another instance; "
            "0: no hint"),
    INT_KEY(order_redis_call_budget, "--order-redis-call-budget",
            "INVENTORY_ORDER_REDIS_CALL_BUDGET", 256, 16, 100000,
            "most Redis calls one order may make; past it the order answers 503 unavailable"),
    INT_KEY(max_quantity, "--max-quantity", "INVENTORY_MAX_QUANTITY", 100, 1, 1000000,
            "largest quantity one order may ask for"),
    {{"log_level", "--log-level", "INVENTORY_LOG_LEVEL", "info", "debug, info, warn, error",
      "least severe level logged"},
     K_LOG_LEVEL, 0, 0, 0},
    INT_KEY(max_connections, "--max-connections", "INVENTORY_MAX_CONNECTIONS", 4096, 1, 1000000,
            "most concurrent HTTP connections; more are refused"),
    INT_KEY(connection_timeout_s, "--connection-timeout-s", "INVENTORY_CONNECTION_TIMEOUT_S", 30,
            1, 3600, "idle HTTP connections are closed after this many seconds"),
    INT_KEY(connection_memory_kib, "--connection-memory-kib", "INVENTORY_CONNECTION_MEMORY_KIB",
            24, 2, 1024,
            "memory per HTTP connection for its request head and the answer's headers; "
            "heads over 8 KiB or that do not fit get 431"),
    INT_KEY(redis_timeout_ms, "--redis-timeout-ms", "INVENTORY_REDIS_TIMEOUT_MS", 1000, 1, 60000,
            "Redis connect and command timeout"),
    INT_KEY(redis_replica_acks, "--redis-replica-acks", "INVENTORY_REDIS_REPLICA_ACKS", 0, 0, 16,
            "replicas that must have a commit (WAIT) before 201; on a WAIT timeout 503 with "
            "outcome unknown"),
    INT_KEY(sold_out_recheck_ms, "--sold-out-recheck-ms", "INVENTORY_SOLD_OUT_RECHECK_MS", 500, 1,
            1000, "a cached sold-out state is re-checked within this time, so a restock ends it"),
    INT_KEY(shutdown_grace_ms, "--shutdown-grace-ms", "INVENTORY_SHUTDOWN_GRACE_MS", 5000, 0,
            600000, "on SIGTERM/SIGINT, longest wait for in-flight requests to finish"),
    INT_KEY(rate_limit_rps, "--rate-limit-rps", "INVENTORY_RATE_LIMIT_RPS", 0, 0, 1000000,
            "requests per second per client IP before 429 rate_limited; 0: no limit"),
    INT_KEY(rate_limit_burst, "--rate-limit-burst", "INVENTORY_RATE_LIMIT_BURST", 0, 0, 1000000,
            "requests a client IP may send at once above the rate; 0: rate_limit_rps"),
    INT_KEY(max_connections_per_ip, "--max-connections-per-ip",
            "INVENTORY_MAX_CONNECTIONS_PER_IP", 0, 0, 1000000,
            "most concurrent HTTP connections of one client IP; 0: no limit"),
    {{"access_log", "--access-log", "INVENTORY_ACCESS_LOG", "none",
      "a file path (appended to) or - (stdout)",
      "HTTP access log, one JSON object per request"},
     K_ACCESS_LOG, 0, 0, 0},
};

#define NKEYS (sizeof(keys) / sizeof(keys[0]))

static const char usage_text[] =
    "Usage: inventoryd [OPTION]...\n"
    "HTTP flash-sale order service: segmented stock with per-segment distributed locks on Redis.\n"
    "\n"
    "Options (each also VALUE via --option=VALUE; defaults in brackets):\n"
    "  --config FILE              JSON config file [none]\n"
    "  --port N                   HTTP port, 1..65535 [8080]\n"
    "  --bind ADDR                listen address, IPv4/IPv6 literal [0.0.0.0]\n"
    "  --redis URL                redis://[[user]:password@]host[:port][/db], unix:///path\n"
    "                             or redis-cluster://host:port[,host:port...]\n"
    "                             [redis://127.0.0.1:6379]\n"
    "  --redis-url-file FILE      read the Redis URL from FILE (keeps a password out of ps)\n"
    "  --admin-token T            bearer token for admin endpoints; without one they are\n"
    "                             closed [none]\n"
    "  --admin-token-file FILE    read the admin token from FILE (keeps it out of ps)\n"
    "  --admin-allow-loopback     development only: no token needed from loopback [off]\n"
    "  --trusted-proxies CIDRS    proxies whose X-Forwarded-For/X-Real-IP is believed [none]\n"
    "  --threads N                HTTP worker threads, 1..1024 [number of CPUs]\n"
    "  --strategy S               segmented, single-lock or atomic [segmented]\n"
    "  --lock-redis URLS          Redlock on these independent Redis masters (comma-\n"
    "                             separated); stock stays on --redis, fenced [none]\n"
    "  --lock-lease-ms N          lock lease, 1..3600000 [10000]\n"
    "  --lock-renewal 0|1         renew held leases (watchdog); 0: holds end at the lease [1]\n"
    "  --lock-wait-ms N           longest wait for a segment lock, 0..600000 [2000]\n"
    "  --hold-ms N                simulated work in the critical section, 0..60000 [0]\n"
    "  --busy-hint-max-ms N       longest a loop walks past a segment another instance\n"
    "                             holds, 0..1000; 0 = try it every time [20]\n"
    "  --order-redis-call-budget N  most Redis calls one order may make; past it 503,\n"
    "                             nothing changed, 16..100000 [256]\n"
    "  --max-quantity N           largest quantity per order, 1..1000000 [100]\n"
    "  --log-level L              debug, info, warn or error [info]\n"
    "  --max-connections N        most concurrent HTTP connections, 1..1000000 [4096]\n"
    "  --connection-timeout-s N   idle connection timeout, 1..3600 [30]\n"
    "  --connection-memory-kib N  per-connection memory for the request head and the\n"
    "                             answer's headers, 2..1024; heads over 8 KiB or that do\n"
    "                             not fit are answered 431 [24]\n"
    "  --redis-timeout-ms N       Redis connect/command timeout, 1..60000 [1000]\n"
    "  --redis-replica-acks N     replicas that must have a commit (WAIT) before 201, 0..16 [0]\n"
    "  --sold-out-recheck-ms N    bound on a cached sold-out state, 1..1000 [500]\n"
    "  --shutdown-grace-ms N      drain time on SIGTERM/SIGINT, 0..600000 [5000]\n"
    "  --rate-limit-rps N         requests/s per client IP, then 429; 0 = off [0]\n"
    "  --rate-limit-burst N       burst per client IP above the rate [rate-limit-rps]\n"
    "  --max-connections-per-ip N connections per client IP; 0 = no limit [0]\n"
    "  --access-log FILE|-        JSON access log, a line per request (- = stdout) [none]\n"
    "  --healthcheck              GET /healthz of the server this configuration describes;\n"
    "                             exit 0 when it answers 200, else 1 (container HEALTHCHECK)\n"
    "  -h, --help                 print this help and exit\n"
    "  -V, --version              print the version and exit\n";

/* The help's second half: ISO C only promises string literals of 4095 characters. */
static const char usage_footer[] =
    "\n"
    "Every option can also be set by the environment variable INVENTORY_<NAME> (e.g.\n"
    "INVENTORY_LOCK_LEASE_MS; the Redis URL is INVENTORY_REDIS_URL) or in the config file\n"
    "under its snake_case name (\"lock_lease_ms\"). Precedence: default < config file <\n"
    "environment < option. An invalid value exits with status 2.\n"
    "\n"
    "Signals: SIGTERM/SIGINT drain and exit 0; SIGHUP re-opens the access log.\n"
    "Manual: man inventoryd (docs/inventoryd.1). Documentation: docs/configuration.md,\n"
    "docs/api.md and docs/openapi.yaml in the source tree, installed under\n"
    "share/doc/inventoryd; GET / of a running instance is its live dashboard.\n";

static const char version_text[] = "inventoryd " INVENTORYD_VERSION "\n";

const char *config_usage(void)
{
    static char text[sizeof usage_text + sizeof usage_footer];
    if (text[0] == '\0') /* main's thread only, before any other starts */
        snprintf(text, sizeof text, "%s%s", usage_text, usage_footer);
    return text;
}

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
static const char *closest(const char *s, bool flags)
{
    const char *best = NULL;
    size_t best_d = strlen(s) >= 8 ? 4 : 3;
    for (size_t i = 0; i < NKEYS; i++) {
        const char *cand = flags ? keys[i].pub.flag : keys[i].pub.name;
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

/* Reads the secret file at path into buf (cap bytes, NUL-terminated), without the trailing
 * newline, carriage return or blanks an editor or `echo` leaves. Returns NULL, or a short reason
 * (static text, never the contents). */
static const char *read_secret(const char *path, char *buf, size_t cap)
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

/* Where a value came from, for messages: "flag --port", "environment INVENTORY_PORT",
 * "config file /etc/inventoryd.json". */
struct origin {
    const char *what;
    const char *name;
};

/* Sets key k of cfg from the text s (flag or environment) or the JSON value j (config file;
 * exactly one of s, j is non-NULL). Returns 0, or -1 with err = "<key>: <problem> (<origin>)". */
static int apply(struct config *cfg, const struct keydef *k, const char *s, const json_t *j,
                 const struct origin *o, char *err, size_t errlen)
{
    const char *key = k->pub.name ? k->pub.name : "config";
    char got[192];

    if (k->kind == K_INT) {
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
                   key, k->min, k->max, got, o->what, o->name);
            return -1;
        }
        *(int *)(void *)((char *)cfg + k->offset) = (int)v;
        return 0;
    }

    if (k->kind == K_BOOL) {
        int v = -1;
        if (j) {
            if (json_is_boolean(j))
                v = json_is_true(j) ? 1 : 0;
            else if (json_is_integer(j) &&
                     (json_integer_value(j) == 0 || json_integer_value(j) == 1))
                v = (int)json_integer_value(j);
            render_json(j, got, sizeof(got));
        } else {
            if (strcmp(s, "0") == 0 || strcmp(s, "1") == 0)
                v = s[0] - '0';
            quote(s, got, sizeof(got));
        }
        if (v < 0) {
            seterr(err, errlen,
                   "%s: must be 0 or 1 (true or false in the config file), got %s (%s %s)", key,
                   got, o->what, o->name);
            return -1;
        }
        *(int *)(void *)((char *)cfg + k->offset) = v;
        return 0;
    }

    /* Every other kind is a string. */
    if (j) {
        if (!json_is_string(j) || strlen(json_string_value(j)) != json_string_length(j)) {
            render_json(j, got, sizeof(got));
            seterr(err, errlen, "%s: must be a string, got %s (%s %s)", key,
                   k->kind == K_TOKEN ? "another type" : got, o->what, o->name);
            return -1;
        }
        s = json_string_value(j);
    }
    quote(s, got, sizeof(got));
    char reason[128];
    switch (k->kind) {
    case K_CONFIG:
        if (!*s || strlen(s) >= CONFIG_PATH_MAX) {
            seterr(err, errlen, "config: must be a file path of 1..%d bytes (%s %s)",
                   CONFIG_PATH_MAX - 1, o->what, o->name);
            return -1;
        }
        snprintf(cfg->config_path, sizeof(cfg->config_path), "%s", s);
        return 0;
    case K_BIND:
        if (!bind_ok(s)) {
            seterr(err, errlen, "bind: must be an IPv4 or IPv6 address literal, got %s (%s %s)",
                   got, o->what, o->name);
            return -1;
        }
        snprintf(cfg->bind, sizeof(cfg->bind), "%s", s);
        return 0;
    case K_REDIS:
        if (!config_redis_url_valid(s, reason, sizeof(reason))) {
            /* Not quoted: the URL may carry a password. */
            seterr(err, errlen,
                   "redis: invalid URL: %s; expected redis://[[user]:password@]host[:port][/db], "
                   "unix:///path or redis-cluster://host:port[,host:port...] (%s %s)",
                   reason, o->what, o->name);
            return -1;
        }
        snprintf(cfg->redis_url, sizeof(cfg->redis_url), "%s", s);
        cfg->redis_url_file[0] = '\0';
        return 0;
    case K_TOKEN:
        if (!token_ok(s, strlen(s))) {
            /* Not quoted: it is a secret. */
            seterr(err, errlen,
                   "admin_token: must be 1 to %d visible ASCII characters (no spaces or "
                   "control characters) (%s %s)",
                   CONFIG_ADMIN_TOKEN_MAX, o->what, o->name);
            return -1;
        }
        snprintf(cfg->admin_token, sizeof(cfg->admin_token), "%s", s);
        cfg->admin_token_file[0] = '\0';
        return 0;
    case K_TOKEN_FILE:
    case K_REDIS_FILE: {
        bool tok = k->kind == K_TOKEN_FILE;
        char path[CONFIG_PATH_MAX];
        char secret[CONFIG_REDIS_URL_MAX + 2];
        if (!*s || strlen(s) >= CONFIG_PATH_MAX) {
            seterr(err, errlen, "%s: must be a file path of 1..%d bytes (%s %s)", key,
                   CONFIG_PATH_MAX - 1, o->what, o->name);
            return -1;
        }
        printable_copy(s, path, sizeof(path));
        const char *problem = read_secret(s, secret, sizeof(secret));
        if (problem) {
            seterr(err, errlen, "%s: cannot read %s: %s (%s %s)", key, path, problem, o->what,
                   o->name);
            return -1;
        }
        /* The contents are a secret: never quoted. */
        if (tok && !token_ok(secret, strlen(secret))) {
            seterr(err, errlen,
                   "%s: %s must hold 1 to %d visible ASCII characters (no spaces or control "
                   "characters; a trailing newline is allowed) (%s %s)",
                   key, path, CONFIG_ADMIN_TOKEN_MAX, o->what, o->name);
            explicit_clear(secret, sizeof(secret));
            return -1;
        }
        if (!tok && !config_redis_url_valid(secret, reason, sizeof(reason))) {
            seterr(err, errlen, "%s: %s does not hold a valid Redis URL: %s (%s %s)", key, path,
                   reason, o->what, o->name);
            explicit_clear(secret, sizeof(secret));
            return -1;
        }
        if (tok) {
            snprintf(cfg->admin_token, sizeof(cfg->admin_token), "%s", secret);
            snprintf(cfg->admin_token_file, sizeof(cfg->admin_token_file), "%s", s);
        } else {
            snprintf(cfg->redis_url, sizeof(cfg->redis_url), "%s", secret);
            snprintf(cfg->redis_url_file, sizeof(cfg->redis_url_file), "%s", s);
        }
        explicit_clear(secret, sizeof(secret));
        return 0;
    }
    case K_CIDRS:
        if (strlen(s) >= CONFIG_PROXIES_MAX) {
            seterr(err, errlen, "trusted_proxies: longer than %d characters (%s %s)",
                   CONFIG_PROXIES_MAX - 1, o->what, o->name);
            return -1;
        }
        if (proxy_parse_list(s, &cfg->trusted_proxies, reason, sizeof(reason)) != 0) {
            seterr(err, errlen, "trusted_proxies: %s (%s %s)", reason, o->what, o->name);
            return -1;
        }
        snprintf(cfg->trusted_proxies_text, sizeof(cfg->trusted_proxies_text), "%s", s);
        return 0;
    case K_ACCESS_LOG:
        if (!*s || strlen(s) >= CONFIG_PATH_MAX) {
            seterr(err, errlen, "access_log: must be a file path of 1..%d bytes or - (%s %s)",
                   CONFIG_PATH_MAX - 1, o->what, o->name);
            return -1;
        }
        snprintf(cfg->access_log, sizeof(cfg->access_log), "%s", s);
        return 0;
    case K_LOCK_REDIS: {
        /* Not quoted in messages: a URL may carry a password. */
        if (strlen(s) >= sizeof(cfg->lock_redis)) {
            seterr(err, errlen, "lock_redis: longer than %zu characters (%s %s)",
                   sizeof(cfg->lock_redis) - 1, o->what, o->name);
            return -1;
        }
        int n = 0;
        for (const char *p = s;; n++) {
            const char *end = strchr(p, ',');
            size_t len = end ? (size_t)(end - p) : strlen(p);
            char url[CONFIG_REDIS_URL_MAX];
            if (n >= CONFIG_LOCK_NODES_MAX || len == 0 || len >= sizeof(url)) {
                seterr(err, errlen,
                       "lock_redis: must be 1..%d Redis URLs separated by commas (%s %s)",
                       CONFIG_LOCK_NODES_MAX, o->what, o->name);
                return -1;
            }
            memcpy(url, p, len);
            url[len] = '\0';
            if (!config_redis_url_valid(url, reason, sizeof(reason))) {
                seterr(err, errlen, "lock_redis: URL %d is invalid: %s (%s %s)", n + 1, reason,
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
    case K_BOOL:
        break;
    case K_STRATEGY:
        for (int i = 0; i < 3; i++) {
            if (strcmp(s, strategy_names[i]) == 0) {
                cfg->strategy = (enum config_strategy)i;
                return 0;
            }
        }
        seterr(err, errlen, "strategy: must be one of segmented, single-lock, atomic, got %s (%s %s)",
               got, o->what, o->name);
        return -1;
    case K_LOG_LEVEL:
        for (int i = 0; i < 4; i++) {
            if (strcmp(s, level_names[i]) == 0) {
                cfg->log_level = (enum config_log_level)i;
                return 0;
            }
        }
        seterr(err, errlen, "log_level: must be one of debug, info, warn, error, got %s (%s %s)",
               got, o->what, o->name);
        return -1;
    case K_INT:
        break;
    }
    return -1;
}

/* ---- layers ---------------------------------------------------------------------------- */

void config_defaults(struct config *out)
{
    memset(out, 0, sizeof(*out));
    out->port = 8080;
    snprintf(out->bind, sizeof(out->bind), "0.0.0.0");
    snprintf(out->redis_url, sizeof(out->redis_url), "redis://127.0.0.1:6379");
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    out->threads = cpus < 1 ? 1 : cpus > 1024 ? 1024 : (int)cpus;
    out->strategy = STRATEGY_SEGMENTED;
    out->lock_lease_ms = 10000;
    out->lock_renewal = 1;
    out->lock_wait_ms = 2000;
    out->hold_ms = 0;
    out->busy_hint_max_ms = 20;
    out->order_redis_call_budget = 256;
    out->max_quantity = 100;
    out->log_level = CONFIG_LOG_INFO;
    out->max_connections = 4096;
    out->connection_timeout_s = 30;
    out->connection_memory_kib = 24;
    out->redis_timeout_ms = 1000;
    out->redis_replica_acks = 0;
    out->sold_out_recheck_ms = 500;
    out->shutdown_grace_ms = 5000;
    out->rate_limit_rps = 0;
    out->rate_limit_burst = 0;
    out->max_connections_per_ip = 0;
    out->admin_allow_loopback = 0;
    out->trusted_proxies.n = 0;
    out->action = CONFIG_ACTION_RUN;
}

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

/* -1 with err set when both environment variables a and b are set (one setting twice). */
static int env_conflict(char **envp, const char *a, const char *b, const char *key, char *err,
                        size_t errlen)
{
    if (!env_get(envp, a) || !env_get(envp, b))
        return 0;
    seterr(err, errlen, "%s: both %s and %s are set; set one of them (environment)", key, a, b);
    return -1;
}

static int load_file(struct config *cfg, const char *file, char *err, size_t errlen)
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
    int rc = 0;
    if (!json_is_object(root)) {
        seterr(err, errlen, "config: %s must hold one JSON object", path);
        rc = -1;
        goto done;
    }
    static const char *const pairs[][2] = {{"admin_token", "admin_token_file"},
                                           {"redis", "redis_url_file"}};
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        json_t *a = json_object_get(root, pairs[i][0]), *b = json_object_get(root, pairs[i][1]);
        if (a && b && !json_is_null(a) && !json_is_null(b)) {
            seterr(err, errlen, "%s: both \"%s\" and \"%s\" are set; set one of them (config "
                   "file %s)", pairs[i][0], pairs[i][0], pairs[i][1], path);
            rc = -1;
            goto done;
        }
    }
    struct origin o = {"config file", path};
    const char *name;
    json_t *value;
    json_object_foreach(root, name, value) {
        if (name[0] == '_')
            continue; /* comment */
        const struct keydef *k = NULL;
        for (size_t i = 0; i < NKEYS && !k; i++)
            if (keys[i].pub.name && strcmp(keys[i].pub.name, name) == 0)
                k = &keys[i];
        if (!k) {
            char q[192];
            const char *hint = closest(name, false);
            quote(name, q, sizeof(q));
            seterr(err, errlen, "%s: unknown key%s%s%s (config file %s)", q,
                   hint ? ", did you mean \"" : "", hint ? hint : "", hint ? "\"?" : "", path);
            rc = -1;
            goto done;
        }
        if (json_is_null(value))
            continue; /* not set here */
        if (apply(cfg, k, NULL, value, &o, err, errlen)) {
            rc = -1;
            goto done;
        }
    }
done:
    json_decref(root);
    return rc;
}

/* Parses the option at argv[*i] (advancing *i past its value). Sets *k to its key, or to NULL
 * with *action set for --help/--version. Returns 0, or -1 with err set. */
static int next_flag(int argc, char **argv, int *i, const struct keydef **k, const char **value,
                     enum config_action *action, char *err, size_t errlen)
{
    const char *arg = argv[*i];
    *k = NULL;
    *value = NULL;
    *action = CONFIG_ACTION_RUN;
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
        *action = CONFIG_ACTION_HELP;
        return 0;
    }
    if (strcmp(arg, "--version") == 0 || strcmp(arg, "-V") == 0) {
        *action = CONFIG_ACTION_VERSION;
        return 0;
    }
    if (strcmp(arg, "--healthcheck") == 0) {
        *action = CONFIG_ACTION_HEALTHCHECK;
        return 0;
    }
    char q[192];
    if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
        quote(arg, q, sizeof(q));
        seterr(err, errlen, "%s: unexpected argument (options start with --; see --help)", q);
        return -1;
    }
    const char *eq = strchr(arg, '=');
    size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
    for (size_t j = 0; j < NKEYS; j++) {
        const char *flag = keys[j].pub.flag;
        if (strlen(flag) == nlen && strncmp(flag, arg, nlen) == 0) {
            *k = &keys[j];
            break;
        }
    }
    if (!*k) {
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)(nlen < 63 ? nlen : 63), arg);
        const char *hint = closest(name, true);
        quote(name, q, sizeof(q));
        if (strcmp(name, "--help") == 0 || strcmp(name, "--version") == 0 ||
            strcmp(name, "--healthcheck") == 0)
            seterr(err, errlen, "%s: takes no value", name);
        else
            seterr(err, errlen, "%s: unknown option%s%s%s (see --help)", q,
                   hint ? ", did you mean " : "", hint ? hint : "", hint ? "?" : "");
        return -1;
    }
    if (eq) {
        *value = eq + 1;
    } else if ((*k)->kind == K_BOOL) {
        *value = "1"; /* a bare switch */
    } else if (*i + 1 < argc) {
        *value = argv[++*i];
    } else {
        seterr(err, errlen, "%s: missing value (see --help)", (*k)->pub.flag);
        return -1;
    }
    return 0;
}

int config_load(struct config *out, int argc, char **argv, char **envp, char *err,
                size_t errlen)
{
    if (!envp)
        envp = environ;
    seterr(err, errlen, "%s", "");
    config_defaults(out);

    /* Pass 1: syntax only, so --help/--version win wherever they are and --config is known
     * before the file layer. The first error is kept in case neither is given. */
    const char *config_path = NULL;
    bool bad = false, healthcheck = false;
    for (int i = 1; i < argc; i++) {
        const struct keydef *k;
        const char *value;
        enum config_action action;
        char e[512];
        if (next_flag(argc, argv, &i, &k, &value, &action, e, sizeof(e))) {
            if (!bad)
                seterr(err, errlen, "%s", e);
            bad = true;
            continue;
        }
        if (action == CONFIG_ACTION_HEALTHCHECK) {
            healthcheck = true;
            continue;
        }
        if (action != CONFIG_ACTION_RUN) {
            out->action = action;
            seterr(err, errlen, "%s", "");
            return 1;
        }
        if (k->kind == K_CONFIG)
            config_path = value;
    }
    if (bad)
        return -1;

    /* Layer 1: the config file. */
    const struct keydef *config_key = &keys[0];
    if (config_path) {
        struct origin o = {"flag", "--config"};
        if (apply(out, config_key, config_path, NULL, &o, err, errlen))
            return -1;
    } else if ((config_path = env_get(envp, "INVENTORY_CONFIG"))) {
        struct origin o = {"environment", "INVENTORY_CONFIG"};
        if (apply(out, config_key, config_path, NULL, &o, err, errlen))
            return -1;
    }
    if (out->config_path[0] && load_file(out, out->config_path, err, errlen))
        return -1;

    /* Layer 2: the environment. A secret given both as a value and as a file is ambiguous. */
    if (env_conflict(envp, "INVENTORY_ADMIN_TOKEN", "INVENTORY_ADMIN_TOKEN_FILE", "admin_token",
                     err, errlen) ||
        env_conflict(envp, "INVENTORY_REDIS_URL", "INVENTORY_REDIS_URL_FILE", "redis", err,
                     errlen))
        return -1;
    for (size_t j = 1; j < NKEYS; j++) {
        const char *v = env_get(envp, keys[j].pub.env);
        struct origin o = {"environment", keys[j].pub.env};
        if (v && apply(out, &keys[j], v, NULL, &o, err, errlen))
            return -1;
    }

    /* Layer 3: the flags, in order (the last of a repeated flag wins). */
    for (int i = 1; i < argc; i++) {
        const struct keydef *k;
        const char *value;
        enum config_action action;
        if (next_flag(argc, argv, &i, &k, &value, &action, err, errlen))
            return -1; /* not reached: pass 1 accepted the syntax */
        if (!k)
            continue; /* --healthcheck */
        struct origin o = {"flag", k->pub.flag};
        if (k->kind != K_CONFIG && apply(out, k, value, NULL, &o, err, errlen))
            return -1;
    }
    if (out->strategy == STRATEGY_SINGLE_LOCK && strncmp(out->redis_url, "redis-cluster://", 16) == 0) {
        seterr(err, errlen, "strategy: single-lock needs one Redis (its SKU lock guards keys in "
                            "other cluster slots); use segmented or atomic with redis-cluster://");
        return -1;
    }
    out->action = healthcheck ? CONFIG_ACTION_HEALTHCHECK : CONFIG_ACTION_RUN;
    return 0;
}

/* ---- describe -------------------------------------------------------------------------- */

/* Copies a Redis URL with the password (if any) replaced by ***. */
static void mask_url(const char *url, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", url);
    size_t skip = strncmp(url, "redis://", 8) == 0           ? 8
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

/* A path for the description: null when "", non-printable bytes as '?' (valid JSON). */
static json_t *path_or_null(const char *path)
{
    if (!path[0])
        return json_null();
    char copy[CONFIG_PATH_MAX];
    printable_copy(path, copy, sizeof(copy));
    return json_string(copy);
}

int config_describe(const struct config *cfg, char *buf, size_t len)
{
    char url[CONFIG_REDIS_URL_MAX + 8];
    mask_url(cfg->redis_url, url, sizeof(url));
    json_t *o = json_object();
    if (!o)
        return -1;
    int bad = 0;
    char path[CONFIG_PATH_MAX];
    /* A path may hold any bytes; the log line must stay valid JSON. */
    for (size_t i = 0; i < sizeof(path); i++) {
        unsigned char c = (unsigned char)cfg->config_path[i];
        path[i] = (c == 0 || (c >= 0x20 && c <= 0x7e)) ? (char)c : '?';
        if (c == 0)
            break;
    }
    path[sizeof(path) - 1] = '\0';
    bad |= json_object_set_new(o, "config", path[0] ? json_string(path) : json_null());
    bad |= json_object_set_new(o, "port", json_integer(cfg->port));
    bad |= json_object_set_new(o, "bind", json_string(cfg->bind));
    bad |= json_object_set_new(o, "redis", json_string(url));
    bad |= json_object_set_new(o, "admin_token",
                               cfg->admin_token[0] ? json_string("***") : json_null());
    bad |= json_object_set_new(o, "admin_token_file", path_or_null(cfg->admin_token_file));
    bad |= json_object_set_new(o, "redis_url_file", path_or_null(cfg->redis_url_file));
    bad |= json_object_set_new(o, "admin_allow_loopback",
                               json_integer(cfg->admin_allow_loopback));
    bad |= json_object_set_new(o, "trusted_proxies", json_string(cfg->trusted_proxies_text));
    bad |= json_object_set_new(o, "threads", json_integer(cfg->threads));
    bad |= json_object_set_new(o, "strategy", json_string(config_strategy_name(cfg->strategy)));
    bad |= json_object_set_new(o, "lock_redis",
                               cfg->lock_redis_n ? json_integer(cfg->lock_redis_n) : json_null());
    bad |= json_object_set_new(o, "lock_lease_ms", json_integer(cfg->lock_lease_ms));
    bad |= json_object_set_new(o, "lock_renewal", json_integer(cfg->lock_renewal));
    bad |= json_object_set_new(o, "lock_wait_ms", json_integer(cfg->lock_wait_ms));
    bad |= json_object_set_new(o, "hold_ms", json_integer(cfg->hold_ms));
    bad |= json_object_set_new(o, "busy_hint_max_ms", json_integer(cfg->busy_hint_max_ms));
    bad |= json_object_set_new(o, "order_redis_call_budget",
                               json_integer(cfg->order_redis_call_budget));
    bad |= json_object_set_new(o, "max_quantity", json_integer(cfg->max_quantity));
    bad |= json_object_set_new(o, "log_level",
                               json_string(config_log_level_name(cfg->log_level)));
    bad |= json_object_set_new(o, "max_connections", json_integer(cfg->max_connections));
    bad |= json_object_set_new(o, "connection_timeout_s",
                               json_integer(cfg->connection_timeout_s));
    bad |= json_object_set_new(o, "connection_memory_kib",
                               json_integer(cfg->connection_memory_kib));
    bad |= json_object_set_new(o, "redis_timeout_ms", json_integer(cfg->redis_timeout_ms));
    bad |= json_object_set_new(o, "redis_replica_acks", json_integer(cfg->redis_replica_acks));
    bad |= json_object_set_new(o, "sold_out_recheck_ms", json_integer(cfg->sold_out_recheck_ms));
    bad |= json_object_set_new(o, "shutdown_grace_ms", json_integer(cfg->shutdown_grace_ms));
    bad |= json_object_set_new(o, "rate_limit_rps", json_integer(cfg->rate_limit_rps));
    bad |= json_object_set_new(o, "rate_limit_burst", json_integer(cfg->rate_limit_burst));
    bad |= json_object_set_new(o, "max_connections_per_ip",
                               json_integer(cfg->max_connections_per_ip));
    bad |= json_object_set_new(o, "access_log", path_or_null(cfg->access_log));
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
