#!/usr/bin/env python3
"""Comments and docs that name things which exist.

Reads the comments of the sources (C, shell, Python, Lua, JavaScript, CMake) and the prose of
the docs (Markdown, the man page, openapi.yaml) of a tree, and reports every reference there
to something the tree does not have:

  - a call-shaped name, `name()` (in a comment, backticks or not): no function, macro or
    variable of that name in the code;
  - a snake_case name (with an underscore) in a C comment, or in backticks in a doc: no such
    word anywhere in the code (identifiers, strings, config keys: the code is what is checked
    against, never the comments or the docs, so a stale name cannot vouch for itself);
  - a file name in backticks (`layout.c`, `docs/api.md`): no such path from the tree's root or
    from the referring file's folder, and no file of that name anywhere in the tree;
  - a path that leaves the tree (`../shared/SPEC.md`, a Markdown link to ../): the repository
    stands alone;
  - "SPEC §N" where docs/spec.md has no section "## §N".

and every member of a family the docs must list in full (issue 31: such lists had drifted):

  - every state of every state machine under service/src/order/ (an `enum ...state {...}`,
    its `*_COUNT` aside) is named, as written in the enum, in docs/design.md;
  - every stored order status (created, reserved, confirmed, cancelled, expired, and any other
    string of a `statuses[]` array under service/src/) is in backticks in docs/design.md, and
    each is a string of the service's code;
  - every route of the router table (service/src/http/router.c: method and path) is an
    operation of docs/openapi.yaml;
  - every layer of lockcore/src/layers.txt (its lock backends among them: Redis Cluster,
    Redlock, MySQL, ZooKeeper) has its row in docs/lockcore.md's layer table, and every layer of
    service/src/layers.txt its row in docs/design.md's; the row names each .c file and folder
    the layer holds.

Usage: scripts/check_refs.py [ROOT]       ROOT: the tree (default: this script's repository);
                                           the files git tracks there, or every file without git.
       scripts/check_refs.py --self-test  a throwaway tree with one stale reference of each kind
                                           must get each reported, and a clean one nothing.
Exit 0 when nothing is stale, 1 with one line per stale reference (file:line: what), 2 on usage.
"""
import os
import re
import subprocess
import sys
import tempfile

CODE_EXT = {".c", ".h", ".sh", ".py", ".lua", ".mjs", ".js", ".cmake", ".txt", ".json", ".yml",
            ".html", ".css", ".service", ".conf", ".template", ".lua"}
DOC_EXT = {".md", ".1", ".yaml"}
# What a file name in backticks may end with.
FILE_EXT = ("c", "h", "md", "sh", "py", "lua", "mjs", "js", "json", "yaml", "yml", "txt", "cmake",
            "html", "css", "service", "1", "template")
FILE_RE = re.compile(r"^[A-Za-z0-9_./-]*[A-Za-z_][A-Za-z0-9_-]*\.(?:%s)$" % "|".join(FILE_EXT))
CALL_RE = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\(\)")
SNAKE_RE = re.compile(r"(?<![\w.:/${-])([a-z][a-z0-9]*(?:_[a-z0-9]+)+)(?![\w(/-])")
BARE_FILE_RE = re.compile(r"(?<![\w./:~$-])((?:[\w-]+/)*[\w-]*[A-Za-z_][\w-]*"
                          r"\.(?:md|c|h|sh|lua|py|mjs|yaml|json))(?![\w/-]|\.\w)")
TICK_RE = re.compile(r"`([^`\n]+)`")
SPEC_RE = re.compile(r"SPEC §(\d+)")
UP_LINK_RE = re.compile(r"(?:\]\(|`)(\.\./[^)`\s]*)")
WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Words of the world outside the tree that comments name on purpose: C library and POSIX
# calls, libraries' APIs, Redis commands; checked only when they are call-shaped and the prefix
# is not one of ours.
OURS = re.compile(r"^(lc|sf|rf|gf|cf|sp|tu|pr|lt|http|router|stock|order|store|config|layout|"
                  r"skucache|seggate|metrics|log|validate|errors|ids|ratelimit|proxy|areq|inv)_")


def tracked_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], capture_output=True,
                             check=True).stdout.decode()
        files = [f for f in out.split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, _, names in os.walk(root):
            if "/." in d or "/build" in d:
                continue
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return [f for f in files if os.path.isfile(os.path.join(root, f))]


def read(root, f):
    try:
        with open(os.path.join(root, f), encoding="utf-8") as fh:
            return fh.read()
    except (UnicodeDecodeError, OSError):
        return None


def split_c(text):
    """(code, [(line, comment text)]) of a C file; strings stay in the code."""
    code, comments, i, n = [], [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            comments.append((text.count("\n", 0, i) + 1, text[i:j]))
            code.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            comments.append((text.count("\n", 0, i) + 1, text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            code.append(text[i:j + 1])
            i = j + 1
        else:
            code.append(c)
            i += 1
    return "".join(code), comments


def split_hash(text, marker="#"):
    """(code, [(line, comment)]) for languages with line comments (shell, Python, CMake, Lua)."""
    code, comments = [], []
    for k, line in enumerate(text.split("\n"), 1):
        s = line.lstrip()
        if s.startswith(marker) and not s.startswith("#!"):
            comments.append((k, s))
        else:
            code.append(line)
    return "\n".join(code), comments


def split_source(f, text):
    ext = os.path.splitext(f)[1]
    if ext in (".c", ".h", ".mjs", ".js", ".css"):
        return split_c(text)
    if ext == ".lua":
        return split_hash(text, "--")
    if ext in (".sh", ".py", ".cmake", ".txt", ".yml", ".service", ".conf", ".template") or \
            os.path.basename(f) in ("Dockerfile", "CMakeLists.txt"):
        return split_hash(text)
    return text, []


def spec_sections(root):
    text = read(root, "docs/spec.md") or ""
    return set(re.findall(r"^## §(\d+)", text, re.M))


def check(root):
    files = tracked_files(root)
    paths = set(files)
    basenames = {os.path.basename(f) for f in files}
    dirs = set()
    for f in files:
        d = os.path.dirname(f)
        while d and d not in dirs:
            dirs.add(d)
            d = os.path.dirname(d)
    top = {f.split("/")[0] for f in files}
    words = {os.path.splitext(b)[0] for b in basenames}
    called = set()          # called or defined in the code, outside C files' own statics
    own_calls = {}          # a C file: what its code calls or defines, statics included
    include_dirs = set()    # <dir/...> the C code includes from: other projects' headers
    code_text = []
    sources, docs = [], []
    for f in files:
        ext = os.path.splitext(f)[1]
        base = os.path.basename(f)
        if f.startswith("docs/img/") or "/corpus/" in f or base == "CHANGELOG.md":
            continue  # the changelog is history: it names what was removed
        text = read(root, f)
        if text is None:
            continue
        if ext in DOC_EXT or base == "README.md":
            docs.append((f, text))
        elif ext in CODE_EXT or base in ("Dockerfile", "CMakeLists.txt"):
            code, comments = split_source(f, text)
            words.update(WORD_RE.findall(code))
            calls = set(re.findall(r"\b([A-Za-z_]\w*)\s*\(", code))
            if ext in (".c", ".h"):
                own_calls[f] = calls
                statics = set(re.findall(r"^static\b[^;=(]*?\b(\w+)\s*\(", code, re.M))
                calls = calls - statics
                include_dirs.update(re.findall(r"#\s*include\s*<(\w+)/", code))
            called.update(calls)
            code_text.append(code)
            sources.append((f, comments))
    code_text = "\n".join(code_text)
    sections = spec_sections(root)
    problems = []

    def file_exists(name, referrer):
        name = name.rstrip("/")
        if name.startswith("./"):
            name = name[2:]
        here = os.path.normpath(os.path.join(os.path.dirname(referrer), name))
        # A file of the tree (from its root or the referrer's folder, or by its name alone, or a
        # path ending like one), or one the code writes or reads by that name (a report, an
        # installed path).
        return (name in paths or here in paths or name in dirs or here in dirs or
                name.split("/")[0] in include_dirs or
                ("/" not in name and name in basenames) or
                any(p.endswith("/" + name) for p in paths) or
                os.path.basename(name) in code_text)

    def check_text(f, line, text, in_c_comment):
        for m in UP_LINK_RE.finditer(text):
            target = os.path.normpath(os.path.join(os.path.dirname(f), m.group(1)))
            if target.startswith("..") or target.split("/")[0] not in top:
                problems.append("%s:%d: %s points outside the repository" % (f, line, m.group(1)))
            elif target not in paths and target not in dirs:
                problems.append("%s:%d: file %s does not exist" % (f, line, m.group(1)))
        for m in SPEC_RE.finditer(text):
            if m.group(1) not in sections:
                problems.append("%s:%d: SPEC §%s is not a section of docs/spec.md" %
                                (f, line, m.group(1)))
        for m in CALL_RE.finditer(text):
            name = m.group(1)
            if name not in called and name not in own_calls.get(f, ()) and \
                    (OURS.match(name) or "_" in name or in_c_comment):
                problems.append("%s:%d: %s() is not in the code" % (f, line, name))
        for m in BARE_FILE_RE.finditer(TICK_RE.sub(" ", text)):
            if not file_exists(m.group(1), f):
                problems.append("%s:%d: file %s does not exist" % (f, line, m.group(1)))
        for m in TICK_RE.finditer(text):
            tok = m.group(1).strip()
            if FILE_RE.match(tok) and not tok.startswith("../") and not file_exists(tok, f):
                problems.append("%s:%d: file %s does not exist" % (f, line, tok))
            elif re.fullmatch(SNAKE_RE.pattern, tok) and tok not in words and OURS.match(tok):
                problems.append("%s:%d: %s is not in the code" % (f, line, tok))
        if in_c_comment:
            for m in SNAKE_RE.finditer(text):
                name = m.group(1)
                if name not in words and OURS.match(name):
                    problems.append("%s:%d: %s is not in the code" % (f, line, name))

    for f, comments in sources:
        is_c = os.path.splitext(f)[1] in (".c", ".h")
        for line, text in comments:
            for k, part in enumerate(text.split("\n")):
                check_text(f, line + k, part, is_c)
    for f, text in docs:
        if f.endswith(".1"):
            text = re.sub(r"\\f[BIRP]", "", text)  # troff font changes
        for k, part in enumerate(text.split("\n"), 1):
            check_text(f, k, part, False)
    problems += check_families(root, set(files))
    return sorted(set(problems))


# The stored order statuses (SPEC §11, §13); a `statuses[]` array of the code may add to them.
ORDER_STATUSES = ("created", "reserved", "confirmed", "cancelled", "expired")
ENUM_STATE_RE = re.compile(r"\benum\s+(\w*state)\s*\{([^}]*)\}")
ROUTE_RE = re.compile(r"\{\s*HTTP_([A-Z]+)\s*,\s*\"([^\"]+)\"")
TABLE_ROW_RE = re.compile(r"^\|\s*`?([\w./-]+)`?\s*\|(.*)$")


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def openapi_operations(text):
    """{(METHOD, path)} of an OpenAPI document's paths (two-space paths, four-space methods)."""
    ops, path, in_paths = set(), None, False
    for line in text.split("\n"):
        if re.match(r"^\S", line):
            in_paths = line.startswith("paths:")
            path = None
            continue
        m = re.match(r"^  (/\S*):\s*$", line)
        if in_paths and m:
            path = m.group(1)
            continue
        m = re.match(r"^    (get|put|post|delete|patch|head|options):", line)
        if in_paths and path and m:
            ops.add((m.group(1).upper(), path))
    return ops


def layer_rows(text):
    """[(line, layer, [files])] of a layers.txt."""
    rows = []
    for k, line in enumerate(text.split("\n"), 1):
        words = line.split("#", 1)[0].split()
        if len(words) >= 2:
            rows.append((k, words[0], words[1:]))
    return rows


def check_families(root, files):
    """Every member of the families the docs list in full is in them (see the top)."""
    problems = []
    design = read(root, "docs/design.md") if "docs/design.md" in files else None
    state_files = sorted(f for f in files if f.startswith("service/src/order/") and
                         f.endswith((".c", ".h")))
    for f in state_files:
        code = split_c(read(root, f) or "")[0]
        for m in ENUM_STATE_RE.finditer(code):
            for item in m.group(2).split(","):
                name = item.split("=")[0].strip()
                if not name or name.endswith("_COUNT"):
                    continue
                if not re.fullmatch(r"[A-Za-z_]\w*", name):
                    # An enum made by a macro (a table): say so rather than check nothing.
                    problems.append("%s:%d: enum %s is not a plain list of names: "
                                    "scripts/check_refs.py cannot read its states" %
                                    (f, line_of(code, m.start()), m.group(1)))
                    break
                if design is None or not re.search(r"(?<!\w)%s(?!\w)" % name, design):
                    problems.append("%s:%d: state %s of enum %s is not named in docs/design.md" %
                                    (f, line_of(code, m.start(2) + m.group(2).find(name)), name,
                                     m.group(1)))
    service = [f for f in files if f.startswith("service/src/") and f.endswith((".c", ".h"))]
    if service:
        statuses, strings = list(ORDER_STATUSES), set()
        for f in service:
            text = read(root, f) or ""
            strings.update(re.findall(r"\"([a-z_]+)\"", text))
            for m in re.finditer(r"\bstatuses\s*\[\s*\]\s*=\s*\{([^}]*)\}", text):
                statuses += [st for st in re.findall(r"\"([a-z_]+)\"", m.group(1))
                             if st not in statuses]
        for st in statuses:
            if st not in strings:
                problems.append("scripts/check_refs.py: stored order status %s is not a string "
                                "of service/src/" % st)
            if design is None or ("`%s`" % st) not in design:
                problems.append("docs/design.md: stored order status `%s` is not named" % st)
    router = "service/src/http/router.c"
    if router in files:
        code = split_c(read(root, router) or "")[0]
        ops = openapi_operations(read(root, "docs/openapi.yaml") or "")
        routes = list(ROUTE_RE.finditer(code))
        if not routes:  # the table's form changed: say so rather than check nothing
            problems.append("%s: no route rows ({HTTP_<METHOD>, \"<path>\", ...}) found: "
                            "scripts/check_refs.py cannot read the router table" % router)
        for m in routes:
            if (m.group(1), m.group(2)) not in ops:
                problems.append("%s:%d: route %s %s is not in docs/openapi.yaml" %
                                (router, line_of(code, m.start()), m.group(1), m.group(2)))
    for layers, doc in (("lockcore/src/layers.txt", "docs/lockcore.md"),
                        ("service/src/layers.txt", "docs/design.md")):
        if layers not in files:
            continue
        rows, in_table = {}, False  # the rows of the table headed "| layer ..."
        for line in (read(root, doc) or "").split("\n"):
            if not line.startswith("|"):
                in_table = False
            elif re.match(r"^\|\s*layer\b", line):
                in_table = True
            elif in_table:
                m = TABLE_ROW_RE.match(line)
                if m:
                    rows.setdefault(m.group(1), m.group(2))
        for k, layer, held in layer_rows(read(root, layers) or ""):
            if layer not in rows:
                problems.append("%s:%d: layer %s has no row in %s's layer table" %
                                (layers, k, layer, doc))
                continue
            for name in held:
                if (name.endswith(".c") or name.endswith("/")) and \
                        ("`%s`" % name) not in rows[layer] and \
                        ("`%s`" % os.path.basename(name.rstrip("/"))) not in rows[layer]:
                    problems.append("%s:%d: %s's row of layer %s does not name `%s`" %
                                    (layers, k, doc, layer, name))
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        def write(path, text):
            os.makedirs(os.path.dirname(os.path.join(tmp, path)), exist_ok=True)
            with open(os.path.join(tmp, path), "w") as fh:
                fh.write(text)
        write("docs/spec.md", "# spec\n## §8 Invariants\n")
        write("src/layout.c", "/* layout_apply() and `layout.h`, SPEC §8 */\n"
                              "int layout_apply(void) { return 0; }\n")
        write("src/layout.h", "int layout_apply(void);\n")
        write("src/mux.c", "static void finish(void) {}\nvoid mux(void) { finish(); }\n")
        write("docs/design.md", "See `src/layout.c` and `layout_apply`, SPEC §8.\n\n"
                                "States: OS_NEW, OS_DONE; M_IDLE. Statuses: `created`, "
                                "`reserved`, `confirmed`, `cancelled`, `expired`.\n\n"
                                "| layer | files |\n|---|---|\n| base | `base/` |\n")
        # The families: a state machine of each form, the stored statuses, a route, the layers.
        write("service/src/layers.txt", "# layer files\nbase base/\n")
        write("service/src/base/status.c", 'const char *const statuses[] = {"created", '
                                           '"reserved", "confirmed", "cancelled", "expired"};\n')
        write("service/src/order/order_fsm.c", "enum ostate {\n    OS_NEW,\n    OS_DONE,\n"
                                               "    OS_COUNT\n};\n")
        write("service/src/order/order_multi.c", "enum mstate { M_IDLE };\n")
        write("service/src/http/router.c", 'static const struct row rows[] = {\n'
                                           '    {HTTP_GET, "/healthz", 0},\n};\n')
        write("docs/openapi.yaml", "openapi: 3.0.3\npaths:\n  /healthz:\n    get:\n"
                                   "      summary: liveness\n")
        write("lockcore/src/layers.txt", "base status.c\nmysql mysql_lock.c\n")
        write("docs/lockcore.md", "| layer (lowest first) | files |\n|---|---|\n"
                                  "| base | `status.c` |\n| mysql | `mysql_lock.c` |\n")
        clean = check(tmp)
        if clean:
            print("self-test: a clean tree got reports:\n  " + "\n  ".join(clean))
            return 1
        write("src/stale.c", "/* Runs until finish(), then layout_settle; see `idempotency.md`.\n"
                             " * (SPEC §12) */\nint stale(void) { return 0; }\n")
        write("docs/more.md", "The contract is `../shared/SPEC.md`; [it](../x.md); "
                              "`layout_gone` and `store_gone()`.\n")
        # Each family drifts: a state, a status, a route, a lock backend's layer, a file of a
        # layer, a service layer.
        write("service/src/order/order_fsm.c", "enum ostate {\n    OS_NEW,\n    OS_CLAIM,\n"
                                               "    OS_DONE,\n    OS_COUNT\n};\n")
        write("service/src/order/order_multi.c", "enum mstate { M_IDLE, M_UNDO };\n")
        write("service/src/order/order_user.c", "enum user_state { USER_TABLE(STATE) };\n")
        write("service/src/base/status.c", 'const char *const statuses[] = {"created", '
                                           '"reserved", "confirmed", "cancelled", "expired", '
                                           '"refunded"};\n')
        write("service/src/http/router.c", 'static const struct row rows[] = {\n'
                                           '    {HTTP_GET, "/healthz", 0},\n'
                                           '    {HTTP_POST, "/healthz", 0},\n'
                                           '    {HTTP_GET, "/readyz", 0},\n};\n')
        write("lockcore/src/layers.txt", "base status.c\nmysql mysql_lock.c mysql_url.c\n"
                                         "zk zk_async.c\n")
        write("service/src/layers.txt", "# layer files\nbase base/\nhttp http/\n")
        got = check(tmp)
        want = ["src/stale.c:1: finish() is not in the code",
                "src/stale.c:1: layout_settle is not in the code",
                "src/stale.c:1: file idempotency.md does not exist",
                "src/stale.c:2: SPEC §12 is not a section of docs/spec.md",
                "docs/more.md:1: ../shared/SPEC.md points outside the repository",
                "docs/more.md:1: ../x.md points outside the repository",
                "docs/more.md:1: layout_gone is not in the code",
                "docs/more.md:1: store_gone() is not in the code",
                "service/src/order/order_fsm.c:3: state OS_CLAIM of enum ostate is not named "
                "in docs/design.md",
                "service/src/order/order_multi.c:1: state M_UNDO of enum mstate is not named in "
                "docs/design.md",
                "docs/design.md: stored order status `refunded` is not named",
                "service/src/order/order_user.c:1: enum user_state is not a plain list of "
                "names: scripts/check_refs.py cannot read its states",
                "service/src/http/router.c:3: route POST /healthz is not in docs/openapi.yaml",
                "service/src/http/router.c:4: route GET /readyz is not in docs/openapi.yaml",
                "lockcore/src/layers.txt:2: docs/lockcore.md's row of layer mysql does not name "
                "`mysql_url.c`",
                "lockcore/src/layers.txt:3: layer zk has no row in docs/lockcore.md's layer table",
                "service/src/layers.txt:3: layer http has no row in docs/design.md's layer "
                "table"]
        unwanted = [p for p in got if "OS_NEW" in p or "OS_DONE" in p or "OS_COUNT" in p or
                    "M_IDLE" in p or "/healthz is" in p.replace("POST /healthz", "")]
        if unwanted:
            print("self-test: reported, but documented:\n  " + "\n  ".join(unwanted))
            return 1
        # A router table of another form is not taken as having no routes.
        write("service/src/http/router.c", "ROUTES(ROW)\n")
        if "service/src/http/router.c: no route rows ({HTTP_<METHOD>, \"<path>\", ...}) " \
                "found: scripts/check_refs.py cannot read the router table" not in check(tmp):
            print("self-test: a router table it cannot read was not reported")
            return 1
        # A status the code no longer writes: the list above is stale.
        write("service/src/base/status.c", 'const char *const statuses[] = {"created", '
                                           '"reserved", "confirmed", "cancelled"};\n')
        if "scripts/check_refs.py: stored order status expired is not a string of " \
                "service/src/" not in check(tmp):
            print("self-test: a status the code lost was not reported")
            return 1
        missing = [w for w in want if w not in got]
        if missing:
            print("self-test: not reported:\n  " + "\n  ".join(missing))
            print("reported:\n  " + "\n  ".join(got))
            return 1
    print("check_refs self-test: ok")
    return 0


def main(argv):
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-") and argv[1] != "--self-test"):
        print(__doc__.split("\n\n")[2], file=sys.stderr)
        return 2
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    root = argv[1] if len(argv) == 2 else os.path.dirname(os.path.dirname(os.path.abspath(
        __file__)))
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print("check_refs: %d stale references (comments and docs must name what exists)" %
              len(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
