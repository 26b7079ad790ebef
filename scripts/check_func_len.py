#!/usr/bin/env python3
"""No C function over 120 lines (issue 31): a longer one is several purposes in one body, read
only by scrolling; split it by purpose (a helper per step), never by line count.

A function is what clang-format (scripts/format.sh) writes as one: its signature from column 0,
the opening brace alone on a line at column 0, and the closing brace alone at column 0. Its
length is counted from the first line of its signature to the closing brace, both included.
Every *.c and *.h under each DIR (recursively) is read.

Usage: scripts/check_func_len.py [--max N] DIR...
                                   exit 0 when no function is longer than N lines (default 120),
                                   1 with one line per longer function (file:line: name: n
                                   lines), 2 on usage
       scripts/check_func_len.py --self-test
                                   a 121-line function must be reported and a 120-line one not

ctest check_func_len runs it on service/src and lockcore/src.
"""
import os
import re
import sys
import tempfile

LIMIT = 120
NAME_RE = re.compile(r"(\w+)\s*\(")


def functions(text):
    """(name, first line, length) of each function definition in text."""
    lines = text.split("\n")
    found = []
    i = 0
    while i < len(lines):
        if lines[i] != "{":
            i += 1
            continue
        # the signature: the lines above the brace up to a blank line, a comment's end, a
        # preprocessor line or the end of another declaration
        start = i
        while start > 0:
            prev = lines[start - 1]
            if (not prev.strip() or prev.startswith("#") or prev.rstrip().endswith(("*/", ";", "}"))
                    or prev.startswith((" *", "/*", "//"))):
                break
            start -= 1
        end = i + 1
        while end < len(lines) and lines[end] != "}":
            end += 1
        signature = " ".join(lines[start:i])
        m = NAME_RE.search(signature)
        if start < i and m and "=" not in signature.split("(")[0]:
            found.append((m.group(1), start + 1, end - start + 1))
        i = end + 1
    return found


def check(dirs, limit):
    problems = []
    for d in dirs:
        paths = []
        for root, _, files in os.walk(d):
            paths += [os.path.join(root, f) for f in files if f.endswith((".c", ".h"))]
        for path in sorted(paths):
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            for name, line, n in functions(text):
                if n > limit:
                    problems.append("%s:%d: %s: %d lines (most: %d)" % (path, line, name, n, limit))
    return problems


def self_test():
    def body(name, n):  # a function of n lines in all
        return "static int %s(void)\n{\n%s    return 0;\n}\n" % (name, "    x++;\n" * (n - 4))

    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "a.c"), "w") as f:
            f.write("/* a file */\nstatic int x;\n\n" + body("fits", LIMIT) + "\n" +
                    body("too_long", LIMIT + 1) + "\nstatic const int t[] = {\n    1,\n};\n")
        got = check([d], LIMIT)
    want = ["too_long: %d lines" % (LIMIT + 1)]
    if len(got) != 1 or want[0] not in got[0]:
        print("self-test: want exactly %s reported, got %s" % (want, got))
        return 1
    print("self-test: ok")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    args, limit = argv[1:], LIMIT
    if args[:1] == ["--max"] and len(args) >= 2 and args[1].isdigit():
        limit, args = int(args[1]), args[2:]
    if not args or any(a.startswith("-") or not os.path.isdir(a) for a in args):
        print(__doc__, file=sys.stderr)
        return 2
    problems = check(args, limit)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
