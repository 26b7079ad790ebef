/*
 * Unit tests of service/src/base/config.c: defaults, the three layers and their precedence, strict
 * validation (a table of invalid inputs, each with the key and origin its message must name),
 * --help/--version, config_describe(), and the checked-in config/inventoryd.json and
 * docs/configuration.md staying in step with the key table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "config.h"
#include "tree_text.h"

#ifndef INVENTORY_SOURCE_DIR
#error "INVENTORY_SOURCE_DIR must name the source tree"
#endif

/* ---- helpers --------------------------------------------------------------------------- */

#define VMAX 40

/* A mutable NULL-terminated string array (argv or envp) built from literals. */
struct vec {
    char *v[VMAX + 1];
    int n;
};

static void vec_add(struct vec *x, const char *s)
{
    assert_true(x->n < VMAX);
    x->v[x->n] = strdup(s);
    assert_non_null(x->v[x->n]);
    x->n++;
    x->v[x->n] = NULL;
}

static void vec_free(struct vec *x)
{
    for (int i = 0; i < x->n; i++)
        free(x->v[i]);
    x->n = 0;
    x->v[0] = NULL;
}

/* Writes content to a new temporary file; its path goes in path (cap bytes). */
static void temp_file(const char *content, char *path, size_t cap)
{
    const char *dir = getenv("TMPDIR");
    snprintf(path, cap, "%s/inventoryd-test-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(content);
    assert_int_equal(write(fd, content, len), (ssize_t)len);
    close(fd);
}

struct run {
    struct config cfg;
    char err[512];
    int rc;
};

/* Loads a config from argv entries (argv[0] added), env entries and, when file is non-NULL, a
 * temporary config file given with --config (first). Each list ends with NULL. */
static void run_load(struct run *r, const char *const *args, const char *const *env,
                     const char *file)
{
    struct vec argv = {{NULL}, 0}, envp = {{NULL}, 0};
    char path[512] = "";
    vec_add(&argv, "inventoryd");
    if (file) {
        temp_file(file, path, sizeof(path));
        vec_add(&argv, "--config");
        vec_add(&argv, path);
    }
    for (; args && *args; args++)
        vec_add(&argv, *args);
    for (; env && *env; env++)
        vec_add(&envp, *env);
    memset(r, 0x5a, sizeof(*r));
    r->rc = config_load(&r->cfg, argv.n, argv.v, envp.v, r->err, sizeof(r->err));
    if (path[0])
        unlink(path);
    vec_free(&argv);
    vec_free(&envp);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NONE NULL

/* ---- defaults, help, version ----------------------------------------------------------- */

static void test_defaults(void **state)
{
    (void)state;
    struct run r;
    run_load(&r, NONE, NONE, NULL);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.err, "");
    assert_int_equal(r.cfg.action, CONFIG_ACTION_RUN);
    assert_string_equal(r.cfg.config_path, "");
    assert_int_equal(r.cfg.port, 8080);
    assert_string_equal(r.cfg.bind, "0.0.0.0");
    assert_string_equal(r.cfg.redis_url, "redis://127.0.0.1:6379");
    assert_string_equal(r.cfg.admin_token, "");
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    assert_int_equal(r.cfg.threads, cpus < 1 ? 1 : cpus > 1024 ? 1024 : cpus);
    assert_int_equal(r.cfg.strategy, STRATEGY_SEGMENTED);
    assert_int_equal(r.cfg.lock_lease_ms, 10000);
    assert_int_equal(r.cfg.lock_renewal, 1);
    assert_int_equal(r.cfg.lock_wait_ms, 2000);
    assert_int_equal(r.cfg.hold_ms, 0);
    assert_int_equal(r.cfg.max_quantity, 100);
    assert_int_equal(r.cfg.log_level, CONFIG_LOG_INFO);
    assert_int_equal(r.cfg.max_connections, 16384); /* SPEC §9: 10,000 with the defaults */
    assert_int_equal(r.cfg.connection_timeout_s, 30);
    assert_int_equal(r.cfg.redis_timeout_ms, 1000);
    assert_int_equal(r.cfg.sold_out_recheck_ms, 500);
    assert_int_equal(r.cfg.shutdown_grace_ms, 5000);

    struct config d;
    config_defaults(&d);
    assert_memory_equal(&d, &r.cfg, sizeof(d));
}

static void test_help_version(void **state)
{
    (void)state;
    struct run r;
    run_load(&r, ARGS("--help"), NONE, NULL);
    assert_int_equal(r.rc, 1);
    assert_int_equal(r.cfg.action, CONFIG_ACTION_HELP);
    run_load(&r, ARGS("-h"), NONE, NULL);
    assert_int_equal(r.rc, 1);
    assert_int_equal(r.cfg.action, CONFIG_ACTION_HELP);
    run_load(&r, ARGS("--version"), NONE, NULL);
    assert_int_equal(r.rc, 1);
    assert_int_equal(r.cfg.action, CONFIG_ACTION_VERSION);
    run_load(&r, ARGS("-V"), NONE, NULL);
    assert_int_equal(r.cfg.action, CONFIG_ACTION_VERSION);
    /* help wins over invalid arguments and values anywhere */
    run_load(&r, ARGS("--bogus", "--port", "abc", "--help"), ARGS("INVENTORY_PORT=x"), "[");
    assert_int_equal(r.rc, 1);
    assert_int_equal(r.cfg.action, CONFIG_ACTION_HELP);
    /* the first of the two wins */
    run_load(&r, ARGS("--version", "--help"), NONE, NULL);
    assert_int_equal(r.cfg.action, CONFIG_ACTION_VERSION);
    /* ... but a flag's value is a value, even when it looks like --help */
    run_load(&r, ARGS("--admin-token", "--help"), NONE, NULL);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.cfg.admin_token, "--help");
    run_load(&r, ARGS("--help=yes"), NONE, NULL);
    assert_int_equal(r.rc, -1);
    assert_string_equal(r.err, "--help: takes no value");

    const char *usage = config_usage();
    for (size_t i = 0; i < config_key_count(); i++) {
        const struct config_key *k = config_key_at(i);
        char needle[64];
        snprintf(needle, sizeof(needle), "%s ", k->flag);
        if (!strstr(usage, needle))
            fail_msg("usage does not mention %s", k->flag);
    }
    assert_non_null(strstr(usage, "--help"));
    assert_non_null(strstr(usage, "--version"));
    assert_string_equal(config_version(), "inventoryd " INVENTORYD_VERSION "\n");
    assert_null(config_key_at(config_key_count()));
}

/* ---- setting every key, both flag forms, env, file -------------------------------------- */

static void test_every_key_every_layer(void **state)
{
    (void)state;
    struct run r;
    run_load(&r,
             ARGS("--port", "9000", "--bind=::1", "--redis", "redis://:pw@redis.local:6380/2",
                  "--admin-token=s3cr3t", "--threads", "7", "--strategy=single-lock",
                  "--lock-lease-ms", "1", "--lock-renewal=0", "--lock-wait-ms=0", "--hold-ms",
                  "60000", "--max-quantity=1000000", "--log-level", "debug"),
             NONE, NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.port, 9000);
    assert_string_equal(r.cfg.bind, "::1");
    assert_string_equal(r.cfg.redis_url, "redis://:pw@redis.local:6380/2");
    assert_string_equal(r.cfg.admin_token, "s3cr3t");
    assert_int_equal(r.cfg.threads, 7);
    assert_int_equal(r.cfg.strategy, STRATEGY_SINGLE_LOCK);
    assert_int_equal(r.cfg.lock_lease_ms, 1);
    assert_int_equal(r.cfg.lock_renewal, 0);
    assert_int_equal(r.cfg.lock_wait_ms, 0);
    assert_int_equal(r.cfg.hold_ms, 60000);
    assert_int_equal(r.cfg.max_quantity, 1000000);
    assert_int_equal(r.cfg.log_level, CONFIG_LOG_DEBUG);

    run_load(&r,
             ARGS("--max-connections=1", "--connection-timeout-s", "3600", "--redis-timeout-ms",
                  "60000", "--sold-out-recheck-ms=1000", "--shutdown-grace-ms", "0", "--strategy",
                  "atomic", "--log-level=error"),
             NONE, NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.max_connections, 1);
    assert_int_equal(r.cfg.connection_timeout_s, 3600);
    assert_int_equal(r.cfg.redis_timeout_ms, 60000);
    assert_int_equal(r.cfg.sold_out_recheck_ms, 1000);
    assert_int_equal(r.cfg.shutdown_grace_ms, 0);
    assert_int_equal(r.cfg.strategy, STRATEGY_ATOMIC);
    assert_int_equal(r.cfg.log_level, CONFIG_LOG_ERROR);

    run_load(&r, NONE,
             ARGS("INVENTORY_PORT=81", "INVENTORY_BIND=127.0.0.1",
                  "INVENTORY_REDIS_URL=unix:///run/redis.sock", "INVENTORY_ADMIN_TOKEN=t",
                  "INVENTORY_THREADS=2", "INVENTORY_STRATEGY=atomic",
                  "INVENTORY_LOCK_LEASE_MS=3600000", "INVENTORY_LOCK_WAIT_MS=600000",
                  "INVENTORY_HOLD_MS=5", "INVENTORY_MAX_QUANTITY=7", "INVENTORY_LOG_LEVEL=warn",
                  "INVENTORY_MAX_CONNECTIONS=1000000", "INVENTORY_CONNECTION_TIMEOUT_S=1",
                  "INVENTORY_REDIS_TIMEOUT_MS=1", "INVENTORY_SOLD_OUT_RECHECK_MS=1",
                  "INVENTORY_SHUTDOWN_GRACE_MS=600000"),
             NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.port, 81);
    assert_string_equal(r.cfg.bind, "127.0.0.1");
    assert_string_equal(r.cfg.redis_url, "unix:///run/redis.sock");
    assert_string_equal(r.cfg.admin_token, "t");
    assert_int_equal(r.cfg.threads, 2);
    assert_int_equal(r.cfg.strategy, STRATEGY_ATOMIC);
    assert_int_equal(r.cfg.lock_lease_ms, 3600000);
    assert_int_equal(r.cfg.lock_wait_ms, 600000);
    assert_int_equal(r.cfg.hold_ms, 5);
    assert_int_equal(r.cfg.max_quantity, 7);
    assert_int_equal(r.cfg.log_level, CONFIG_LOG_WARN);
    assert_int_equal(r.cfg.max_connections, 1000000);
    assert_int_equal(r.cfg.connection_timeout_s, 1);
    assert_int_equal(r.cfg.redis_timeout_ms, 1);
    assert_int_equal(r.cfg.sold_out_recheck_ms, 1);
    assert_int_equal(r.cfg.shutdown_grace_ms, 600000);

    run_load(&r, NONE, NONE,
             "{\"_comment\": \"ignored\", \"_port\": {\"any\": [1]}, \"port\": 82,"
             " \"bind\": \"::\", \"redis\": \"redis://h\", \"admin_token\": \"x\","
             " \"threads\": 3, \"strategy\": \"single-lock\", \"lock_lease_ms\": 100,"
             " \"lock_wait_ms\": 10, \"hold_ms\": 2, \"max_quantity\": 4, \"log_level\": \"error\","
             " \"max_connections\": 5, \"connection_timeout_s\": 6, \"redis_timeout_ms\": 7,"
             " \"sold_out_recheck_ms\": 8, \"shutdown_grace_ms\": 9}");
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.port, 82);
    assert_string_equal(r.cfg.bind, "::");
    assert_string_equal(r.cfg.redis_url, "redis://h");
    assert_string_equal(r.cfg.admin_token, "x");
    assert_int_equal(r.cfg.threads, 3);
    assert_int_equal(r.cfg.strategy, STRATEGY_SINGLE_LOCK);
    assert_int_equal(r.cfg.lock_lease_ms, 100);
    assert_int_equal(r.cfg.lock_wait_ms, 10);
    assert_int_equal(r.cfg.hold_ms, 2);
    assert_int_equal(r.cfg.max_quantity, 4);
    assert_int_equal(r.cfg.log_level, CONFIG_LOG_ERROR);
    assert_int_equal(r.cfg.max_connections, 5);
    assert_int_equal(r.cfg.connection_timeout_s, 6);
    assert_int_equal(r.cfg.redis_timeout_ms, 7);
    assert_int_equal(r.cfg.sold_out_recheck_ms, 8);
    assert_int_equal(r.cfg.shutdown_grace_ms, 9);
    assert_true(strncmp(r.cfg.config_path, "/", 1) == 0);
}

/* ---- precedence ------------------------------------------------------------------------ */

static void test_precedence(void **state)
{
    (void)state;
    struct run r;
    const char *file = "{\"port\": 1001, \"lock_wait_ms\": 1001, \"hold_ms\": 1001}";
    const char *const env[] = {"INVENTORY_PORT=2002", "INVENTORY_LOCK_WAIT_MS=2002", NULL};

    run_load(&r, ARGS("--port", "3003"), env, file);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.port, 3003);         /* flag > env > file */
    assert_int_equal(r.cfg.lock_wait_ms, 2002); /* env > file */
    assert_int_equal(r.cfg.hold_ms, 1001);      /* file > default */
    assert_int_equal(r.cfg.lock_lease_ms, 10000);

    /* the last of a repeated flag wins; both spellings are the same flag */
    run_load(&r, ARGS("--port=1", "--port", "2", "--port=3"), NONE, NULL);
    assert_int_equal(r.cfg.port, 3);

    /* an empty environment variable is unset */
    run_load(&r, NONE, ARGS("INVENTORY_PORT=", "INVENTORY_ADMIN_TOKEN="), file);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.port, 1001);
    assert_string_equal(r.cfg.admin_token, "");

    /* null in the file means "not set here" */
    run_load(&r, NONE, NONE, "{\"port\": null, \"admin_token\": null, \"threads\": null}");
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.port, 8080);

    /* an invalid value is an error even where a later layer overrides it */
    run_load(&r, ARGS("--port", "80"), NONE, "{\"port\": 0}");
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.err, "port: "));
    run_load(&r, ARGS("--port", "80"), ARGS("INVENTORY_PORT=x"), NULL);
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.err, "(environment INVENTORY_PORT)"));
}

static void test_config_file_selection(void **state)
{
    (void)state;
    struct run r;
    char a[512], b[512], env_a[600], flag_b[600];
    temp_file("{\"port\": 1111}", a, sizeof(a));
    temp_file("{\"port\": 2222}", b, sizeof(b));
    snprintf(env_a, sizeof(env_a), "INVENTORY_CONFIG=%s", a);
    snprintf(flag_b, sizeof(flag_b), "--config=%s", b);

    run_load(&r, NONE, ARGS(env_a), NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.port, 1111);
    assert_string_equal(r.cfg.config_path, a);

    run_load(&r, ARGS(flag_b), ARGS(env_a), NULL); /* the flag names the file, not the env */
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.port, 2222);
    assert_string_equal(r.cfg.config_path, b);

    /* with --config given, a broken INVENTORY_CONFIG is not read */
    run_load(&r, ARGS(flag_b), ARGS("INVENTORY_CONFIG=/nonexistent/x.json"), NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.port, 2222);
    unlink(a);
    unlink(b);

    run_load(&r, NONE, ARGS("INVENTORY_CONFIG=/nonexistent/x.json"), NULL);
    assert_int_equal(r.rc, -1);
    assert_true(strncmp(r.err, "config: cannot read /nonexistent/x.json", 39) == 0);
}

/* ---- invalid input, table-driven ------------------------------------------------------- */

struct bad {
    const char *args[5];
    const char *env[3];
    const char *file;     /* config file content, or NULL */
    const char *prefix;   /* the message starts with this */
    const char *contains; /* and contains this (or NULL) */
};

static const struct bad bad_cases[] = {
    {{"--port", "abc"},
     {0},
     NULL,
     "port: must be an integer between 1 and 65535, got \"abc\" (flag --port)",
     NULL},
    {{"--port=0"}, {0}, NULL, "port: must be an integer between 1 and 65535, got \"0\"", NULL},
    {{"--port", "65536"}, {0}, NULL, "port: ", "got \"65536\""},
    {{"--port", "-1"}, {0}, NULL, "port: ", NULL},
    {{"--port", " 80"}, {0}, NULL, "port: ", NULL},
    {{"--port", "80 "}, {0}, NULL, "port: ", NULL},
    {{"--port", "80x"}, {0}, NULL, "port: ", NULL},
    {{"--port", "+80"}, {0}, NULL, "port: ", NULL},
    {{"--port", "0x50"}, {0}, NULL, "port: ", NULL},
    {{"--port="}, {0}, NULL, "port: ", "got \"\""},
    {{"--port", "99999999999999999999999"}, {0}, NULL, "port: ", NULL},
    {{"--threads", "0"}, {0}, NULL, "threads: must be an integer between 1 and 1024", NULL},
    {{"--threads", "1025"}, {0}, NULL, "threads: ", NULL},
    {{"--lock-lease-ms", "abc"},
     {0},
     NULL,
     "lock_lease_ms: must be an integer between 1 and 3600000, got \"abc\" (flag --lock-lease-ms)",
     NULL},
    {{"--lock-lease-ms", "0"}, {0}, NULL, "lock_lease_ms: ", NULL},
    {{"--lock-lease-ms", "3600001"}, {0}, NULL, "lock_lease_ms: ", NULL},
    {{"--lock-renewal", "2"},
     {0},
     NULL,
     "lock_renewal: must be an integer between 0 and 1, got \"2\" (flag --lock-renewal)",
     NULL},
    {{"--lock-renewal", "yes"}, {0}, NULL, "lock_renewal: ", NULL},
    {{"--lock-wait-ms", "-1"}, {0}, NULL, "lock_wait_ms: ", NULL},
    {{"--lock-wait-ms", "600001"}, {0}, NULL, "lock_wait_ms: ", NULL},
    {{"--hold-ms", "60001"}, {0}, NULL, "hold_ms: ", NULL},
    {{"--max-quantity", "0"}, {0}, NULL, "max_quantity: ", NULL},
    {{"--max-quantity", "1000001"}, {0}, NULL, "max_quantity: ", NULL},
    {{"--max-connections", "0"}, {0}, NULL, "max_connections: ", NULL},
    {{"--connection-timeout-s", "0"}, {0}, NULL, "connection_timeout_s: ", NULL},
    {{"--connection-timeout-s", "3601"}, {0}, NULL, "connection_timeout_s: ", NULL},
    {{"--redis-timeout-ms", "0"}, {0}, NULL, "redis_timeout_ms: ", NULL},
    {{"--sold-out-recheck-ms", "0"},
     {0},
     NULL,
     "sold_out_recheck_ms: must be an integer between 1 and 1000",
     NULL},
    {{"--sold-out-recheck-ms", "1001"}, {0}, NULL, "sold_out_recheck_ms: ", NULL},
    {{"--shutdown-grace-ms", "-5"}, {0}, NULL, "shutdown_grace_ms: ", NULL},
    {{"--bind", "localhost"},
     {0},
     NULL,
     "bind: must be an IPv4 or IPv6 address literal, got \"localhost\" (flag --bind)",
     NULL},
    {{"--bind", "1.2.3"}, {0}, NULL, "bind: ", NULL},
    {{"--bind", "::g"}, {0}, NULL, "bind: ", NULL},
    {{"--bind", "10.0.0.1:80"}, {0}, NULL, "bind: ", NULL},
    {{"--bind="}, {0}, NULL, "bind: ", NULL},
    {{"--redis", "http://h"}, {0}, NULL, "redis: invalid URL: must start with redis://", NULL},
    {{"--redis", "redis://"}, {0}, NULL, "redis: invalid URL: missing host", NULL},
    {{"--redis", "redis://h:0"}, {0}, NULL, "redis: invalid URL: port", NULL},
    {{"--redis", "redis://h:70000"}, {0}, NULL, "redis: invalid URL: port", NULL},
    {{"--redis", "redis://h:"}, {0}, NULL, "redis: invalid URL: port", NULL},
    {{"--redis", "redis://h/abc"}, {0}, NULL, "redis: invalid URL: db", NULL},
    {{"--redis", "redis://user@h"}, {0}, NULL, "redis: invalid URL: credentials", NULL},
    {{"--redis", "redis://[::1"}, {0}, NULL, "redis: invalid URL: unterminated", NULL},
    {{"--redis", "redis://[zz]:1"}, {0}, NULL, "redis: invalid URL: bad [IPv6]", NULL},
    {{"--redis", "redis://h o"}, {0}, NULL, "redis: invalid URL: bad character in host", NULL},
    {{"--redis", "redis://:%zz@h"}, {0}, NULL, "redis: invalid URL: bad password", NULL},
    {{"--redis", "unix://relative.sock"}, {0}, NULL, "redis: invalid URL: the unix socket", NULL},
    {{"--redis", "unix:///r.sock?x=1"}, {0}, NULL, "redis: invalid URL: only ?db=N", NULL},
    {{"--redis", "rediss://h"}, {0}, NULL, "redis: invalid URL: TLS", NULL},
    {{"--redis", ""}, {0}, NULL, "redis: invalid URL: empty", NULL},
    {{"--admin-token", ""}, {0}, NULL, "admin_token: must be 1 to 256 visible ASCII", NULL},
    {{"--admin-token", "a b"}, {0}, NULL, "admin_token: ", "(flag --admin-token)"},
    {{"--admin-token", "tok\x01"}, {0}, NULL, "admin_token: ", NULL},
    {{"--admin-token", "caf\xc3\xa9"}, {0}, NULL, "admin_token: ", NULL},
    {{"--strategy", "Segmented"},
     {0},
     NULL,
     "strategy: must be one of segmented, single-lock, atomic, got \"Segmented\"",
     NULL},
    {{"--strategy", "single_lock"}, {0}, NULL, "strategy: ", NULL},
    {{"--log-level", "verbose"},
     {0},
     NULL,
     "log_level: must be one of debug, info, warn, error, got \"verbose\"",
     NULL},
    {{"--prot", "80"}, {0}, NULL, "\"--prot\": unknown option, did you mean --port?", NULL},
    {{"--frobnicate"}, {0}, NULL, "\"--frobnicate\": unknown option (see --help)", NULL},
    {{"-p", "80"}, {0}, NULL, "\"-p\": unexpected argument", NULL},
    {{"serve"}, {0}, NULL, "\"serve\": unexpected argument", NULL},
    {{"--"}, {0}, NULL, "\"--\": unexpected argument", NULL},
    {{"--port"}, {0}, NULL, "--port: missing value", NULL},
    {{"--config="}, {0}, NULL, "config: must be a file path", NULL},
    {{0},
     {"INVENTORY_PORT=abc"},
     NULL,
     "port: must be an integer between 1 and 65535, got \"abc\" (environment INVENTORY_PORT)",
     NULL},
    {{0}, {"INVENTORY_STRATEGY=fast"}, NULL, "strategy: ", "(environment INVENTORY_STRATEGY)"},
    {{0},
     {"INVENTORY_REDIS_URL=redis://h:x"},
     NULL,
     "redis: ",
     "(environment INVENTORY_REDIS_URL)"},
    {{0}, {"INVENTORY_SOLD_OUT_RECHECK_MS=2000"}, NULL, "sold_out_recheck_ms: ", NULL},
    {{0},
     {0},
     "{\"lock_lease\": 5}",
     "\"lock_lease\": unknown key, did you mean \"lock_lease_ms\"?",
     "(config file /"},
    {{0}, {0}, "{\"colour\": \"blue\"}", "\"colour\": unknown key (config file", NULL},
    {{0}, {0}, "{\"config\": \"/x\"}", "\"config\": unknown key", NULL},
    {{0},
     {0},
     "{\"port\": \"8080\"}",
     "port: must be an integer between 1 and 65535, got \"8080\"",
     "(config file /"},
    {{0}, {0}, "{\"port\": 8080.0}", "port: ", "got 8080.0"},
    {{0}, {0}, "{\"port\": true}", "port: ", "got true"},
    {{0}, {0}, "{\"port\": [8080]}", "port: ", NULL},
    {{0}, {0}, "{\"port\": 99999999999999999999}", "config: invalid JSON in /", "line 1"},
    {{0}, {0}, "{\"bind\": 1}", "bind: must be a string, got 1", NULL},
    {{0}, {0}, "{\"admin_token\": 12345}", "admin_token: must be a string, got another type", NULL},
    {{0},
     {0},
     "{\"strategy\": \"atomic\", \"strategy\": \"segmented\"}",
     "config: invalid JSON in /",
     "duplicate"},
    {{0}, {0}, "[1, 2]", "config: ", "must hold one JSON object"},
    {{0}, {0}, "{\"port\": 80", "config: invalid JSON in /", NULL},
    {{0}, {0}, "", "config: invalid JSON in /", NULL},
    {{0}, {0}, "{\"redis\": \"redis://:hunter2@h:1:2\"}", "redis: invalid URL: ", NULL},
};

static void test_invalid_table(void **state)
{
    (void)state;
    size_t n = sizeof(bad_cases) / sizeof(bad_cases[0]);
    int failures = 0;
    for (size_t i = 0; i < n; i++) {
        const struct bad *c = &bad_cases[i];
        const char *args[6] = {0}, *env[4] = {0};
        memcpy(args, c->args, sizeof(c->args));
        memcpy(env, c->env, sizeof(c->env));
        struct run r;
        run_load(&r, args, env, c->file);
        bool ok = r.rc == -1 && strncmp(r.err, c->prefix, strlen(c->prefix)) == 0 &&
                  (!c->contains || strstr(r.err, c->contains));
        if (!ok) {
            print_error("case %zu (%s%s): rc %d, message \"%s\"; wanted prefix \"%s\"%s%s\n", i,
                        c->args[0]  ? c->args[0]
                        : c->env[0] ? c->env[0]
                                    : "file",
                        c->args[1] ? " ..." : "", r.rc, r.rc == -1 ? r.err : "", c->prefix,
                        c->contains ? " containing " : "", c->contains ? c->contains : "");
            failures++;
        }
    }
    print_message("  %zu invalid configurations checked\n", n);
    assert_int_equal(failures, 0);
}

static void test_secrets_not_echoed(void **state)
{
    (void)state;
    struct run r;
    run_load(&r, ARGS("--admin-token", "hunter2 with space"), NONE, NULL);
    assert_int_equal(r.rc, -1);
    assert_null(strstr(r.err, "hunter2"));
    run_load(&r, ARGS("--redis", "redis://:hunter2@h:99999"), NONE, NULL);
    assert_int_equal(r.rc, -1);
    assert_null(strstr(r.err, "hunter2"));
    run_load(&r, NONE, NONE, "{\"admin_token\": 5}");
    assert_int_equal(r.rc, -1);
    assert_null(strstr(r.err, "5 "));
}

/* Found by fuzz_config: a config file that is not valid JSON made a message with jansson's
 * quote of the text at the error: a newline in it (two lines), and a piece of a secret when
 * the error was inside the admin token or the Redis URL. */
static void test_file_syntax_errors_quote_nothing(void **state)
{
    (void)state;
    static const char *const files[] = {
        "{\"admin_token\": \"Sup3r-Secret\nValue\"}",             /* raw newline in the string */
        "{\"admin_token\": \"Sup3r-Secret-Value",                 /* truncated */
        "{\"redis\": \"redis://:Sup3r-Secret@h:1\" \"port\": 1}", /* missing comma */
        "{\"admin_token\": Sup3r-Secret}",                        /* not a string */
    };
    struct run r;
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        run_load(&r, NONE, NONE, files[i]);
        assert_int_equal(r.rc, -1);
        assert_true(strncmp(r.err, "config: invalid JSON in ", 24) == 0);
        if (strstr(r.err, "Sup3r") != NULL)
            fail_msg("file %zu: the message quotes the secret: %s", i, r.err);
        for (const char *p = r.err; *p; p++)
            if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
                fail_msg("file %zu: byte 0x%02x in the message: %s", i, (unsigned char)*p, r.err);
    }
    /* A duplicate key still names the key. */
    run_load(&r, NONE, NONE, "{\"port\": 1, \"port\": 2}");
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.err, "port"));
}

static void test_small_error_buffer(void **state)
{
    (void)state;
    struct config cfg;
    char err[8];
    char a0[] = "inventoryd", a1[] = "--port", a2[] = "abc";
    char *argv[] = {a0, a1, a2, NULL};
    char *envp[] = {NULL};
    assert_int_equal(config_load(&cfg, 3, argv, envp, err, sizeof(err)), -1);
    assert_string_equal(err, "port: m");
    assert_int_equal(config_load(&cfg, 3, argv, envp, NULL, 0), -1);
}

/* ---- Redis URL grammar ----------------------------------------------------------------- */

static void test_redis_urls(void **state)
{
    (void)state;
    static const char *const good[] = {
        "redis://127.0.0.1:6379",
        "redis://localhost",
        "redis://h:1/0",
        "redis://h/",
        "redis://my_host-1.example.com:6380/15",
        "redis://:pw@h:6379/2",
        "redis://user:p%40ss@h",
        "redis://user:pa:ss@h",
        "redis://[::1]:6379",
        "redis://[::1]",
        "redis://[2001:db8::1]/3",
        "unix:///tmp/redis.sock",
        "unix:///tmp/r.sock?db=3",
        "redis-cluster://127.0.0.1:7001",
        "redis-cluster://127.0.0.1:7001,127.0.0.1:7002,[::1]:7003,h",
        "redis-cluster://:pw@h1:7000,h2:7000/0",
        "redis-cluster://u:p%40w@h1/",
    };
    static const char *const bad[] = {
        "redis://h:65536",
        "redis://h/100001",
        "redis://[::1]x",
        "redis://:pw@",
        "redis://u:%4@h",
        "REDIS://h",
        "redis:/h",
        "unix://",
        "redis://h\x7f",
        "tcp://h:1",
        "redis-cluster://",
        "redis-cluster://h:1,",
        "redis-cluster://h:1,,h:2",
        "redis-cluster://h:1/1",
        "redis-cluster://h:0",
        "redis-cluster://h:1,[::1",
        "redis-cluster://a:1,b:1,c:1,d:1,e:1,f:1,g:1,h:1,i:1,j:1,k:1,l:1,m:1,n:1,o:1,p:1,q:1",
    };
    char why[128];
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        if (!config_redis_url_valid(good[i], why, sizeof(why)))
            fail_msg("%s refused: %s", good[i], why);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why[0] = '\0';
        if (config_redis_url_valid(bad[i], why, sizeof(why)))
            fail_msg("%s accepted", bad[i]);
        assert_true(strlen(why) > 0);
    }
    assert_false(config_redis_url_valid(NULL, NULL, 0));
    char longurl[1100] = "redis://";
    memset(longurl + 8, 'h', 1050);
    longurl[1058] = '\0';
    assert_false(config_redis_url_valid(longurl, why, sizeof(why)));
}

/* A cluster URL's password is masked too; single-lock is refused with a cluster (its SKU lock
 * guards keys of other slots); --redis-replica-acks is read and bounded. */
static void test_cluster_settings(void **state)
{
    (void)state;
    struct run r;
    run_load(
        &r,
        ARGS("--redis", "redis-cluster://:hunter2@h1:7000,h2:7001", "--redis-replica-acks", "1"),
        NONE, NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.redis_replica_acks, 1);
    char buf[2048];
    assert_true(config_describe(&r.cfg, buf, sizeof(buf)) > 0);
    assert_null(strstr(buf, "hunter2"));
    assert_non_null(strstr(buf, "redis-cluster://:***@h1:7000,h2:7001"));

    run_load(&r, ARGS("--redis", "redis-cluster://h1:7000", "--strategy", "single-lock"), NONE,
             NULL);
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.err, "single-lock"));
    run_load(&r, ARGS("--redis", "redis-cluster://h1:7000", "--strategy", "atomic"), NONE, NULL);
    assert_int_equal(r.rc, 0);
    run_load(&r, ARGS("--redis-replica-acks", "17"), NONE, NULL);
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.err, "redis_replica_acks"));
    run_load(&r, NONE, ARGS("INVENTORY_REDIS_REPLICA_ACKS=2"), NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.redis_replica_acks, 2);
}

/* ---- describe -------------------------------------------------------------------------- */

static void test_describe(void **state)
{
    (void)state;
    struct run r;
    run_load(&r, ARGS("--admin-token", "topsecret", "--redis", "redis://bob:hunter2@h:1/2"), NONE,
             NULL);
    assert_int_equal(r.rc, 0);
    char buf[2048];
    int n = config_describe(&r.cfg, buf, sizeof(buf));
    assert_true(n > 0 && (size_t)n == strlen(buf));
    assert_null(strstr(buf, "topsecret"));
    assert_null(strstr(buf, "hunter2"));
    assert_null(strchr(buf, '\n')); /* one log line */
    json_error_t je;
    json_t *o = json_loads(buf, 0, &je);
    if (!o)
        fail_msg("describe is not JSON: %s: %s", je.text, buf);
    assert_string_equal(json_string_value(json_object_get(o, "admin_token")), "***");
    assert_string_equal(json_string_value(json_object_get(o, "redis")), "redis://bob:***@h:1/2");
    assert_int_equal(json_integer_value(json_object_get(o, "redis_replica_acks")), 0);
    assert_true(json_is_null(json_object_get(o, "config")));
    assert_string_equal(json_string_value(json_object_get(o, "strategy")), "segmented");
    assert_string_equal(json_string_value(json_object_get(o, "log_level")), "info");
    assert_int_equal(json_integer_value(json_object_get(o, "port")), 8080);
    assert_int_equal(json_integer_value(json_object_get(o, "sold_out_recheck_ms")), 500);
    /* exactly the config-file keys, plus "config" */
    assert_int_equal(json_object_size(o), config_key_count());
    for (size_t i = 1; i < config_key_count(); i++)
        if (!json_object_get(o, config_key_at(i)->name))
            fail_msg("describe lacks %s", config_key_at(i)->name);
    json_decref(o);

    /* no token: null; too small a buffer: "" and the needed length */
    run_load(&r, NONE, NONE, NULL);
    n = config_describe(&r.cfg, buf, sizeof(buf));
    assert_non_null(strstr(buf, "\"admin_token\":null"));
    char small[16] = "junk";
    assert_int_equal(config_describe(&r.cfg, small, sizeof(small)), n);
    assert_string_equal(small, "");
    assert_int_equal(config_describe(&r.cfg, NULL, 0), n);
    char exact[2048];
    assert_int_equal(config_describe(&r.cfg, exact, (size_t)n + 1), n);
    assert_string_equal(exact, buf);
    assert_int_equal(config_describe(&r.cfg, exact, (size_t)n), n);
    assert_string_equal(exact, "");

    assert_string_equal(config_strategy_name(STRATEGY_SINGLE_LOCK), "single-lock");
    assert_string_equal(config_strategy_name((enum config_strategy)9), "unknown");
    assert_string_equal(config_log_level_name(CONFIG_LOG_WARN), "warn");
    assert_string_equal(config_log_level_name((enum config_log_level) - 1), "unknown");
}

/* ---- checked-in files: exactly the table's options, with the table's defaults -------------- */

/* The row of config_options.h whose flag is flag[0..n), or -1. */
static int row_of_flag(const char *flag, size_t n)
{
    for (size_t i = 0; i < config_key_count(); i++) {
        const struct config_key *k = config_key_at(i);
        if (strlen(k->flag) == n && strncmp(k->flag, flag, n) == 0)
            return (int)i;
    }
    return -1;
}

/* An INT row (its accepted values are its bounds "lo..hi", which every document must give). */
static bool is_int_row(const struct config_key *k)
{
    return strcmp(k->arg, "N") == 0;
}

/* s[0..n) without leading and trailing blanks and backticks, cut before " (" (a note after
 * the value: "0 (off)", "none (the locks live on --redis)"), into buf. */
static const char *doc_value(const char *s, size_t n, char *buf, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < cap; i++)
        if (s[i] != '`')
            buf[o++] = s[i];
    buf[o] = '\0';
    char *note = strstr(buf, " (");
    if (note)
        *note = '\0';
    char *p = buf;
    while (*p == ' ')
        p++;
    memmove(buf, p, strlen(p) + 1);
    for (size_t l = strlen(buf); l > 0 && (buf[l - 1] == ' ' || buf[l - 1] == '.'); l--)
        buf[l - 1] = '\0';
    return buf;
}

/* Counts a document's entry for row i: an error when it is the second. */
static int seen_once(int *seen, int i, const char *doc)
{
    if (seen[i]++ == 0)
        return 0;
    print_error("%s: %s is listed twice\n", doc, config_key_at((size_t)i)->flag);
    return 1;
}

/* Every row is seen: the number of rows missing from doc (each printed). */
static int missing_rows(const int *seen, const char *doc)
{
    int failures = 0;
    for (size_t i = 0; i < config_key_count(); i++)
        if (!seen[i]) {
            print_error("%s lacks %s (a row of config_options.h)\n", doc, config_key_at(i)->flag);
            failures++;
        }
    return failures;
}

/* want == got, else an error naming doc, the flag and what differs. */
static int same_text(const char *doc, const char *flag, const char *what, const char *want,
                     const char *got)
{
    if (strcmp(want, got) == 0)
        return 0;
    print_error("%s, %s: %s is \"%s\", the table says \"%s\"\n", doc, flag, what, got, want);
    return 1;
}

/* The shipped config file loads to the defaults, holds exactly the table's keys, and each key's
 * "_key" comment names its flag, its variable, its default and (integers) its bounds. */
static void test_shipped_config_file(void **state)
{
    (void)state;
    char path[1024], flag[1100];
    snprintf(path, sizeof(path), "%s/config/inventoryd.json", INVENTORY_SOURCE_DIR);
    snprintf(flag, sizeof(flag), "--config=%s", path);

    /* it loads, and it describes the defaults */
    struct run r;
    run_load(&r, ARGS(flag), NONE, NULL);
    if (r.rc != 0)
        fail_msg("config/inventoryd.json: %s", r.err);
    struct config d;
    config_defaults(&d);
    snprintf(d.config_path, sizeof(d.config_path), "%s", path);
    assert_memory_equal(&d, &r.cfg, sizeof(d));

    json_error_t je;
    json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    assert_non_null(o);
    int failures = 0;
    const char *name;
    json_t *value;
    json_object_foreach(o, name, value)
    {
        bool known = name[0] == '_';
        for (size_t i = 0; i < config_key_count() && !known; i++)
            known = config_key_at(i)->name && strcmp(config_key_at(i)->name, name) == 0;
        if (!known) {
            print_error("config/inventoryd.json: key %s is no row of config_options.h\n", name);
            failures++;
        }
    }
    for (size_t i = 0; i < config_key_count(); i++) {
        const struct config_key *k = config_key_at(i);
        if (!k->name)
            continue; /* --config */
        char comment[80], env[80];
        snprintf(comment, sizeof(comment), "_%s", k->name);
        snprintf(env, sizeof(env), "env %s", k->env);
        const char *c = json_string_value(json_object_get(o, comment));
        bool ok = json_object_get(o, k->name) && c && strstr(c, k->flag) && strstr(c, env) &&
                  (strcmp(k->def, "none") == 0 || strstr(c, k->def)) &&
                  (!is_int_row(k) || strstr(c, k->range));
        if (!ok) {
            print_error("config/inventoryd.json: key %s with a %s comment naming %s, %s, the "
                        "default %s%s%s\n",
                        k->name, comment, k->flag, env, k->def, is_int_row(k) ? " and " : "",
                        is_int_row(k) ? k->range : "");
            failures++;
        }
    }
    json_decref(o);
    assert_int_equal(failures, 0);
}

/* One row of docs/configuration.md's key table: | key | `--flag ARG` | `ENV` | default |
 * accepted | meaning |. Returns the number of disagreements with the table. */
static int check_md_row(const char *line, int *seen)
{
    const char *cell[6];
    size_t len[6];
    const char *p = line + 1;
    for (int c = 0; c < 6; c++) {
        const char *bar = strchr(p, '|');
        const char *eol = strchr(p, '\n');
        if (!bar || (eol && bar > eol)) {
            print_error("docs/configuration.md: a row of fewer than 6 cells: %.60s\n", line);
            return 1;
        }
        cell[c] = p;
        len[c] = (size_t)(bar - p);
        p = bar + 1;
    }
    char flag[128], key[128], env[128], def[256], accepted[512], want[160];
    doc_value(cell[1], len[1], flag, sizeof(flag));
    int i = row_of_flag(flag, strcspn(flag, " "));
    if (i < 0) {
        print_error("docs/configuration.md: %s is no row of config_options.h\n", flag);
        return 1;
    }
    const struct config_key *k = config_key_at((size_t)i);
    const char *doc = "docs/configuration.md";
    snprintf(want, sizeof(want), "%s%s%s", k->flag, k->arg[0] ? " " : "", k->arg);
    int failures = seen_once(seen, i, doc);
    failures += same_text(doc, k->flag, "the flag", want, flag);
    failures += same_text(doc, k->flag, "the key", k->name ? k->name : "—",
                          doc_value(cell[0], len[0], key, sizeof(key)));
    failures += same_text(doc, k->flag, "the variable", k->env,
                          doc_value(cell[2], len[2], env, sizeof(env)));
    failures += same_text(doc, k->flag, "the default", k->def,
                          doc_value(cell[3], len[3], def, sizeof(def)));
    if (is_int_row(k))
        failures += same_text(doc, k->flag, "the range", k->range,
                              doc_value(cell[4], len[4], accepted, sizeof(accepted)));
    return failures;
}

static void test_configuration_md_lists_the_table(void **state)
{
    (void)state;
    char *doc = tree_text("docs/configuration.md");
    const char *table = strstr(doc, "\n## Keys\n");
    assert_non_null(table);
    const char *end = strstr(table + 1, "\n## ");
    int seen[64] = {0}, failures = 0, rows = 0;
    assert_true(config_key_count() <= 64);
    for (const char *line = table + 1; line && (!end || line < end); line = strchr(line, '\n')) {
        line += line[0] == '\n';
        if (strncmp(line, "| ", 2) != 0 || strncmp(line, "| config-file key", 17) == 0)
            continue;
        failures += check_md_row(line, seen);
        rows++;
    }
    failures += missing_rows(seen, "docs/configuration.md");
    print_message("  docs/configuration.md: %d rows checked\n", rows);
    free(doc);
    assert_int_equal(failures, 0);
}

/* Copies man page text s[0..n) without its font escapes (\fB, \fI, \fR, \fP) and with \- as
 * -, into buf. */
static char *untroff(const char *s, size_t n, char *buf, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < cap; i++) {
        if (s[i] == '\\' && i + 2 < n && s[i + 1] == 'f') {
            i += 2;
        } else if (s[i] == '\\' && i + 1 < n && s[i + 1] == '-') {
            buf[o++] = '-';
            i++;
        } else {
            buf[o++] = s[i];
        }
    }
    buf[o] = '\0';
    return buf;
}

/* The text after label in entry, up to the next ". " or "; " or the end of its line, or "". */
static const char *man_field(const char *entry, const char *label, char *buf, size_t cap)
{
    const char *p = strstr(entry, label);
    buf[0] = '\0';
    if (!p)
        return buf;
    p += strlen(label);
    size_t n = strcspn(p, "\n");
    static const char *const stops[] = {". ", "; "};
    for (size_t i = 0; i < 2; i++) {
        const char *stop = strstr(p, stops[i]);
        if (stop && (size_t)(stop - p) < n)
            n = (size_t)(stop - p);
    }
    return doc_value(p, n, buf, cap);
}

/* One .TP entry of the man page's OPTIONS (its untroffed text, the head line first). */
static int check_man_entry(const char *entry, int *seen)
{
    const char *doc = "docs/inventoryd.1";
    char head[256], want[160], buf[512];
    snprintf(head, sizeof(head), "%.*s", (int)strcspn(entry, "\n"), entry);
    const char *flag = strstr(head, "--");
    if (!flag || strncmp(head, ".B", 2) != 0) {
        print_error("%s: an entry without a flag: %s\n", doc, head);
        return 1;
    }
    int i = row_of_flag(flag, strcspn(flag, " \","));
    if (i < 0) { /* a mode (--help, ...): --help lists it */
        char mode[80];
        snprintf(mode, sizeof(mode), "%.*s", (int)strcspn(flag, " \","), flag);
        if (strstr(config_usage(), mode))
            return 0;
        print_error("%s: %s is no row of config_options.h and no mode\n", doc, mode);
        return 1;
    }
    const struct config_key *k = config_key_at((size_t)i);
    snprintf(want, sizeof(want), ".B %s%s%s", k->flag, k->arg[0] ? " " : "", k->arg);
    int failures = seen_once(seen, i, doc);
    failures += same_text(doc, k->flag, "the head", want, head);
    failures += same_text(doc, k->flag, "the default", k->def,
                          man_field(entry, "Default: ", buf, sizeof(buf)));
    failures += same_text(doc, k->flag, "the variable", k->env,
                          man_field(entry, "Environment: ", buf, sizeof(buf)));
    const char *key = strstr(entry, "; config-file key: ");
    failures +=
        same_text(doc, k->flag, "the key", k->name ? k->name : "(none)",
                  key ? doc_value(key + 19, strcspn(key + 19, "\n"), buf, sizeof(buf)) : "(none)");
    if (is_int_row(k))
        failures += same_text(doc, k->flag, "the range", k->range,
                              man_field(entry, "Accepted: ", buf, sizeof(buf)));
    return failures;
}

static void test_man_page_lists_the_table(void **state)
{
    (void)state;
    char *raw = tree_text("docs/inventoryd.1");
    const char *from = strstr(raw, "\n.SH OPTIONS\n"), *to = strstr(raw, "\n.SH ENVIRONMENT\n");
    assert_true(from && to && from < to);
    size_t cap = (size_t)(to - from) + 1;
    char *text = malloc(cap);
    assert_non_null(text);
    untroff(from, (size_t)(to - from), text, cap);
    int seen[64] = {0}, failures = 0, entries = 0;
    char *entry = strstr(text, "\n.TP\n");
    while (entry) {
        entry += 5;
        char *next = strstr(entry, "\n.TP\n");
        if (next)
            *next = '\0';
        failures += check_man_entry(entry, seen);
        entries++;
        entry = next ? next : NULL;
        if (next)
            *next = '\n';
    }
    failures += missing_rows(seen, "docs/inventoryd.1");
    print_message("  docs/inventoryd.1: %d entries checked\n", entries);
    free(text);
    free(raw);
    assert_int_equal(failures, 0);
}

/* ---- issue #10: secret files, admin_allow_loopback, trusted_proxies, --healthcheck ------ */

static void test_secret_files(void **state)
{
    (void)state;
    char tok[512], url[512], bad[512], empty[512];
    temp_file("Fil3-T0ken\n", tok, sizeof(tok));
    temp_file("redis://:Sekr1t@10.0.0.5:6380/2\r\n", url, sizeof(url));
    temp_file("Sup3r secret with spaces\n", bad, sizeof(bad));
    temp_file("\n", empty, sizeof(empty));
    struct run r;

    /* Flags: the file's contents without the trailing newline. */
    run_load(&r, ARGS("--admin-token-file", tok, "--redis-url-file", url), NONE, NULL);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.cfg.admin_token, "Fil3-T0ken");
    assert_string_equal(r.cfg.admin_token_file, tok);
    assert_string_equal(r.cfg.redis_url, "redis://:Sekr1t@10.0.0.5:6380/2");
    assert_string_equal(r.cfg.redis_url_file, url);
    char desc[4096];
    assert_true(config_describe(&r.cfg, desc, sizeof(desc)) > 0);
    assert_null(strstr(desc, "Fil3-T0ken"));
    assert_null(strstr(desc, "Sekr1t"));

    /* Environment, and a later flag value replacing a file. */
    char e1[600], e2[600];
    snprintf(e1, sizeof(e1), "INVENTORY_ADMIN_TOKEN_FILE=%s", tok);
    snprintf(e2, sizeof(e2), "INVENTORY_REDIS_URL_FILE=%s", url);
    run_load(&r, ARGS("--admin-token", "flag-wins"), ((const char *const[]){e1, e2, NULL}), NULL);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.cfg.admin_token, "flag-wins");
    assert_string_equal(r.cfg.admin_token_file, "");
    assert_string_equal(r.cfg.redis_url, "redis://:Sekr1t@10.0.0.5:6380/2");

    /* Config file key. */
    char json[1200];
    snprintf(json, sizeof(json), "{\"admin_token_file\": \"%s\", \"redis_url_file\": \"%s\"}", tok,
             url);
    run_load(&r, NONE, NONE, json);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.cfg.admin_token, "Fil3-T0ken");

    /* Both forms of one secret in one layer: ambiguous. */
    run_load(&r, NONE, ((const char *const[]){e1, "INVENTORY_ADMIN_TOKEN=x", NULL}), NULL);
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.err, "admin_token: both INVENTORY_ADMIN_TOKEN and "));
    snprintf(json, sizeof(json), "{\"redis\": \"redis://h\", \"redis_url_file\": \"%s\"}", url);
    run_load(&r, NONE, NONE, json);
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.err, "redis: both"));

    /* Bad contents and missing files: named, contents never quoted. */
    run_load(&r, ARGS("--admin-token-file", bad), NONE, NULL);
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.err, "admin_token_file: "));
    assert_non_null(strstr(r.err, "(flag --admin-token-file)"));
    assert_null(strstr(r.err, "Sup3r"));
    run_load(&r, ARGS("--redis-url-file", bad), NONE, NULL);
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.err, "redis_url_file: "));
    assert_null(strstr(r.err, "Sup3r"));
    run_load(&r, ARGS("--admin-token-file", empty), NONE, NULL);
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.err, "empty"));
    /* Not a regular file (a FIFO or a terminal would block the start-up): refused at once. */
    run_load(&r, ARGS("--admin-token-file", "/dev/null"), NONE, NULL);
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.err, "not a regular file"));
    run_load(&r, ARGS("--admin-token-file", "/nonexistent/inventoryd-token"), NONE, NULL);
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.err, "admin_token_file: cannot read /nonexistent/inventoryd-token"));
    unlink(tok);
    unlink(url);
    unlink(bad);
    unlink(empty);
}

static void test_admin_allow_loopback(void **state)
{
    (void)state;
    struct run r;
    run_load(&r, NONE, NONE, NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.admin_allow_loopback, 0);
    /* A bare switch: it takes no value, the next argument is a flag again. */
    run_load(&r, ARGS("--admin-allow-loopback", "--port", "9000"), NONE, NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.admin_allow_loopback, 1);
    assert_int_equal(r.cfg.port, 9000);
    run_load(&r, ARGS("--admin-allow-loopback", "--admin-allow-loopback=0"), NONE, NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.admin_allow_loopback, 0);
    run_load(&r, NONE, ARGS("INVENTORY_ADMIN_ALLOW_LOOPBACK=1"), NULL);
    assert_int_equal(r.cfg.admin_allow_loopback, 1);
    run_load(&r, NONE, NONE, "{\"admin_allow_loopback\": true}");
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.admin_allow_loopback, 1);
    run_load(&r, ARGS("--admin-allow-loopback=yes"), NONE, NULL);
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.err, "admin_allow_loopback: must be 0 or 1"));
    run_load(&r, NONE, NONE, "{\"admin_allow_loopback\": \"true\"}");
    assert_int_equal(r.rc, -1);
}

static void test_trusted_proxies(void **state)
{
    (void)state;
    struct run r;
    run_load(&r, ARGS("--trusted-proxies", "127.0.0.1, 10.0.0.0/8 fd00::/8,::1/128"), NONE, NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.trusted_proxies.n, 4);
    assert_string_equal(r.cfg.trusted_proxies_text, "127.0.0.1, 10.0.0.0/8 fd00::/8,::1/128");
    run_load(&r, NONE, ARGS("INVENTORY_TRUSTED_PROXIES=192.168.0.0/16"), NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.trusted_proxies.n, 1);
    run_load(&r, NONE, NONE, "{\"trusted_proxies\": \"\"}");
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.trusted_proxies.n, 0);
    static const char *const bad[] = {"10.0.0.0/33", "example.com", "::1/129", "1.2.3.4/", "1.2.3"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        run_load(&r, ARGS("--trusted-proxies", bad[i]), NONE, NULL);
        if (r.rc != -1 || strncmp(r.err, "trusted_proxies: ", 17) != 0)
            fail_msg("--trusted-proxies %s: rc %d \"%s\"", bad[i], r.rc, r.err);
    }
}

/* --lock-redis: 1..15 URLs separated by commas, each checked as --redis is; passwords are not
 * echoed; config_lock_redis_url hands them out one by one. */
static void test_lock_redis(void **state)
{
    (void)state;
    struct run r;
    run_load(&r, NONE, NONE, NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.lock_redis_n, 0);
    run_load(&r, ARGS("--lock-redis", "redis://a:1,redis://:pw@b:2/3,unix:///run/c.sock"), NONE,
             NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.lock_redis_n, 3);
    char url[CONFIG_REDIS_URL_MAX];
    assert_int_equal(config_lock_redis_url(&r.cfg, 0, url, sizeof url), 0);
    assert_string_equal(url, "redis://a:1");
    assert_int_equal(config_lock_redis_url(&r.cfg, 1, url, sizeof url), 0);
    assert_string_equal(url, "redis://:pw@b:2/3");
    assert_int_equal(config_lock_redis_url(&r.cfg, 2, url, sizeof url), 0);
    assert_string_equal(url, "unix:///run/c.sock");
    assert_int_equal(config_lock_redis_url(&r.cfg, 3, url, sizeof url), -1);
    assert_int_equal(config_lock_redis_url(&r.cfg, -1, url, sizeof url), -1);
    char buf[4096];
    assert_true(config_describe(&r.cfg, buf, sizeof buf) > 0);
    assert_non_null(strstr(buf, "\"lock_redis\":3"));
    assert_null(strstr(buf, "pw@"));
    run_load(&r, NONE, ARGS("INVENTORY_LOCK_REDIS=redis://x:1"), NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.lock_redis_n, 1);
    run_load(&r, NONE, NONE, "{\"lock_redis\": \"redis://x:1,redis://y:2\"}");
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.lock_redis_n, 2);
    static const char *const bad[] = {
        "",
        "redis://a:1,",
        ",redis://a:1",
        "redis://a:1,,redis://b:2",
        "http://a:1",
        "redis://:s3cret@a:99999",
        "redis://1:1,redis://2:1,redis://3:1,redis://4:1,redis://5:1,"
        "redis://6:1,redis://7:1,redis://8:1,redis://9:1,redis://10:1,"
        "redis://11:1,redis://12:1,redis://13:1,redis://14:1,"
        "redis://15:1,redis://16:1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        run_load(&r, ARGS("--lock-redis", bad[i]), NONE, NULL);
        if (r.rc != -1 || strncmp(r.err, "lock_redis: ", 12) != 0 || strstr(r.err, "s3cret"))
            fail_msg("--lock-redis %s: rc %d \"%s\"", bad[i], r.rc, r.err);
    }
}

/* --lock-mysql: one mysql:// URL (lockcore's parser); the password is never echoed nor shown;
 * not together with --lock-redis. */
static void test_lock_mysql(void **state)
{
    (void)state;
    struct run r;
    run_load(&r, ARGS("--lock-mysql", "mysql://u:s3cret@db.example:3307/locks"), NONE, NULL);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.cfg.lock_mysql, "mysql://u:s3cret@db.example:3307/locks");
    char buf[4096];
    assert_true(config_describe(&r.cfg, buf, sizeof buf) > 0);
    assert_non_null(strstr(buf, "\"lock_mysql\":\"mysql://***@db.example:3307/locks\""));
    assert_null(strstr(buf, "s3cret"));
    run_load(&r, NONE, ARGS("INVENTORY_LOCK_MYSQL=mysql://u@h/d"), NULL);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.cfg.lock_mysql, "mysql://u@h/d");
    run_load(&r, ARGS("--lock-mysql", "mysql://u:s3cret@h/d", "--lock-redis", "redis://a:1"), NONE,
             NULL);
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.err, "lock_mysql"));
    static const char *const bad[] = {"",
                                      "mysql://",
                                      "redis://u:s3cret@h/d",
                                      "mysql://u:s3cret@h",
                                      "mysql://u:s3cret@h:0/d",
                                      "mysql://u:s3cret@h/d;drop",
                                      "mysql://:s3cret@h/d",
                                      "mysql://u:s3cret%4@h/d"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        run_load(&r, ARGS("--lock-mysql", bad[i]), NONE, NULL);
        if (r.rc != -1 || strncmp(r.err, "lock_mysql: ", 12) != 0 || strstr(r.err, "s3cret"))
            fail_msg("--lock-mysql %s: rc %d \"%s\"", bad[i], r.rc, r.err);
    }
}

/* --lock-zookeeper: 1..15 HOST:PORT separated by commas (no chroot, no spaces), and never
 * together with --lock-redis. */
static void test_lock_zookeeper(void **state)
{
    (void)state;
    struct run r;
    run_load(&r, NONE, NONE, NULL);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.cfg.lock_zookeeper, "");
    run_load(&r, ARGS("--lock-zookeeper", "zk1:2181,10.0.0.2:2182,[::1]:2183"), NONE, NULL);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.cfg.lock_zookeeper, "zk1:2181,10.0.0.2:2182,[::1]:2183");
    run_load(&r, NONE, ARGS("INVENTORY_LOCK_ZOOKEEPER=zk:1"), NULL);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.cfg.lock_zookeeper, "zk:1");
    run_load(&r, NONE, NONE, "{\"lock_zookeeper\": \"a:1,b:2\"}");
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.cfg.lock_zookeeper, "a:1,b:2");
    static const char *const bad[] = {"",
                                      "zk",
                                      "zk:",
                                      ":2181",
                                      "zk:0",
                                      "zk:65536",
                                      "zk:21x",
                                      "zk:2181,",
                                      ",zk:2181",
                                      "zk:2181/chroot",
                                      "z k:2181",
                                      "a:1,a:2,a:3,a:4,a:5,a:6,a:7,a:8,a:9,a:10,a:11,a:12,a:13,"
                                      "a:14,a:15,a:16"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        run_load(&r, ARGS("--lock-zookeeper", bad[i]), NONE, NULL);
        if (r.rc != -1 || strncmp(r.err, "lock_zookeeper: ", 16) != 0)
            fail_msg("--lock-zookeeper %s: rc %d \"%s\"", bad[i], r.rc, r.err);
    }
    run_load(&r, ARGS("--lock-zookeeper", "zk:2181", "--lock-redis", "redis://a:1"), NONE, NULL);
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.err, "set one"));
}

static void test_healthcheck_action(void **state)
{
    (void)state;
    struct run r;
    run_load(&r, ARGS("--port", "9123", "--healthcheck", "--bind", "127.0.0.2"), NONE, NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.cfg.action, CONFIG_ACTION_HEALTHCHECK);
    assert_int_equal(r.cfg.port, 9123);
    assert_string_equal(r.cfg.bind, "127.0.0.2");
    run_load(&r, ARGS("--healthcheck=1"), NONE, NULL);
    assert_int_equal(r.rc, -1);
}

/* CONFIG_RECHECK_MAX_MS is the upper bound of sold_out_recheck_ms (stock.c's wait before a
 * rule change's answer relies on no instance caching rules longer). */
static void test_recheck_max_is_the_row_bound(void **state)
{
    (void)state;
    char want[64];
    snprintf(want, sizeof(want), "1..%d", CONFIG_RECHECK_MAX_MS);
    int found = 0;
    for (size_t i = 0; i < config_key_count(); i++) {
        const struct config_key *k = config_key_at(i);
        if (k->name && strcmp(k->name, "sold_out_recheck_ms") == 0) {
            assert_non_null(k->range);
            assert_string_equal(k->range, want);
            found = 1;
        }
    }
    assert_true(found);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_help_version),
        cmocka_unit_test(test_every_key_every_layer),
        cmocka_unit_test(test_precedence),
        cmocka_unit_test(test_config_file_selection),
        cmocka_unit_test(test_invalid_table),
        cmocka_unit_test(test_secrets_not_echoed),
        cmocka_unit_test(test_file_syntax_errors_quote_nothing),
        cmocka_unit_test(test_small_error_buffer),
        cmocka_unit_test(test_recheck_max_is_the_row_bound),
        cmocka_unit_test(test_redis_urls),
        cmocka_unit_test(test_cluster_settings),
        cmocka_unit_test(test_describe),
        cmocka_unit_test(test_shipped_config_file),
        cmocka_unit_test(test_configuration_md_lists_the_table),
        cmocka_unit_test(test_man_page_lists_the_table),
        cmocka_unit_test(test_secret_files),
        cmocka_unit_test(test_admin_allow_loopback),
        cmocka_unit_test(test_trusted_proxies),
        cmocka_unit_test(test_healthcheck_action),
        cmocka_unit_test(test_lock_redis),
        cmocka_unit_test(test_lock_mysql),
        cmocka_unit_test(test_lock_zookeeper),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
