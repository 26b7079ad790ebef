#!/usr/bin/env python3
"""No namesakes: one name, one definition, in each group of C files.

A struct tag, a typedef name or a static function defined in two files of the same group is
two things under one name: grep, a debugger's backtrace and the reader all meet the wrong one
(`struct bslot` of store.c and of order_fsm.c were two different structs). Each DIR given is
one group (its *.c and *.h, and those of its support/ folder); cmocka's fixture entry points
(setup, teardown, group_setup, group_teardown) are every test file's own by convention.

Usage: scripts/check_namesakes.py DIR...     exit 0 when no name is defined twice in a group,
                                              1 with one line per name (name: files), 2 on usage
       scripts/check_namesakes.py --self-test two files sharing a struct, a typedef and a static
                                              function must get all three reported
"""
import glob
import os
import re
import sys
import tempfile

EXEMPT = {"setup", "teardown", "group_setup", "group_teardown", "main"}
STRUCT_RE = re.compile(r"\b(struct|union|enum)\s+(\w+)\s*\{")
TYPEDEF_RE = re.compile(r"\}\s*(\w+)\s*;")
STATIC_FN_RE = re.compile(r"^static\s+(?:inline\s+)?[\w\s*]*?\b(\w+)\s*\([^;{]*\)\s*\{", re.M)


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def names_in(text):
    text = strip_comments(text)
    found = set()
    for m in STRUCT_RE.finditer(text):
        found.add("%s %s" % (m.group(1), m.group(2)))
    for m in re.finditer(r"\btypedef\b[^;]*?\{", text):
        # the name after the typedef's closing brace
        depth, i = 0, m.end() - 1
        while i < len(text):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    t = TYPEDEF_RE.match(text, i)
                    if t:
                        found.add("typedef " + t.group(1))
                    break
            i += 1
    for m in STATIC_FN_RE.finditer(text):
        if m.group(1) not in EXEMPT:
            found.add(m.group(1) + "()")
    return found


def check(dirs):
    problems = []
    for d in dirs:
        files = sorted(glob.glob(os.path.join(d, "*.[ch]")) +
                       glob.glob(os.path.join(d, "support", "*.[ch]")))
        where = {}
        for f in files:
            with open(f, encoding="utf-8") as fh:
                for name in names_in(fh.read()):
                    where.setdefault(name, []).append(f)
        for name, fs in sorted(where.items()):
            if len(fs) > 1:
                problems.append("%s: %s" % (name, ", ".join(fs)))
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        a = "struct slot { int i; };\ntypedef struct { int n; } node;\n" \
            "static void on_reply(int x)\n{\n    (void)x;\n}\nstatic int setup(void **s)\n{\n}\n"
        for name in ("a.c", "b.c"):
            with open(os.path.join(tmp, name), "w") as fh:
                fh.write(a)
        got = check([tmp])
        want = ["struct slot", "typedef node", "on_reply()"]
        missing = [w for w in want if not any(p.startswith(w + ":") for p in got)]
        if missing or any(p.startswith("setup()") for p in got):
            print("self-test: wanted %s, got %s" % (want, got))
            return 1
        os.remove(os.path.join(tmp, "b.c"))
        if check([tmp]):
            print("self-test: one file alone got reports: %s" % check([tmp]))
            return 1
    print("check_namesakes self-test: ok")
    return 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) < 2 or any(a.startswith("-") for a in argv[1:]):
        print(__doc__.split("\n\n")[2], file=sys.stderr)
        return 2
    problems = check(argv[1:])
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
