/*
 * libFuzzer target: config.c's loader on arbitrary bytes, three ways per input:
 *   1. the input is the content of the config file (an in-memory file, read by config_load
 *      through /proc/self/fd/N exactly as a --config path);
 *   2. the input, split at '\n' and NUL bytes, is the command line and the environment (tokens
 *      "INVENTORY_...=..." go to the environment, the rest to argv; --config and
 *      INVENTORY_CONFIG are dropped, so no real file is ever opened);
 *   3. the input as a C string is a Redis URL for config_redis_url_valid.
 * Checked on every outcome: an accepted configuration has every value in range and
 * config_describe renders it as JSON with the admin token masked; a refused one has exactly one
 * non-empty line of error that never quotes the admin token.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <jansson.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_config: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);  \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define MAX_TOKENS 64

static int file_fd = -1;
static char file_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    file_fd = memfd_create("fuzz_config.json", 0);
    if (file_fd < 0) {
        char tmpl[] = "/tmp/fuzz_config.XXXXXX";
        file_fd = mkstemp(tmpl);
        if (file_fd < 0) {
            perror("fuzz_config: memfd_create and mkstemp");
            abort();
        }
        unlink(tmpl);
    }
    snprintf(file_path, sizeof(file_path), "/proc/self/fd/%d", file_fd);
    return 0;
}

/* What every accepted configuration must satisfy (config.h's ranges). */
static void check_config(const struct config *cfg)
{
    CHECK(cfg->action == CONFIG_ACTION_RUN || cfg->action == CONFIG_ACTION_HEALTHCHECK);
    CHECK(cfg->port >= 1 && cfg->port <= 65535);
    CHECK(cfg->threads >= 1 && cfg->threads <= 1024);
    CHECK(cfg->lock_lease_ms >= 1 && cfg->lock_lease_ms <= 3600000);
    CHECK(cfg->lock_wait_ms >= 0 && cfg->lock_wait_ms <= 600000);
    CHECK(cfg->hold_ms >= 0 && cfg->hold_ms <= 60000);
    CHECK(cfg->max_quantity >= 1 && cfg->max_quantity <= 1000000);
    CHECK(cfg->max_connections >= 1 && cfg->max_connections <= 1000000);
    CHECK(cfg->connection_timeout_s >= 1 && cfg->connection_timeout_s <= 3600);
    CHECK(cfg->redis_timeout_ms >= 1 && cfg->redis_timeout_ms <= 60000);
    CHECK(cfg->sold_out_recheck_ms >= 1 && cfg->sold_out_recheck_ms <= 1000);
    CHECK(cfg->shutdown_grace_ms >= 0 && cfg->shutdown_grace_ms <= 600000);
    CHECK((unsigned)cfg->strategy <= STRATEGY_ATOMIC);
    CHECK((unsigned)cfg->log_level <= CONFIG_LOG_ERROR);
    CHECK(memchr(cfg->bind, '\0', sizeof(cfg->bind)) != NULL);
    CHECK(memchr(cfg->redis_url, '\0', sizeof(cfg->redis_url)) != NULL);
    CHECK(config_redis_url_valid(cfg->redis_url, NULL, 0));
    size_t toklen = strnlen(cfg->admin_token, sizeof(cfg->admin_token));
    CHECK(toklen < sizeof(cfg->admin_token));
    for (size_t i = 0; i < toklen; i++)
        CHECK(cfg->admin_token[i] > 0x20 && cfg->admin_token[i] < 0x7f);

    char buf[8192];
    int n = config_describe(cfg, buf, sizeof(buf));
    CHECK(n > 0 && (size_t)n < sizeof(buf));
    json_error_t je;
    json_t *o = json_loads(buf, 0, &je);
    CHECK(json_is_object(o));
    const json_t *tok = json_object_get(o, "admin_token");
    CHECK(toklen ? json_is_string(tok) && strcmp(json_string_value(tok), "***") == 0
                 : json_is_null(tok));
    json_decref(o);
}

/* What every refusal must satisfy: one non-empty line of printable ASCII that does not quote
 * token, the admin token the input tried to set (NULL: none), where it is about that token or
 * about the file's JSON syntax (a duplicate key's message names the key, which may be
 * anything, so it is not checked). */
static void check_error(const char *err, const char *token)
{
    size_t n = strlen(err);
    CHECK(n > 0);
    for (size_t i = 0; i < n; i++)
        CHECK((unsigned char)err[i] >= 0x20 && (unsigned char)err[i] <= 0x7e);
    size_t fixed = strncmp(err, "admin_token:", 12) == 0                                        ? 12
                   : strncmp(err, "config: invalid JSON", 20) == 0 && !strstr(err, "duplicate") ? 20
                                                                                                : 0;
    /* Past the message's own fixed words: a token that is those words ("config: invalid JSON ",
     * found by the fuzzer) is in every such message and reveals nothing. */
    if (token && fixed > 0)
        CHECK(strstr(err + fixed, token) == NULL);
}

/* The admin token an input that may not be valid JSON tries to set: the text after
 * "admin_token", a colon and a quote, up to the next quote, backslash or control byte. A
 * static copy when it is at least 6 bytes long, else NULL. */
static const char *token_in_text(const uint8_t *data, size_t size)
{
    static char token[512];
    static const char key[] = "\"admin_token\"";
    const uint8_t *p = memmem(data, size, key, sizeof(key) - 1);
    if (!p)
        return NULL;
    const uint8_t *end = data + size;
    p += sizeof(key) - 1;
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ':'))
        p++;
    if (p >= end || *p != '"')
        return NULL;
    p++;
    size_t n = 0;
    while (p + n < end && n < sizeof(token) - 1 && p[n] != '"' && p[n] != '\\' && p[n] >= 0x20)
        n++;
    if (n < 6)
        return NULL;
    memcpy(token, p, n);
    token[n] = '\0';
    return token;
}

static void run(int argc, char **argv, char **envp, const char *token)
{
    struct config cfg;
    char err[512];
    memset(err, 'x', sizeof(err));
    int rc = config_load(&cfg, argc, argv, envp, err, sizeof(err));
    CHECK(memchr(err, '\0', sizeof(err)) != NULL);
    if (rc == 0)
        check_config(&cfg);
    else if (rc < 0)
        check_error(err, token);
    else
        CHECK(rc == 1 && (cfg.action == CONFIG_ACTION_HELP || cfg.action == CONFIG_ACTION_VERSION));
}

/* 1: the input as the config file. */
static void fuzz_file(const uint8_t *data, size_t size)
{
    if (ftruncate(file_fd, 0) != 0 || pwrite(file_fd, data, size, 0) != (ssize_t)size)
        abort();
    /* The admin token the file tries to set, for the no-echo check (only when long enough
     * not to occur in a message by chance); also from a file that is not valid JSON. */
    char *token = NULL;
    json_t *root = json_loadb((const char *)data, size, 0, NULL);
    const char *t = json_string_value(json_object_get(root, "admin_token"));
    if (!root)
        t = token_in_text(data, size);
    if (t && strlen(t) >= 6)
        token = strdup(t);
    json_decref(root);

    char prog[] = "inventoryd", flag[] = "--config";
    char *argv[] = {prog, flag, file_path, NULL};
    char *envp[] = {NULL};
    run(3, argv, envp, token);
    free(token);
}

/* 2: the input as argv and environment. */
static void fuzz_args(const uint8_t *data, size_t size)
{
    char *copy = malloc(size + 1);
    if (!copy)
        return;
    memcpy(copy, data, size);
    copy[size] = '\0';
    char prog[] = "inventoryd";
    char *argv[MAX_TOKENS + 2] = {prog};
    char *envp[MAX_TOKENS + 1] = {NULL};
    int argc = 1, envc = 0;
    const char *token = NULL;
    size_t start = 0;
    for (size_t i = 0; i <= size && argc <= MAX_TOKENS && envc < MAX_TOKENS; i++) {
        if (i < size && copy[i] != '\n' && copy[i] != '\0')
            continue;
        copy[i] = '\0';
        char *tok = copy + start;
        start = i + 1;
        /* No real file may be opened: --config (its value then stands alone, an error unless
         * it is another flag) and INVENTORY_CONFIG are dropped. */
        if (strncmp(tok, "--config", 8) == 0 || strncmp(tok, "INVENTORY_CONFIG=", 17) == 0)
            continue;
        if (strncmp(tok, "INVENTORY_", 10) == 0 && strchr(tok, '=')) {
            envp[envc++] = tok;
            if (strncmp(tok, "INVENTORY_ADMIN_TOKEN=", 22) == 0 && strlen(tok + 22) >= 6)
                token = tok + 22;
        } else {
            argv[argc++] = tok;
            if (argc >= 2 && strcmp(argv[argc - 2], "--admin-token") == 0 && strlen(tok) >= 6)
                token = tok;
        }
    }
    argv[argc] = NULL;
    envp[envc] = NULL;
    run(argc, argv, envp, token);
    free(copy);
}

/* 3: the input as a Redis URL. */
static void fuzz_url(const uint8_t *data, size_t size)
{
    char *url = malloc(size + 1);
    if (!url)
        return;
    memcpy(url, data, size);
    url[size] = '\0';
    char why[128];
    memset(why, 'x', sizeof(why));
    if (!config_redis_url_valid(url, why, sizeof(why))) {
        CHECK(memchr(why, '\0', sizeof(why)) != NULL && why[0] != '\0');
    } else {
        /* A valid URL is printable ASCII with a known scheme. */
        CHECK(strncmp(url, "redis://", 8) == 0 || strncmp(url, "unix://", 7) == 0 ||
              strncmp(url, "redis-cluster://", 16) == 0);
        for (const char *p = url; *p; p++)
            CHECK(*p >= 0x20 && *p <= 0x7e);
    }
    free(url);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_file(data, size);
    fuzz_args(data, size);
    fuzz_url(data, size);
    return 0;
}
