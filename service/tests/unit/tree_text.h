/*
 * tree_text — files of the source tree for the unit tests that hold docs and sources to the
 * code (test_rules, test_config, test_order_status, test_order_outcome, test_sink_config): a
 * file read whole by its path from the tree's root (INVENTORY_SOURCE_DIR), and a drifted copy of
 * a text, to show that a check refuses a doc that no longer says what the code does.
 */
#ifndef INVENTORY_TESTS_TREE_TEXT_H
#define INVENTORY_TESTS_TREE_TEXT_H

/* The text of rel (e.g. "docs/api.md"), NUL-terminated, malloc'd: the caller frees it. A file
 * that cannot be read fails the test. */
char *tree_text(const char *rel);

/* A copy of text (malloc'd) with the first from replaced by to. Fails the test when text has no
 * from. */
char *tree_drift(const char *text, const char *from, const char *to);

#endif
