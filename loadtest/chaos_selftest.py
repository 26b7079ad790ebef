#!/usr/bin/env python3
"""loadtest/chaos_selftest.py — chaos.py's checkers on made-up states, the three races that seed
863295 found (c81711c): each case is a state the checker must pass, beside one it must still
flag, so that a checker that turned blind fails here too. Python 3 standard library only; starts
its own redis-server (on a free loopback port, in a temp dir, stopped on every exit). About 5 s,
most of it the 3 s cart-whole waits out before it reports a real split. ctest:
script_chaos_selftest.

  cart-whole  CartShop.check_whole against a real Redis. The checkpoint's snapshot read the
              cart's primary reserved and its part expired (or, read in the other order, the
              primary expired and the part reserved) while the sweeper was ending the hold: it
              finishes 0.5 s later (a thread writes the late record) → no violation. The same
              disagreement that stays (a split cart) → exactly one cart-whole violation.
  segments    the status guard of verify.sh: CartShop.holds_in is true for a SKU with a due
              entry or a reserved record (a cart's part in another SKU has no due entry of its
              own), false otherwise; and CartShop.checkpoint asks verify.sh not to compare the
              status endpoint for such a SKU (but still for one without holds).
  queue-budget QueueRoom.check_budget on a FIFO SKU of queue_max_active 8: 8 tickets live, one
              sent in an order of unknown outcome (no answer, eff MAYBE; the gate marked it used),
              then a 9th admitted → no violation; the same with no order, or one refused (eff
              NONE), → a queue-budget "active" violation; one answered 201 → none.

Usage: loadtest/chaos_selftest.py [--dir DIR]   (or CHAOS_SELFTEST_DIR=DIR)
DIR holds the chaos_cart.py and chaos_queue.py under test (default: this file's directory), e.g.
an older version's (`git show REV:loadtest/chaos_cart.py > DIR/chaos_cart.py`); chaos.py and
resp.py always come from this directory. Exit status 0 every case passed, 1 a case failed (what
the checker said, on stderr), 2 the test could not run (no redis-server, bad arguments).
"""

import argparse
import atexit
import importlib.util
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import chaos  # noqa: E402  (the real module: KEYS, json, YES/MAYBE/NONE, pairs, as_int, Checker)
from resp import Redis  # noqa: E402

SEED = 863295
HEX = "0123456789abcdef" * 2        # an order id's 32 hex digits


def load(directory, name):
    """The module NAME.py of DIRECTORY, under a name of its own (not chaos.py's import of it)."""
    path = os.path.join(directory, name + ".py")
    spec = importlib.util.spec_from_file_location("selftest_" + name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --- a throwaway redis-server ---------------------------------------------------------------------

class RedisServer:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="inventoryd-chaos_selftest.")
        self.proc = None
        self.port = None

    def start(self):
        exe = shutil.which("redis-server")
        if not exe:
            raise SetupError("redis-server is not on PATH (scripts/deps.sh installs it)")
        for _ in range(10):
            port = random.randint(10000, 32000)       # below the ephemeral range, as scripts/tests/lib.sh
            if connectable(port):
                continue
            log = open(os.path.join(self.dir, "redis-%d.log" % port), "w")
            self.proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                          "--dir", self.dir, "--daemonize", "no"], stdout=log, stderr=log,
                                         preexec_fn=die_with_parent)
            log.close()
            for _ in range(100):
                if self.proc.poll() is not None:
                    break                              # the port was taken meanwhile: another one
                if connectable(port):
                    self.port = port
                    return port
                time.sleep(0.05)
            self.stop()
        raise SetupError("redis-server did not start (logs in %s)" % self.dir)

    def stop(self):
        p, self.proc = self.proc, None
        if p is not None and p.poll() is None:
            p.terminate()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class SetupError(Exception):
    pass


def connectable(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def die_with_parent():
    """In the child: SIGKILL when this test dies (Linux's PR_SET_PDEATHSIG), so that even a
    kill -9 of the test (a ctest timeout) leaves no redis-server behind; elsewhere a no-op."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


# --- fakes of chaos.py's Run and Checker ----------------------------------------------------------

class Checks(chaos.Checker):
    """The real Checker (fail, examined, records_of, viol), with snapshot and verify_sh replaced:
    the snapshots are given, and verify.sh is not run, only its `status` argument recorded."""

    def __init__(self, run, snaps=None):
        super().__init__(run)
        self.snaps = snaps or {}
        self.verify_calls = {}

    def snapshot(self, rds, sku):
        return self.snaps.get(sku, {"meta": {}, "segs": {}, "users": {}, "intents": {}, "seg_keys": {}, "wall": time.time()})

    def verify_sh(self, cp, sku, status=True):
        self.verify_calls[sku] = status


class Run:
    def __init__(self, redis_port=None):
        self.a = SimpleNamespace(seed=SEED, duration=60, redis_port=redis_port, redis_cluster=None)
        self.lock = threading.Lock()
        self.lops = []
        self.checks = Checks(self)

    def redis(self, timeout):
        if self.a.redis_port is None:
            raise ConnectionError("this case has no Redis")
        return Redis(self.a.redis_port, timeout=timeout)


def lop(op, args, attempts):
    return SimpleNamespace(op=op, sku=args.get("sku"), args=args, key=None, attempts=attempts, final=None, ack=None, id=0)


def attempt(w0, status, eff, body=None, seq=0):
    return {"w0": w0, "w1": w0 + 0.01, "t0": w0, "t1": w0 + 0.01, "sent": True, "status": status, "eff": eff,
            "body": body, "err": None if status else "timeout", "seq": seq}


def text(rec):
    return json.dumps(rec, separators=(",", ":"))


def violations(run, check):
    return run.checks.viol[check]


def describe(v):
    return "; ".join(m for m, _ in v.values()) or "none"


# --- the cases ------------------------------------------------------------------------------------

def cart_records(shop, primary_status, part_status):
    """A cart of two items (k0 1 unit, its primary in k0's segment 0; k1 2 units, a part in k1's
    segment 1): (primary id, part id, primary record, part record)."""
    k0, k1 = shop.cart_skus[0], shop.cart_skus[1]
    oid, pid = "%s-0-%s" % (HEX, k0), "%s-1-%s" % (HEX, k1)
    primary = {"order_id": oid, "status": primary_status, "user_id": "c295-1", "segment": 0,
               "items": [{"sku": k0, "quantity": 1, "parts": [{"segment": 0, "quantity": 1}]},
                         {"sku": k1, "quantity": 2, "parts": [{"segment": 1, "quantity": 2}]}]}
    part = {"order_id": pid, "status": part_status, "part_of": oid, "quantity": 2, "segment": 1}
    return oid, pid, primary, part


def case_cart_whole(mods, port, snap_primary, snap_part, late, late_status):
    """The snapshot saw the primary snap_primary and the part snap_part; Redis holds the same,
    and `late` ("primary", "part" or None) is rewritten to late_status 0.5 s after the check
    starts (the sweeper finishing). Returns (violations, seconds)."""
    run = Run(port)
    shop = mods["cart"].CartShop(run, chaos)
    oid, pid, primary, part = cart_records(shop, snap_primary, snap_part)
    k0, k1 = shop.cart_skus[0], shop.cart_skus[1]
    keys = {"primary": (chaos.KEYS.seg(k0, 0, "orders"), oid), "part": (chaos.KEYS.seg(k1, 1, "orders"), pid)}
    rds = Redis(port)
    try:
        rds.cmd("FLUSHALL")
        rds.cmd("HSET", keys["primary"][0], oid, text(primary))
        rds.cmd("HSET", keys["part"][0], pid, text(part))
    finally:
        rds.close()

    def sweeper():
        time.sleep(0.5)
        rec = dict(primary if late == "primary" else part, status=late_status)
        r = Redis(port)
        try:
            r.cmd("HSET", keys[late][0], keys[late][1], text(rec))
        finally:
            r.close()

    th = threading.Thread(target=sweeper) if late else None
    t0 = time.monotonic()
    if th:
        th.start()
    try:
        shop.check_whole("cp1", {oid: primary, pid: part}, {}, False)
    finally:
        if th:
            th.join()
    return violations(run, "cart-whole"), time.monotonic() - t0


def test_cart_whole(mods, port, check):
    v, dt = case_cart_whole(mods, port, "reserved", "expired", "primary", "expired")
    check("cart-whole: part read expired after its cart's expiry, the primary expired 0.5 s later → no violation",
          not v, "%d violation(s): %s" % (len(v), describe(v)))
    v, dt = case_cart_whole(mods, port, "expired", "reserved", "part", "expired")
    check("cart-whole: part read reserved before its cart's expiry, the part follows 0.5 s later → no violation",
          not v, "%d violation(s): %s" % (len(v), describe(v)))
    v, dt = case_cart_whole(mods, port, "reserved", "expired", None, None)
    check("cart-whole: a part expired while its cart stays reserved (a split cart) → exactly one violation",
          len(v) == 1 and "part %s-1-" % HEX in describe(v), "%d violation(s): %s" % (len(v), describe(v)))
    check("cart-whole: ... reported after the re-reads, within 5 s", dt < 5.0, "took %.1f s" % dt)


def test_status_guard(mods, port, check):
    cart = mods["cart"]
    run = Run(port)
    shop = cart.CartShop(run, chaos)
    k0, k1, k2 = shop.cart_skus[:3]
    oid, pid, primary, part = cart_records(shop, "reserved", "reserved")
    single = "%s-0-%s" % ("f" * 32, k2)
    confirmed = {"order_id": single, "status": "confirmed", "user_id": "c295-2", "quantity": 1, "segment": 0, "sku": k2}

    def seg(orders=None, due=None):
        return {"stock": 10, "sver": 1, "cnt": {}, "orders": orders or {}, "idem": {}, "due": due or {}, "follow": set()}

    def snap(n, segs):
        return {"meta": {"segments": str(n)}, "segs": segs, "users": {}, "intents": {}, "seg_keys": {}, "wall": time.time()}

    snaps = {
        # the cart's home SKU: its primary, and the hold's due entry
        k0: snap(1, {0: seg({oid: text(primary)}, {oid: str(int(time.time() * 1000) + 2000)})}),
        # the part's SKU: a reserved part, no due entry of its own (the primary's is in k0)
        k1: snap(2, {0: seg(), 1: seg({pid: text(part)})}),
        # no hold: a confirmed order
        k2: snap(1, {0: seg({single: text(confirmed)})}),
    }
    holds_in = getattr(cart.CartShop, "holds_in", None)
    if holds_in is None:
        check("segments: CartShop.holds_in exists", False, "chaos_cart.CartShop has no holds_in")
    else:
        spaced = {"order_id": pid, "status": "reserved", "part_of": oid, "quantity": 2}
        cases = [
            ("a reserved part record, no due entry", snaps[k1], True),
            ("... written with spaces (json.dumps' default)", snap(1, {0: seg({pid: json.dumps(spaced)})}), True),
            ("a due entry", snaps[k0], True),
            ("a confirmed record only", snaps[k2], False),
            ("an expired part, a cancelled order", snap(2, {0: seg({pid: text(dict(part, status="expired"))}),
                                                        1: seg({single: text(dict(confirmed, status="cancelled"))})}), False),
            ("no records", snap(1, {0: seg()}), False),
        ]
        for name, s, want in cases:
            got = holds_in(s)
            check("segments: holds_in(%s) is %s" % (name, want), got is want, "got %r" % (got,))
    run.checks.snaps = snaps
    rds = Redis(port)
    try:
        rds.cmd("FLUSHALL")                      # the checkpoint reads the cart intents: none
    finally:
        rds.close()
    shop.checkpoint("cp1", False)
    calls = run.checks.verify_calls
    want = {k0: False, k1: False, k2: True}
    check("segments: the checkpoint compares the status endpoint only where no hold is (k0, k1 no; k2 yes)",
          calls == want, "verify.sh status= %s, want %s" % (sorted(calls.items()), sorted(want.items())))
    v = {c: d for c, d in run.checks.viol.items() if d}
    check("segments: ... and the checkpoint's own checks find nothing in that state", not v,
          "; ".join("%s: %s" % (c, describe(d)) for c, d in v.items()))


def budget_case(mods, order):
    """check_budget on qf (queue_max_active 8, tickets of 5 s): users 0..7 admitted 100 ms apart
    from T, user 0's ticket sent in `order` (a list of attempts, or None: no order) at T + 1 s,
    user 8 admitted at T + 1.5 s. Returns the queue-budget violations."""
    q = mods["queue"]
    run = Run()
    room = q.QueueRoom(run, chaos)
    s = room.skus[0]
    cap = room.conf[s]["queue_max_active"]
    ttl = room.conf[s]["queue_ticket_ttl_s"] * 1000
    room.put_stock[s] = 100
    T = 1_800_000_000_000
    adm_at = {"q295-qf-%d" % i: T + 100 * i for i in range(cap)}
    adm_at["q295-qf-%d" % cap] = T + 1500
    tickets = {u: "t1.%s.%s.%d.%d.MAC%d" % (s, u, i, at + ttl, i) for i, (u, at) in enumerate(sorted(adm_at.items(), key=lambda x: x[1]))}
    first = "q295-qf-0"
    ops = defaultdict(list)
    seq = 0
    for u, t in tickets.items():
        seq += 1
        ops["qpoll"].append(lop("qpoll", {"user": u}, [attempt(adm_at[u] / 1000.0 + 0.05, 200, chaos.NONE,
                                                              {"state": "admitted", "ticket": t}, seq)]))
    adm = {u: "%d:%d" % (i, adm_at[u] + ttl) for i, u in enumerate(sorted(adm_at, key=adm_at.get))}
    if order is not None:
        ops["qorder"].append(lop("qorder", {"sku": s, "quantity": 1, "mode": "keyed", "as_user": first, "ticket": tickets[first]}, order))
        if any(a["eff"] != chaos.NONE for a in order):
            adm[first] = "used:%s-0-%s" % (HEX, s)      # the gate made the order: the ticket is used
    g = {"q": {"issued": str(len(adm)), "seq": str(len(adm)), "served": str(len(adm))}, "adm": adm, "line": {}, "order": [],
         "live": {}, "meta": {"q_pct": "150", "q_ttl": str(ttl // 1000)}, "now_ms": T + 2000}
    snap = {"meta": {"segments": "2"}, "segs": {0: {"stock": 50, "orders": {}, "due": {}}, 1: {"stock": 49, "orders": {}, "due": {}}}}
    room.check_budget("cp1", s, g, snap, ops, set())
    return violations(run, "queue-budget"), run.checks.budget_notes


def test_budget(mods, check):
    T1 = 1_800_000_001.0        # T + 1 s, in s
    v, notes = budget_case(mods, [attempt(T1, None, chaos.MAYBE)])
    check("queue-budget: a ticket sent in an order of unknown outcome (no answer) is not certainly live → no violation",
          not v, "%s (%s)" % (describe(v), "; ".join(notes)))
    v, _ = budget_case(mods, [attempt(T1, 503, chaos.MAYBE, {"error": "unavailable", "outcome": "unknown"}),
                              attempt(T1 + 0.2, None, chaos.MAYBE)])
    check("queue-budget: ... a 503 outcome unknown, retried without an answer → no violation", not v, describe(v))
    v, _ = budget_case(mods, [attempt(T1, 201, chaos.YES, {"order_id": "%s-0-x" % HEX, "status": "reserved"})])
    check("queue-budget: a ticket used by an order answered 201 → no violation", not v, describe(v))
    v, _ = budget_case(mods, None)
    check("queue-budget: 9 tickets certainly live (no order) for queue_max_active 8 → a violation",
          len(v) == 1 and "9 tickets were live" in describe(v), "%d violation(s): %s" % (len(v), describe(v)))
    v, _ = budget_case(mods, [attempt(T1, 503, chaos.NONE, {"error": "unavailable"})])
    check("queue-budget: ... the ticket's only order refused (a plain 503, eff NONE) → still a violation",
          len(v) == 1 and "9 tickets were live" in describe(v), "%d violation(s): %s" % (len(v), describe(v)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=os.environ.get("CHAOS_SELFTEST_DIR") or HERE,
                    help="the directory of the chaos_cart.py and chaos_queue.py under test (default: this file's)")
    a = ap.parse_args()
    try:
        mods = {"cart": load(a.dir, "chaos_cart"), "queue": load(a.dir, "chaos_queue")}
    except (OSError, ImportError, SyntaxError) as e:
        print("chaos_selftest: cannot load the checkers of %s: %s" % (a.dir, e), file=sys.stderr)
        return 2
    print("chaos_selftest: checkers of %s" % os.path.abspath(a.dir))
    results = []

    def check(name, ok, why):
        results.append(ok)
        if ok:
            print("ok   - %s" % name, flush=True)
        else:
            print("FAIL - %s\n       %s" % (name, why), file=sys.stderr, flush=True)

    server = RedisServer()
    atexit.register(server.cleanup)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda n, f: sys.exit(128 + n))     # atexit still stops Redis
    t0 = time.monotonic()
    try:
        port = server.start()
        for name, fn, args in (("cart-whole", test_cart_whole, (mods, port, check)),
                               ("segments", test_status_guard, (mods, port, check)),
                               ("queue-budget", test_budget, (mods, check))):
            try:
                fn(*args)
            except Exception as e:      # a checker that breaks on the state is a failure too
                check("%s: ran" % name, False, "%s: %s" % (e.__class__.__name__, e))
    except SetupError as e:
        print("chaos_selftest: %s" % e, file=sys.stderr)
        return 2
    finally:
        server.cleanup()
    failed = results.count(False)
    print("chaos_selftest: %d passed, %d failed (%.1f s)" % (len(results) - failed, failed, time.monotonic() - t0))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
