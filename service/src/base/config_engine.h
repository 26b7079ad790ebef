/*
 * config_engine — the settings engine of both programs (config.c): a table of rows over a
 * struct of settings, loaded in layers (default < JSON config file < environment < flags, the
 * rules config.h states), with --help built from the same rows. inventoryd's table is the rows
 * of config_options.h over struct config; inventory-sink's the rows of sink_config.h over
 * struct sink_config. A program's own checks across settings (and its subcommands) stay in its
 * loader, around config_table_load.
 *
 * A table is written as an X-macro list whose rows expand to CONFIG_KEY_* below, each naming
 * the struct it fills; an OPT row's kind is config_kind_<kind>, the parser that sets its field
 * and the function that shows it (the shared kinds are declared here, the others are
 * config.c's own).
 */
#ifndef INVENTORY_CONFIG_ENGINE_H
#define INVENTORY_CONFIG_ENGINE_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "config.h"

/* Where a value came from, for messages: "flag --port", "environment INVENTORY_PORT",
 * "config file /etc/inventoryd.json". */
struct config_origin {
    const char *what;
    const char *name;
};

struct config_row;

/* How an OPT row's text becomes its field (set: 0, or -1 with err = "<key>: <problem>
 * (<origin>)") and how config_describe shows the field (show: a new reference, NULL when out of
 * memory). cfg is the table's struct. */
struct config_kind {
    int (*set)(void *cfg, const struct config_row *k, const char *s, const struct config_origin *o,
               char *err, size_t errlen);
    json_t *(*show)(const void *cfg, const struct config_row *k);
    bool secret;         /* a config-file value of another type than string is not quoted */
    const char *partner; /* the key that gives the same setting another way (a file names the
                            value's key): both in one layer is an error, and setting that key
                            forgets the file */
};

enum config_row_type { CONFIG_INT_ROW, CONFIG_BOOL_ROW, CONFIG_OPT_ROW };

/* One setting. */
struct config_row {
    struct config_key pub;
    enum config_row_type row;
    long long min, max;                  /* CONFIG_INT_ROW: the bounds */
    size_t offset, size;                 /* the field in the table's struct */
    int (*auto_default)(int lo, int hi); /* INT_AUTO: computes the default */
    const struct config_kind *kind;      /* CONFIG_OPT_ROW */
};

/* A flag that is no setting (no value, no environment variable, no file key). A mode whose
 * action is CONFIG_ACTION_HELP or CONFIG_ACTION_VERSION ends the load; any other is noted. */
struct config_mode {
    const char *flag, *short_flag; /* short_flag may be NULL */
    enum config_action action;
    const char *help;
};

/* A program's settings: rows[0] is its --config row (kind config: the JSON file's path). */
struct config_table {
    const struct config_row *rows;
    size_t nrows;
    const struct config_mode *modes;
    size_t nmodes;
};

/* The rows, for a struct T; the rows' arguments as config_options.h describes them. */
#define CONFIG_FIELD_OF(T, f) offsetof(T, f), sizeof(((T *)0)->f)
#define CONFIG_KEY_INT(T, key, flag, env, def, lo, hi, help)                                       \
    {{#key, flag, "N", env, #def, #lo ".." #hi, help},                                             \
     CONFIG_INT_ROW,                                                                               \
     lo,                                                                                           \
     hi,                                                                                           \
     CONFIG_FIELD_OF(T, key),                                                                      \
     NULL,                                                                                         \
     NULL},
#define CONFIG_KEY_INT_AUTO(T, key, flag, env, fn, deftext, lo, hi, help)                          \
    {{#key, flag, "N", env, deftext, #lo ".." #hi, help},                                          \
     CONFIG_INT_ROW,                                                                               \
     lo,                                                                                           \
     hi,                                                                                           \
     CONFIG_FIELD_OF(T, key),                                                                      \
     fn,                                                                                           \
     NULL},
#define CONFIG_KEY_BOOL(T, key, flag, env, def, help)                                              \
    {{#key, flag, "", env, #def, "0..1 (the bare flag means 1)", help},                            \
     CONFIG_BOOL_ROW,                                                                              \
     0,                                                                                            \
     1,                                                                                            \
     CONFIG_FIELD_OF(T, key),                                                                      \
     NULL,                                                                                         \
     NULL},
#define CONFIG_KEY_OPT(T, name, field, type, dim, flag, arg, env, def, kind, accepted, help)       \
    {{name, flag, arg, env, def, accepted, help},                                                  \
     CONFIG_OPT_ROW,                                                                               \
     0,                                                                                            \
     0,                                                                                            \
     CONFIG_FIELD_OF(T, field),                                                                    \
     NULL,                                                                                         \
     &config_kind_##kind},
#define CONFIG_MODE_ROW(flag, short_flag, action, help) {flag, short_flag, action, help},

/* The kinds both programs use: config (the JSON file's path), text (any text shorter than the
 * field), redis (a Redis URL, config_redis_url_valid), mysql_url (lc_mysql_url_parse; never
 * quoted, it carries a password), log_level (debug, info, warn, error into an enum
 * config_log_level field). */
extern const struct config_kind config_kind_config, config_kind_text, config_kind_redis,
    config_kind_mysql_url, config_kind_log_level;

/* Sets every row of t in out (zeroed by the caller) to its default. */
void config_table_defaults(const struct config_table *t, void *out);

/* Loads the config file named by the --config row's flag or variable (if any), then the
 * environment (envp: NULL-terminated "NAME=value", NULL for the process's), then argv[1..argc)
 * over out (holding the defaults). Returns 1 with *action set when a mode that ends the load
 * (--help, --version) is given anywhere, whatever else is; 0 with bit i of *seen set for each
 * other mode i given; -1 with err = one message "<key>: <what is wrong> (<where from>)". */
int config_table_load(const struct config_table *t, void *out, int argc, char **argv, char **envp,
                      enum config_action *action, unsigned *seen, char *err, size_t errlen);

/* Writes t's --help into buf (cap bytes, NUL-terminated): head, one entry per row then per
 * mode (accepted values, [default]), footer. Returns the length written. */
size_t config_table_usage(const struct config_table *t, const char *head, const char *footer,
                          char *buf, size_t cap);

#endif
