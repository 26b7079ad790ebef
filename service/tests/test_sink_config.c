/*
 * inventory-sink's settings (service/src/sink/sink_config.c): the database URL parser, the
 * defaults, and the precedence flags > environment > config file; every bad input is refused
 * with a message that names it.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sink_config.h"
#include "tree_text.h"

static void test_db_url_parses(void **state)
{
    (void)state;
    lc_mysql_url u;
    char err[256];
    assert_int_equal(
        sink_db_url_parse("mysql://sink:p%40ss@db.example:3307/shop", &u, err, sizeof err), 0);
    assert_string_equal(u.user, "sink");
    assert_string_equal(u.password, "p@ss");
    assert_string_equal(u.host, "db.example");
    assert_int_equal(u.port, 3307);
    assert_string_equal(u.database, "shop");
    assert_int_equal(sink_db_url_parse("mysql://root@127.0.0.1/orders_1", &u, err, sizeof err), 0);
    assert_string_equal(u.password, "");
    assert_int_equal(u.port, 3306);
    assert_int_equal(sink_db_url_parse("mysql://a:b@[::1]:3310/x", &u, err, sizeof err), 0);
    assert_string_equal(u.host, "::1");
    assert_int_equal(u.port, 3310);
}

static void test_db_url_refuses_bad_ones(void **state)
{
    (void)state;
    static const struct {
        const char *url, *why;
    } bad[] = {
        {"postgres://a:b@h/db", "mysql://"}, {"mysql://h/db", "user[:password]@"},
        {"mysql://:pw@h/db", "user name"},   {"mysql://a:b@h", "user[:password]@"},
        {"mysql://a:b@h/", "database name"}, {"mysql://a:b@h/my-db", "database name"},
        {"mysql://a:b@h:0/db", "port"},      {"mysql://a:b@h:70000/db", "port"},
        {"mysql://a:b@h:33x/db", "port"},    {"mysql://a:b%4@h/db", "password"},
        {"mysql://a:b%00@h/db", "password"}, {"mysql://a:b@/db", "host"},
        {"mysql://a:b@[::1/db", "IPv6"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lc_mysql_url u;
        char err[256] = "";
        if (sink_db_url_parse(bad[i].url, &u, err, sizeof err) != -1 ||
            strstr(err, bad[i].why) == NULL)
            fail_msg("%s: expected an error naming \"%s\", got \"%s\"", bad[i].url, bad[i].why,
                     err);
    }
}

static void clear_env(void)
{
    static const char *const vars[] = {"INVENTORY_SINK_CONFIG",   "INVENTORY_SINK_REDIS_URL",
                                       "INVENTORY_SINK_DB_URL",   "INVENTORY_SINK_BATCH",
                                       "INVENTORY_SINK_CONSUMER", "INVENTORY_SINK_SKU"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

static int load(struct sink_config *cfg, char *err, size_t errlen, ...)
{
    static char prog[] = "inventory-sink";
    char *argv[32] = {prog};
    int argc = 1;
    va_list ap;
    va_start(ap, errlen);
    char *a;
    while ((a = va_arg(ap, char *)) != NULL && argc < 31)
        argv[argc++] = a;
    va_end(ap);
    err[0] = '\0';
    return sink_config_load(cfg, argc, argv, err, errlen);
}

static void test_defaults_and_precedence(void **state)
{
    (void)state;
    clear_env();
    struct sink_config cfg;
    char err[512];
    assert_int_equal(load(&cfg, err, sizeof err, "--db", "mysql://u:p@h/db", NULL), 0);
    assert_int_equal(cfg.batch, 500);
    assert_int_equal(cfg.claim_idle_ms, 30000);
    assert_int_equal(cfg.metrics_port, 0);
    assert_string_equal(cfg.redis, "redis://127.0.0.1:6379");
    assert_string_equal(cfg.consumer, "");
    assert_int_equal(cfg.reconcile, 0);

    char path[] = "/tmp/test_sink_config_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *json = "{\"batch\": 7, \"consumer\": \"from-file\", \"db\": \"mysql://f:f@h/f\"}";
    assert_int_equal(write(fd, json, strlen(json)), (int)strlen(json));
    close(fd);
    setenv("INVENTORY_SINK_CONFIG", path, 1);
    assert_int_equal(load(&cfg, err, sizeof err, NULL), 0);
    assert_int_equal(cfg.batch, 7);
    assert_string_equal(cfg.consumer, "from-file");
    setenv("INVENTORY_SINK_BATCH", "8", 1); /* environment over the file */
    assert_int_equal(load(&cfg, err, sizeof err, NULL), 0);
    assert_int_equal(cfg.batch, 8);
    assert_int_equal(load(&cfg, err, sizeof err, "--batch", "9", NULL), 0); /* flags over both */
    assert_int_equal(cfg.batch, 9);
    assert_string_equal(cfg.db, "mysql://f:f@h/f");
    unlink(path);
    clear_env();

    assert_int_equal(
        load(&cfg, err, sizeof err, "reconcile", "--db", "mysql://u:p@h/db", "--sku", "A", NULL),
        0);
    assert_int_equal(cfg.reconcile, 1);
    assert_string_equal(cfg.sku, "A");
    assert_int_equal(cfg.repair, 0);
    assert_int_equal(load(&cfg, err, sizeof err, "reconcile", "--db", "mysql://u:p@h/db", "--sku",
                          "A", "--repair", NULL),
                     0);
    assert_int_equal(cfg.repair, 1); /* a bare flag: --sku's value is not taken for it */
    assert_string_equal(cfg.sku, "A");
}

static void test_bad_settings_are_refused(void **state)
{
    (void)state;
    clear_env();
    struct sink_config cfg;
    char err[512];
    static const struct {
        const char *a[6];
        const char *why;
    } bad[] = {
        {{"--bogus", "1"}, "\"--bogus\": unknown option"},
        {{"--db", "mysql://u:p@h/db", "--batch", "0"},
         "batch: must be an integer between 1 and 10000, got \"0\" (flag --batch)"},
        {{"--db", "mysql://u:p@h/db", "--batch", "12x"}, "batch: must be an integer"},
        {{"--db", "mysql://u:p@h/db", "--metrics-port", "70000"}, "metrics_port: must be"},
        {{"--db", "mysql://u:p@h/db", "--redis", "http://x"}, "redis: invalid URL"},
        {{"--db", "mysql://u:p@h/db", "--log-level", "loud"}, "log_level: must be one of"},
        {{"--db", "nope"}, "db: must start with mysql:// (flag --db)"},
        {{"--batch", "5"}, "--db (or INVENTORY_SINK_DB_URL) is required"},
        {{"--db"}, "--db: missing value"},
        {{"--db", "mysql://u:p@h/db", "--config", "/nonexistent/x.json"},
         "config: cannot read /nonexistent/x.json"},
        {{"--db", "mysql://u:p@h/db", "--batc", "5"}, "did you mean --batch?"},
        {{"--db", "mysql://u:p@h/db", "--consumer", "x", "reconcile"}, "unexpected argument"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        static char prog[] = "inventory-sink";
        char *argv[8] = {prog};
        int argc = 1;
        for (int j = 0; j < 6 && bad[i].a[j] != NULL; j++)
            argv[argc++] = (char *)bad[i].a[j];
        err[0] = '\0';
        if (sink_config_load(&cfg, argc, argv, err, sizeof err) != -1 ||
            strstr(err, bad[i].why) == NULL)
            fail_msg("case %zu: expected an error with \"%s\", got \"%s\"", i, bad[i].why, err);
    }
    assert_int_equal(load(&cfg, err, sizeof err, "reconcile", "--db", "mysql://u:p@h/db", NULL),
                     -1);
    assert_non_null(strstr(err, "reconcile needs --sku"));
    /* --repair is reconcile's only: the sink refuses it */
    assert_int_equal(load(&cfg, err, sizeof err, "--db", "mysql://u:p@h/db", "--repair", NULL), -1);
    assert_non_null(strstr(err, "\"--repair\": unknown option (reconcile's only"));
    char path[] = "/tmp/test_sink_config_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *json = "{\"batchh\": 7}";
    assert_int_equal(write(fd, json, strlen(json)), (int)strlen(json));
    close(fd);
    assert_int_equal(load(&cfg, err, sizeof err, "--config", path, NULL), -1);
    assert_non_null(strstr(err, "\"batchh\": unknown key, did you mean \"batch\"?"));
    /* an integer is a JSON number in the file, as in inventoryd's */
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    json = "{\"batch\": \"7\"}";
    assert_int_equal(write(fd, json, strlen(json)), (int)strlen(json));
    close(fd);
    assert_int_equal(load(&cfg, err, sizeof err, "--config", path, NULL), -1);
    assert_non_null(strstr(err, "batch: must be an integer between 1 and 10000, got \"7\""));
    unlink(path);
}

/* The engine inventoryd's settings use (config_engine.h), so its forms hold here too: --flag=V,
 * "_" keys as comments and null as "not set here" in the file, the modes. */
static void test_shared_engine_forms(void **state)
{
    (void)state;
    clear_env();
    struct sink_config cfg;
    char err[512];
    assert_int_equal(load(&cfg, err, sizeof err, "--db=mysql://u:p@h/db", "--batch=9", NULL), 0);
    assert_int_equal(cfg.batch, 9);
    assert_string_equal(cfg.db, "mysql://u:p@h/db");
    assert_int_equal(cfg.log_level, CONFIG_LOG_INFO);
    assert_int_equal(
        load(&cfg, err, sizeof err, "--db", "mysql://u:p@h/db", "--log-level", "warn", NULL), 0);
    assert_int_equal(cfg.log_level, CONFIG_LOG_WARN);

    char path[] = "/tmp/test_sink_config_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *json = "{\"_why\": \"a comment\", \"batch\": null, \"db\": \"mysql://f:f@h/f\"}";
    assert_int_equal(write(fd, json, strlen(json)), (int)strlen(json));
    close(fd);
    assert_int_equal(load(&cfg, err, sizeof err, "--config", path, NULL), 0);
    assert_int_equal(cfg.batch, 500); /* null: the default stays */
    assert_string_equal(cfg.config, path);
    unlink(path);

    /* --help wins over a bad argument anywhere (and prints the table's rows) */
    assert_int_equal(load(&cfg, err, sizeof err, "--bogus", "--help", NULL), 1);
    assert_int_equal(load(&cfg, err, sizeof err, "reconcile", "-h", NULL), 1);
}

/* docs/deployment.md's table of the sink's options has a line for every row and mode, with its
 * variable and (an integer) its default: the table is the docs' source, as config_options.h is
 * for docs/configuration.md. */
static void test_deployment_md_lists_every_row(void **state)
{
    (void)state;
    char *text = tree_text("docs/deployment.md");
    static const struct {
        const char *flag, *arg, *env, *def;
    } rows[] = {
#define DOC_INT(key, flag, env, def, lo, hi, help) {flag, "N", env, #def},
#define DOC_OPT(name, field, type, dim, flag, arg, env, def, kind, accepted, help)                 \
    {flag, arg, env, NULL},
        SINK_OPTIONS(DOC_INT, DOC_OPT)
#undef DOC_INT
#undef DOC_OPT
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char want[256];
        snprintf(want, sizeof want, "\n| `%s %s` | `%s` | %s", rows[i].flag, rows[i].arg,
                 rows[i].env, rows[i].def ? rows[i].def : "");
        if (strstr(text, want) == NULL)
            fail_msg("docs/deployment.md: no table line starting \"%s\"", want + 1);
    }
    assert_non_null(strstr(text, "\n| `--repair` |"));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_db_url_parses),
        cmocka_unit_test(test_db_url_refuses_bad_ones),
        cmocka_unit_test(test_defaults_and_precedence),
        cmocka_unit_test(test_bad_settings_are_refused),
        cmocka_unit_test(test_shared_engine_forms),
        cmocka_unit_test(test_deployment_md_lists_every_row),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
