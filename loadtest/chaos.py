#!/usr/bin/env python3
"""loadtest/chaos.py — the clients and the checker of loadtest/chaos.sh, the randomized
concurrent-history test (Jepsen-style). Python 3 standard library only; started by chaos.sh,
which owns every process (redis-server, the inventoryd instances) and runs the nemesis.

Many client threads send a seeded random mix of requests straight to the instances (PUT with
1..16 segments — never the count of the SKU's last PUT —, restock, orders with and without
Idempotency-Key, cancels, DELETE of a SKU, DELETE then PUT, status reads; and SPEC §11's sale
rules: PUTs with limit_per_user / reservation_ttl_s by the SKU's class, PATCHes of them, keyed
orders from a small pool of users, confirms of holds before, racing and after their expiry, and
extensions of holds (issue 33) likewise) on
SKU names that alias (x, x:1, x:2, x:3) and behave like real clients: short timeouts, bounded retries with back-off (the same
Idempotency-Key on every retry), a keyless order whose outcome is unknown is not retried.
Every attempt and its answer is one line of history.jsonl. At checkpoints (nemesis paused,
clients idle, instances ready with nothing in flight, no segment lock held) the state is read
from Redis directly (a tiny RESP client, plus loadtest/verify.sh per SKU) and checked against
the history (since SPEC §11 also holds, confirms, limits and the users' entries; at the end,
clients stopped, the last holds are waited out first); at the end the answers themselves are
checked too. See loadtest/README.md and
docs/reliability.md ("Randomized history test") for what is checked and why it is sound.

The damager (a thread beside the clients, the nemesis of the data) writes a damaged value into
one counter of one settled segment (stock, sver, cnt t/s/o: "{v}.0", " {v}", "{v}e0", "1e3",
"abc"), reading the whole segment in the same script, holds it, then writes the value back only
if the counter still holds the damage, again reading the segment in the same script. Nothing
but the repair may write the segment meanwhile (a PUT/DELETE of the SKU that overlapped, or on
a cluster a master failover, excuse a change); the SKU's orders may fail on that segment (a
5xx is an honest answer) but must fail over to the others: not a 5xx storm. Status answers
meanwhile must satisfy §8 like any other. It is repaired before every checkpoint.

At each checkpoint every instance's /metrics must show inventory_order_redis_calls_max ≤
inventory_order_redis_call_budget ("not available" when the binary exports neither); on one
Redis, INFO commandstats deltas over the stretches of traffic give the commands per request.

Orders larger than one segment (SPEC §13, issue 22): --large-orders F (default 0.1; 0 gives
the mix of binaries before it) of the orders ask for MAX_QTY+1..LARGE_QTY_MAX units; at each
checkpoint Redis must show every multi-segment order whole or absent (multi-parts), and every
409 insufficient_stock must have come when the remaining total was below the quantity
(insufficient-409: from the checkpoint's read of the stock and the orders begun since; each
quiet checkpoint also sends one order larger than any one segment per SKU without a limit).

With --key-schema 1 the checker reads the keys of the binaries before 34f3be8 (inv:{S}:…).

With --queue 1 (chaos.sh's default, issue 32) two more SKUs have a waiting room (SPEC §16):
loadtest/chaos_queue.py sends their crowd, their queue clients' joins, polls, ticketed orders,
pauses and rate changes (--queue-clients threads), and checks queue-places, queue-fifo,
queue-tickets, queue-budget, queue-sold-out and queue-pause at every checkpoint.

With --redis-cluster (chaos.sh --cluster) Redis is a Redis Cluster: every read goes to the
master of its key's slot and SCANs to every master (loadtest/resp.py; verify.sh's inventory-check
asks the cluster for each key's slot), the slot map asked for again after each failover.

Talks to chaos.sh through files in --ctl: it creates pause.<N> and waits for paused.<N> (the
nemesis has restored everything and holds still), later creates resume.<N>; done at the end.
With --calm S, calm exists in the last S seconds of traffic before each checkpoint: the nemesis
starts no fault then, so that a checkpoint does not wait long for one (a master's takes ~8 s).
Exit status: 0 every check passed, 1 a violation, 3 infrastructure failure.
"""

import argparse
import bisect
import calendar
import http.client
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict

T0 = time.monotonic()
LOG = None


def now():
    """Seconds since this process started (monotonic: the ordering of events is what counts)."""
    return time.monotonic() - T0


def log(msg):
    line = "[chaos %s] %s" % (time.strftime("%H:%M:%S"), msg)
    print(line, file=sys.stderr, flush=True)
    if LOG:
        LOG.write(line + "\n")
        LOG.flush()



# The key schema's table (service/store_keys.txt, docs/design.md "Key schema"): every key name
# used below is one of its rows (Keys refuses any other), and a segment's data keys, those a
# drop of the segment deletes, are its "dropped" rows. A dropped segment keeps only its `sver`,
# as a tombstone that stops an older PUT still rolling out from bringing it back, its rules
# version, its order log until the sink drained it, its undone tombstones and lockcore's keys.
KEY_TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "service", "store_keys.txt")


def load_key_table(path):
    """{(scope, name): (type, drop)} from store_keys.txt: scope "seg" (inv:2:{S/k}:name), "sku"
    (inv:2:{S}:name) or "global"; drop "dropped", "kept" or "-"."""
    rows = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, typ, drop = (c.strip() for c in line.split("|"))
            m = re.match(r"^inv:2:\{S(?:/(k))?\}:(.+)$", key)
            rows[("seg" if m.group(1) else "sku", m.group(2)) if m else ("global", key[len("inv:2:"):])] = (typ, drop)
    return rows


KEY_ROWS = load_key_table(KEY_TABLE)
SEGMENT_DATA_KEYS = {name for (scope, name), (_, drop) in KEY_ROWS.items() if scope == "seg" and drop == "dropped"}


def order_statuses(path=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "service",
                                     "src", "store", "order_status.h")):
    """The stored order statuses (SPEC §11) as the service's one table has them
    (service/src/store/order_status.h, rows `STATUS(ID, "name", live, final, "to", ...`):
    (live, ended), each a tuple of names in the table's order. Live ones hold units (and count
    for their user), ended (final) ones not."""
    with open(path, encoding="utf-8") as f:
        rows = re.findall(r'\n *STATUS\(([A-Z0-9_]+), "([a-z_]+)", ([01]), ([01]),', f.read())
    if not rows:
        raise SystemExit("chaos.py: no STATUS rows in %s" % path)
    return (tuple(r[1] for r in rows if r[2] == "1"), tuple(r[1] for r in rows if r[3] == "1"))


LIVE, ENDED = order_statuses()


def units(rec):
    """A record's units in its own segment (service/src/store/lua/include/units.lua): a multi-segment
    order's primary holds its own part's quantity, any other record its quantity."""
    parts = rec.get("parts")
    if not isinstance(parts, list):
        return rec.get("quantity") if isinstance(rec.get("quantity"), int) else 0
    for p in parts:
        if isinstance(p, dict) and p.get("segment") == rec.get("segment"):
            return int(p.get("quantity") or 0)
    return 0


class Keys:
    """The key schema the checker reads (docs/design.md): 2 (default) `inv:2:{S}:…` and
    `inv:2:{S/k}:…`; 1 (--key-schema 1, the binaries before 34f3be8) `inv:{S}:…` and
    `inv:{S:k}:…` — in which SKU `x:1`'s keys share their tag with segment 1 of SKU `x`."""

    def __init__(self, schema):
        self.v = schema
        self.pre, self.sep = ("inv:2:", "/") if schema == 2 else ("inv:", ":")

    @staticmethod
    def known(scope, suffix):
        """suffix, when it is a row of the key table (service/store_keys.txt) in scope."""
        if (scope, suffix) not in KEY_ROWS:
            raise ValueError("%s key :%s is no row of service/store_keys.txt" % (scope, suffix))
        return suffix

    def sku(self, s, suffix):
        return "%s{%s}:%s" % (self.pre, s, self.known("sku", suffix))

    def seg(self, s, k, suffix):
        return "%s{%s%s%d}:%s" % (self.pre, s, self.sep, k, self.known("seg", suffix))

    def seg_glob(self, s, suffix):
        return "%s{%s%s*}:%s" % (self.pre, s, self.sep, suffix if suffix == "*" else self.known("seg", suffix))

    def seg_re(self, s):
        return re.compile(r"^" + re.escape(self.pre) + r"\{" + re.escape(s + self.sep) + r"(\d+)\}:(.+)$")


KEYS = Keys(2)

class Infra(Exception):
    """Something the test needs (Redis, the nemesis) is not there: not a finding about the service."""


# --- Redis, read directly: one redis-server (Redis) or a Redis Cluster (Cluster), loadtest/resp.py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resp import Cluster, Redis, RedisError  # noqa: E402  (beside this file)
import chaos_queue  # noqa: E402  (the waiting room's SKUs, clients and checks, issue 32)
import chaos_cart  # noqa: E402  (carts and limit groups, issue 33)


def pairs(lst):
    return dict(zip(lst[0::2], lst[1::2])) if isinstance(lst, list) else {}


def as_int(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


# --- HTTP ---------------------------------------------------------------------------------------

def http_call(port, method, path, body=None, headers=None, timeout=3.0):
    """One request on a fresh connection. Returns sent (False: the connection was never
    established, so the server cannot have seen the request), status (None: no answer),
    body (parsed JSON or text), err, retry_after."""
    h = {"Connection": "close"}
    if headers:
        h.update(headers)
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        try:
            conn.connect()
        except OSError as e:
            return {"sent": False, "status": None, "body": None, "err": "connect: %s" % e.__class__.__name__}
        try:
            conn.request(method, path, body=data, headers=h)
            r = conn.getresponse()
            raw = r.read()
            status, ra = r.status, r.getheader("Retry-After")
        except (OSError, http.client.HTTPException) as e:
            return {"sent": True, "status": None, "body": None, "err": e.__class__.__name__}
    finally:
        conn.close()
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = raw[:300].decode("utf-8", "replace")
    return {"sent": True, "status": status, "body": parsed, "err": None, "retry_after": ra}


# --- logical operations and their attempts ----------------------------------------------------

NONE, YES, MAYBE = "none", "yes", "maybe"
# The nemesis events (nemesis.jsonl) that are faults, as chaos.sh names them. flag-restart: an
# instance killed and restarted with the other --order-log flag; sink-kill9: the order-log sink
# killed and restarted 1-4 s later (issue 29, "The net").
FAULTS = ("kill9", "sigstop", "redis-kill9", "master-kill9", "master-cut-kill9", "master-pause-kill9",
          "sku-master-kill9", "sku-master-cut-kill9", "sku-master-pause-kill9", "damage", "crash",
          "flag-restart", "sink-kill9")
# Faults that excuse no 5xx of the instances (availability): the damager's (judged on their own
# terms) and the sink's, which no request waits for.
NO_EXCUSE = ("damage", "sink-kill9")


def effect(op, a):
    """What an attempt may have changed: YES (2xx), NONE (never sent, a 4xx, an order's plain
    503 — documented as "nothing changed" —, or a read), MAYBE (no answer, or a 5xx that does not
    promise nothing changed: an order's 503 "outcome":"unknown", any admin 5xx)."""
    if not a["sent"] or op in ("status", "qpoll", "qstatus"):
        return NONE
    s = a["status"]
    if s is None:
        return MAYBE
    if 200 <= s < 300:
        return YES
    if 400 <= s < 500:
        return NONE
    if op in ("order", "qorder", "corder") and s == 503 and not (isinstance(a["body"], dict) and a["body"].get("outcome") == "unknown"):
        return NONE
    return MAYBE


class Lop:
    """One logical operation: what a client wanted, and every attempt it made for it."""
    __slots__ = ("id", "op", "sku", "thr", "args", "key", "attempts", "final", "ack")

    def __init__(self, lid, op, sku, thr, args, key):
        self.id, self.op, self.sku, self.thr, self.args, self.key = lid, op, sku, thr, args, key
        self.attempts, self.final, self.ack = [], None, None

    @property
    def t0(self):
        return self.attempts[0]["t0"]

    @property
    def t1(self):
        return self.attempts[-1]["t1"]

    def maybe(self):
        return any(a["eff"] == MAYBE for a in self.attempts)

    def seqs(self):
        return [a["seq"] for a in self.attempts]


class History:
    """history.jsonl: one line per attempt ("kind":"attempt"), per finished logical operation
    ("kind":"lop"), per checkpoint. Thread-safe."""

    def __init__(self, path):
        self.f = open(path, "w", buffering=1 << 16)
        self.lock = threading.Lock()
        self.seq = 0

    def write(self, rec):
        with self.lock:
            self.seq += 1
            rec["seq"] = self.seq
            self.f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            return self.seq

    def close(self):
        with self.lock:
            self.f.flush()
            self.f.close()


# --- the damager's faults ---------------------------------------------------------------------

# The keys of one segment the damage script reads (every one a service's script may write) and
# the counters it damages: (index in DAMAGE_KEYS, hash field or None).
DAMAGE_KEYS = ["stock", "sver", "cnt", "orders", "idem", "rst", "due", "give"]
DAMAGE_TARGETS = [(0, None), (1, None), (2, "t"), (2, "s"), (2, "o")]
# What a damaged counter reads, from its value {v}: Lua's tonumber accepts the first three, and
# INCRBY/HINCRBY refuse every one (docs/reliability.md, issue 18 item 5).
DAMAGE_FORMS = ["{v}.0", " {v}", "{v}e0", "1e3", "abc"]
# KEYS: DAMAGE_KEYS of one segment. ARGV: index of the target key, hash field ("" for a
# string), "damage" or "repair", the good value, the damaged one. Reads the whole segment
# (JSON) and, atomically with the read: damage writes the damaged value if the counter holds
# the good one (returns 1; 2 if it holds the damaged one already, 0 otherwise); repair writes
# the good one back if the counter still holds the damaged one (1; else 0). Returns
# {result, the segment as it was before this script, the counter's value}.
DAMAGE_LUA = r"""
local st = {}
for i, k in ipairs(KEYS) do
  local t = redis.call('TYPE', k)['ok']
  local v = nil
  if t == 'string' then v = redis.call('GET', k)
  elseif t == 'hash' then v = redis.call('HGETALL', k)
  elseif t == 'set' then v = redis.call('SMEMBERS', k); table.sort(v)
  elseif t == 'zset' then v = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
  end
  st[#st + 1] = {k, t, v}
end
local key, field = KEYS[tonumber(ARGV[1])], ARGV[2]
local cur
if field == '' then cur = redis.call('GET', key) else cur = redis.call('HGET', key, field) end
local function put(x) if field == '' then redis.call('SET', key, x) else redis.call('HSET', key, field, x) end end
local res = 0
if ARGV[3] == 'damage' then
  if cur == ARGV[4] then put(ARGV[5]); res = 1 elseif cur == ARGV[5] then res = 2 end
elseif cur == ARGV[5] then put(ARGV[4]); res = 1 end
return {res, cjson.encode(st), cur or ''}
"""


def seg_state(st):
    """The damage script's JSON of a segment as {key suffix: value} (hashes as dicts)."""
    out = {}
    for k, t, *v in st:
        v = v[0] if v else None
        if t in ("hash", "zset") and isinstance(v, list):
            v = pairs(v)
        out[k.rsplit(":", 1)[1]] = (t, v)
    return out


# --- the run ------------------------------------------------------------------------------------

MAX_QTY = 5
# Large orders (SPEC §13, --large-orders F: that fraction of orders, default 0.1): quantities
# above MAX_QTY up to LARGE_QTY_MAX, the most an order may ask for (SPEC §5), often more than
# one segment of a SKU holds (a PUT's stock is 0..2000 in 1..16 segments, and a sale's tail
# leaves a few units in each), so that orders are served from several segments.
LARGE_QTY_MAX = 100
MAX_ATTEMPTS = 6
RETRY_FOR_S = 8.0
# The sale rules (SPEC §11) by SKU: the i-th SKU's class is i % 4 — 0: a per-user limit and
# holds, 1: holds only, 2: a limit only, 3: neither. A limit starts at 2..3 and a PATCH may raise
# it by one, up to LIMIT_MAX, never lower it: limits sent only rise, so "no user over the limit"
# is judged against the highest limit sent (a stale PATCH applied late may lower the meta's
# below it, never the units admitted before). A hold's TTL is 1 or 2 s, changed by PATCHes at
# will. Since issue 29 the PATCHes also change the rules mid-sale the way an operator does: a
# SKU of class 1 or 3 may get a limit added (0 -> 2..3, LIMIT_ADD_PCT % of its PATCHes; from
# then on it is a limited SKU: its later PUTs carry the limit, and "no user over the limit"
# counts the units of the orders begun once the limit holds for good: the answer of a PUT or
# PATCH stating a limit begun after every one stating none may have been applied, as one whose
# args were taken before the add may be applied after it (Checker.limit_from)), a
# SKU with holds has its TTL set to 0 now and then (TTL_ZERO_PCT %: later orders are final at
# once, earlier holds must still expire), and the sale window is closed (sale_end a second in
# the past, WINDOW_CLOSE_PCT %) for 0.2-0.8 s and opened again (sale_end null) by the same
# client. Every PATCH states all three rules, so the rules in force after one that was answered
# are known: "rules-in-force" judges each order begun after such an answer by them.
LIMIT_MAX = 5
TTLS = (1, 2)
LIMIT_ADD_PCT = 15
TTL_ZERO_PCT = 20
WINDOW_CLOSE_PCT = 12
# A rule change whose outcome is unknown (no answer, a 5xx) may still be applied this long after
# it was given up on (a request held by a SIGSTOPped instance: ≤ 5 leases, plus slack): orders
# begun within it after such a change are not judged by "rules-in-force".
STALE_RULE_S = 15.0
# A multi-segment order's parts may be sold without its primary until this long after its
# client gave up (a heal waits for the intent's deadline, then acts; docs/design.md): a status
# answer then may show more units than its orders could hold.
MULTI_NEAR_S = 10.0
# How far behind a status answered from an instance's snapshot may be (SPEC §15): the refresh
# (chaos runs inventoryd's default --status-refresh-ms, 250 ms), the read's own round trip and a
# loaded machine's scheduling.
SNAPSHOT_STALE_S = 1.5
USERS = 5               # keyed orders come from this many users, so that limits bite
# A hold expires within 1 s of expires_at + one --redis-timeout-ms (SPEC §11): 1.5 s here.
EXPIRY_BOUND_S = 1.5
# Redis's TIME and this process's time.time() are the same machine's clock: an answer is
# compared with expires_at allowing this much (ms rounding of expires_at, scheduling).
CLOCK_SLACK_S = 0.02
# The availability check: outside every fault, a SKU's orders (confirms, cancels) may not be
# answered 5xx this often (%), given at least this many answers.
AVAIL_MAX_5XX_PCT = 20
AVAIL_MIN_ANSWERS = 30
# Hold extensions (issue 33): every PUT (with --extends > 0) sets hold_extend_s EXT_S and
# hold_extend_max EXT_MAX; an extension asks 1..EXT_S seconds (or none: EXT_S), now and then a
# bad number (400, nothing changed). So a hold's expiry is its 201's expires_at plus at most
# EXT_S per extension that may have run.
EXT_S = 2
EXT_MAX = 2


def parse_iso(t):
    """An RFC 3339 time as the service writes it ("…T…Z", ms) in seconds since the epoch, or None."""
    m = re.match(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z$", t) if isinstance(t, str) else None
    if not m:
        return None
    y, mo, d, h, mi, se = (int(x) for x in m.groups()[:6])
    frac = float("0." + m.group(7)) if m.group(7) else 0.0
    return calendar.timegm((y, mo, d, h, mi, se, 0, 0, 0)) + frac


class Run:
    def __init__(self, a):
        self.a = a
        self.ports = [int(p) for p in a.ports.split(",")]
        # SKU names that alias: x, x:1, x:2, x:3 (in key schema 1 SKU x:k's keys met segment
        # k's of x), then y, y:1, … for more than 4.
        self.skus = ["chaos%d-%s%s" % (a.seed % 1000, chr(ord("a") + i // 4), ":%d" % (i % 4) if i % 4 else "")
                     for i in range(a.skus)]
        self.last_segments = {}         # sku -> the segment count of the last PUT sent
        # The sale rules each SKU's PUTs and PATCHes send (LIMIT_MAX, TTLS above): {"limit", "ttl"}.
        rr = random.Random("%d/rules" % a.seed)
        self.rules = {s: {"limit": rr.randint(2, 3) if i % 4 in (0, 2) and a.rules else 0,
                          "ttl": rr.choice(TTLS) if i % 4 in (0, 1) and a.rules else 0,
                          "holds": i % 4 in (0, 1) and a.rules,   # its PATCHes set a TTL (or 0)
                          "closed": False,                        # a window close not yet undone
                          } for i, s in enumerate(self.skus)}
        # sku -> the PATCH lops that added its limit (0 -> n): "limits" counts from their answer.
        self.limit_adds = defaultdict(list)
        self.users = ["u%d-%d" % (a.seed % 1000, i) for i in range(USERS)]
        self.holds = []                 # (order_id, expires_at in s since the epoch, lop) of 201 holds
        self.extended_to = {}           # order_id -> the expires_at of its latest 200 extension
        self.hist = History(os.path.join(a.out, "history.jsonl"))
        self.lock = threading.Lock()
        self.lops = []
        self.next_id = 0
        self.known_orders = []          # (order_id, lop) of acknowledged orders, for cancels
        self.stop = threading.Event()   # clients: leave the loop
        self.pause = threading.Event()  # clients: go idle
        self.idle = 0
        self.idle_cv = threading.Condition()
        self.traffic_s = 0.0            # seconds of traffic so far (pauses excluded)
        self.traffic_since = None       # when the current stretch of traffic began
        self.checks = Checker(self)
        self.checkpoints = []
        self.damages = []               # the damager's faults, their segment before and at repair
        self.max_qty = LARGE_QTY_MAX if a.large_orders > 0 else MAX_QTY
        # (when Redis was read at a checkpoint, {sku: Σ stock then, or None}): where the 409
        # insufficient_stock check starts from (history_checks)
        self.stock_reads = []
        self.seg_reads = []             # the same reads per segment: (t, {sku: {k: stock}}), for the report
        self.stretches = []             # stretches of traffic: requests sent, Redis commands run
        self.stretch = (0.0, None)
        self.damager_failed = None
        # The waiting room's SKUs, clients and checks (--queue 1; loadtest/chaos_queue.py)
        self.room = chaos_queue.QueueRoom(self, sys.modules[__name__]) if a.queue else None
        # Carts and limit groups (--cart 1; loadtest/chaos_cart.py)
        self.shop = chaos_cart.CartShop(self, sys.modules[__name__]) if a.cart else None

    def redis(self, timeout):
        """A reading connection to Redis: the one server, or the cluster (routed by slot)."""
        if self.a.redis_cluster:
            return Cluster(self.a.redis_cluster, timeout=timeout, retry_s=timeout)
        return Redis(self.a.redis_port, timeout=timeout)

    # -- logical operations --
    def new_lop(self, op, sku, thr, args, keyed):
        with self.lock:
            self.next_id += 1
            lid = self.next_id
            lop = Lop(lid, op, sku, thr, args, "k%d-%d" % (self.a.seed, lid) if keyed else None)
            self.lops.append(lop)
        if op == "order" and "user_id" not in args:
            args["user_id"] = "L%d-%d" % (self.a.seed, lid)
        return lop

    def execute(self, rng, lop, method, path, body=None, admin=False, headers=None):
        """Sends the logical operation, retrying like a real client; fills lop.attempts,
        lop.final ("acked", "failed" or "unknown") and lop.ack. headers: more of them (the
        waiting room's user, X-User)."""
        headers = dict(headers or {})
        if admin:
            headers["Authorization"] = "Bearer " + self.a.token
        if lop.key:
            headers["Idempotency-Key"] = lop.key
        for n in range(MAX_ATTEMPTS):
            inst = rng.randrange(len(self.ports))
            t0, w0 = now(), time.time()
            r = http_call(self.ports[inst], method, path, body, headers, self.a.client_timeout)
            t1 = now()
            a = {"inst": inst, "t0": t0, "t1": t1, "w0": w0, "w1": time.time(), "sent": r["sent"], "status": r["status"],
                 "body": r["body"], "err": r["err"]}
            a["eff"] = effect(lop.op, a)
            a["seq"] = self.hist.write({"kind": "attempt", "lop": lop.id, "n": n, "thr": lop.thr,
                                        "op": lop.op, "sku": lop.sku, "args": lop.args, "key": lop.key,
                                        "inst": inst, "t0": round(t0, 4), "t1": round(t1, 4), "w0": round(w0, 3), "w1": round(a["w1"], 3),
                                        "status": r["status"], "body": r["body"], "err": r["err"],
                                        "eff": a["eff"]})
            lop.attempts.append(a)
            s = r["status"]
            if r["sent"] and s is not None and s < 500:
                break
            # A keyless order whose outcome is unknown is not retried: a retry could buy twice.
            if lop.op in ("order", "qorder", "corder") and not lop.key and a["eff"] == MAYBE:
                break
            # Nor an extension: each one that lands adds its seconds again (not idempotent).
            if lop.op == "extend" and a["eff"] == MAYBE:
                break
            # Bounded: MAX_ATTEMPTS, RETRY_FOR_S since the first attempt, and a client asked to
            # hold still for a checkpoint gives up (its outcome stays what the attempts say).
            if n + 1 == MAX_ATTEMPTS or now() - lop.t0 > RETRY_FOR_S or self.pause.is_set():
                break
            back = min(1.0, 0.05 * 2 ** n) * rng.uniform(0.5, 1.5)
            if r.get("retry_after"):
                try:
                    back = max(back, min(1.0, float(r["retry_after"])))
                except ValueError:
                    pass
            time.sleep(back)
        effs = [x["eff"] for x in lop.attempts]
        lop.final = "acked" if YES in effs else ("unknown" if MAYBE in effs else "failed")
        lop.ack = next((x for x in lop.attempts if x["eff"] == YES), None)
        self.hist.write({"kind": "lop", "lop": lop.id, "op": lop.op, "sku": lop.sku, "final": lop.final,
                         "attempts": len(lop.attempts), "t0": round(lop.t0, 4), "t1": round(lop.t1, 4)})
        return lop

    # -- operations --
    def op_put(self, rng, thr, sku):
        # 1..16 segments, never the count of the last PUT sent for this SKU: every re-PUT
        # changes the layout (segments dropped, added, their keys reset).
        with self.lock:
            last = self.last_segments.get(sku)
            n = rng.choice([x for x in range(1, 17) if x != last])
            self.last_segments[sku] = n
            rules = dict(self.rules[sku])
        args = {"stock": rng.randint(0, 2000), "segments": n}
        if rules["limit"]:
            args["limit_per_user"] = rules["limit"]
        if rules["ttl"]:
            args["reservation_ttl_s"] = rules["ttl"]
        if self.a.extends > 0:
            args["hold_extend_s"], args["hold_extend_max"] = EXT_S, EXT_MAX
        lop = self.new_lop("put", sku, thr, args, True)
        return self.execute(rng, lop, "PUT", "/api/v1/skus/" + sku, args, admin=True)

    def op_restock(self, rng, thr, sku):
        args = {"quantity": rng.randint(1, 100)}
        lop = self.new_lop("restock", sku, thr, args, True)
        return self.execute(rng, lop, "POST", "/api/v1/skus/%s/restock" % sku, args, admin=True)

    def op_order(self, rng, thr, sku):
        """An order. A keyed one comes from the pool of users (their limits bite; its record is
        traced to it through the segment's Idempotency-Key hash), a keyless one from a user of
        its own, L<seed>-<lop> (the tag that traces a record whose 201 was lost to its request)."""
        large = self.a.large_orders > 0 and rng.random() < self.a.large_orders
        args = {"sku": sku, "quantity": rng.randint(MAX_QTY + 1, LARGE_QTY_MAX) if large else rng.randint(1, MAX_QTY)}
        keyed = rng.random() < 0.5
        if keyed:
            args["user_id"] = rng.choice(self.users)
        lop = self.new_lop("order", sku, thr, args, keyed)
        self.execute(rng, lop, "POST", "/api/v1/orders", args)
        b = lop.ack["body"] if lop.ack and isinstance(lop.ack["body"], dict) else {}
        if isinstance(b.get("order_id"), str):
            exp = parse_iso(b.get("expires_at")) if b.get("status") == "reserved" else None
            with self.lock:
                self.known_orders.append((b["order_id"], lop))
                if exp is not None:
                    self.holds.append((b["order_id"], exp, lop))
        return lop

    def op_confirm(self, rng, thr):
        """POST /api/v1/orders/{id}/confirm of a hold answered 201 — before its expiry (at once
        or a little later), racing it (sent within 30 ms of expires_at) or after it (0.1–1.5 s
        late) —, or now and then of an order that never was a hold. The payer waits for its
        moment (≤ 2.5 s; a checkpoint or the end cancels the confirm). None: nothing sent."""
        mode = rng.choices(("before", "race", "after", "nothold"), (35, 30, 30, 5))[0]
        wall = time.time()
        with self.lock:
            if mode == "nothold":
                cands = [(oid, None, l) for oid, l in self.known_orders[-300:]
                         if isinstance(l.ack["body"], dict) and l.ack["body"].get("status") == "created"]
            elif mode == "before":
                cands = [h for h in self.holds[-300:] if h[1] - wall > 0.3]
            elif mode == "race":
                cands = [h for h in self.holds[-300:] if 0.02 < h[1] - wall < 2.5]
            else:
                cands = [h for h in self.holds[-300:] if -1.4 < h[1] - wall < 1.0]
        if not cands:
            return None
        oid, exp, olop = cands[rng.randrange(len(cands))]
        if mode == "before":
            at = wall + rng.uniform(0, max(0.0, min(0.8, exp - wall - 0.25)))
        elif mode == "race":
            at = exp + rng.uniform(-0.03, 0.03)
        elif mode == "after":
            at = max(wall, exp + rng.uniform(0.1, 1.5))
        else:
            at = wall
        if at > wall and not self.nap(at - wall):
            return None
        lop = self.new_lop("confirm", olop.sku, thr, {"order_id": oid, "mode": mode, "expires_at": exp}, False)
        return self.execute(rng, lop, "POST", "/api/v1/orders/%s/confirm" % oid, admin=True)

    def op_extend(self, rng, thr):
        """POST /api/v1/orders/{id}/extend of a hold answered 201 (issue 33) — before its expiry
        (as known: the latest 200 extension's, else the 201's), racing it (within 30 ms) or after
        it —, with 1..EXT_S seconds, none (EXT_S), or now and then a bad number (400). The payer
        waits for its moment as for a confirm. None: nothing sent."""
        mode = rng.choices(("before", "race", "after"), (45, 40, 15))[0]
        wall = time.time()
        with self.lock:
            hs = [(oid, self.extended_to.get(oid, exp), l) for oid, exp, l in self.holds[-300:]]
        if mode == "before":
            cands = [h for h in hs if h[1] - wall > 0.3]
        elif mode == "race":
            cands = [h for h in hs if 0.02 < h[1] - wall < 2.5]
        else:
            cands = [h for h in hs if -1.4 < h[1] - wall < 1.0]
        if not cands:
            return None
        oid, exp, olop = cands[rng.randrange(len(cands))]
        if mode == "before":
            at = wall + rng.uniform(0, max(0.0, min(0.8, exp - wall - 0.25)))
        elif mode == "race":
            at = exp + rng.uniform(-0.03, 0.03)
        else:
            at = max(wall, exp + rng.uniform(0.1, 1.5))
        if at > wall and not self.nap(at - wall):
            return None
        secs = rng.choices((None, 1, EXT_S, 0, EXT_S + 1), (30, 30, 30, 5, 5))[0]
        body = {"seconds": secs} if secs is not None else None
        lop = self.new_lop("extend", olop.sku, thr, {"order_id": oid, "mode": mode, "seconds": secs}, False)
        self.execute(rng, lop, "POST", "/api/v1/orders/%s/extend" % oid, body, admin=True)
        b = lop.ack["body"] if lop.ack and isinstance(lop.ack["body"], dict) else {}
        e = parse_iso(b.get("expires_at"))
        if e is not None:
            with self.lock:
                self.extended_to[oid] = max(e, self.extended_to.get(oid, 0))
        return lop

    def op_patch(self, rng, thr, sku):
        """PATCH /api/v1/skus/{sku} of the SKU's rules, all three stated every time: a limit
        raised by one now and then (up to LIMIT_MAX, never lowered) or added to a SKU without
        one; a hold TTL of 1 or 2 s, or 0 now and then; the sale window open (sale_end null)
        or, now and then, closed for a moment and opened again by this client (module
        comment)."""
        if not self.a.rules:
            return None
        close = rng.random() * 100 < WINDOW_CLOSE_PCT
        with self.lock:
            r = self.rules[sku]
            added = False
            if not r["limit"] and rng.random() * 100 < LIMIT_ADD_PCT:
                r["limit"], added = rng.randint(2, 3), True
            elif r["limit"] and r["limit"] < LIMIT_MAX and rng.random() < 0.3:
                r["limit"] += 1
            if r["holds"]:
                r["ttl"] = 0 if rng.random() * 100 < TTL_ZERO_PCT else rng.choice(TTLS)
            if close:
                r["closed"] = True
            end = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1)) if close else None
            args = {"limit_per_user": r["limit"], "reservation_ttl_s": r["ttl"], "sale_end": end}
        lop = self.new_lop("patch", sku, thr, args, False)
        if added:
            with self.lock:
                self.limit_adds[sku].append(lop)
        self.execute(rng, lop, "PATCH", "/api/v1/skus/" + sku, args, admin=True)
        if close:
            time.sleep(rng.uniform(0.2, 0.8))
            self.reopen(rng, thr, sku)
        return lop

    def reopen(self, rng, thr, sku):
        """The sale window of sku opened again (PATCH with sale_end null and the SKU's other
        rules), tried until answered 200 (≤ 10 times, also while a checkpoint waits: a window
        left closed would fail the checkpoint's probes). Returns True when answered."""
        for _ in range(10):
            with self.lock:
                r = self.rules[sku]
                args = {"limit_per_user": r["limit"], "reservation_ttl_s": r["ttl"], "sale_end": None}
            lop = self.new_lop("patch", sku, thr, args, False)
            self.execute(rng, lop, "PATCH", "/api/v1/skus/" + sku, args, admin=True)
            if lop.final == "acked" or any(a["status"] == 404 for a in lop.attempts):
                with self.lock:
                    r["closed"] = False
                return True
            time.sleep(0.2)
        return False

    def op_cancel(self, rng, thr):
        with self.lock:
            if not self.known_orders:
                return None
            oid, olop = self.known_orders[rng.randrange(len(self.known_orders))]
        lop = self.new_lop("cancel", olop.sku, thr, {"order_id": oid}, False)
        return self.execute(rng, lop, "DELETE", "/api/v1/orders/" + oid, admin=True)

    def op_delete(self, rng, thr, sku):
        lop = self.new_lop("delete", sku, thr, {}, False)
        return self.execute(rng, lop, "DELETE", "/api/v1/skus/" + sku, admin=True)

    def op_delete_put(self, rng, thr, sku):
        """DELETE of the SKU, then at once a PUT of it (another segment count)."""
        self.op_delete(rng, thr, sku)
        return self.op_put(rng, thr, sku)

    def op_status(self, rng, thr, sku, exact=None):
        """A status read: the exact one (?consistent=1, admin) or, half the time, the plain GET,
        answered from the instance's snapshot (SPEC §15: up to --status-refresh-ms old, one
        layout's, at one moment); status-answers judges both, a snapshot's version against the
        PUTs acknowledged SNAPSHOT_STALE_S before it began."""
        if exact is None:
            exact = rng.random() < 0.5
        lop = self.new_lop("status", sku, thr, {"snapshot": not exact}, False)
        if exact:
            return self.execute(rng, lop, "GET", "/api/v1/skus/" + sku + "?consistent=1", admin=True)
        return self.execute(rng, lop, "GET", "/api/v1/skus/" + sku)

    def storm(self, t):
        """The SKU under a PUT storm at traffic time t, or None: in 60 % of the 7 s epochs, for
        0.25 s at a random moment of it, every client PUTs one SKU with probability 1/2
        (concurrent PUTs on one SKU, with orders, restocks and faults around them)."""
        if not self.a.storms:
            return None
        e = int(t // 7)
        r = random.Random("%d/storm/%d" % (self.a.seed, e))
        hit, sku, at = r.random() < 0.6, r.choice(self.skus), r.uniform(0, 6.5)
        return sku if hit and at <= t - 7 * e < at + 0.25 else None

    def hold_idle(self):
        """A thread asked to hold still for a checkpoint: counted idle until resumed."""
        with self.idle_cv:
            self.idle += 1
            self.idle_cv.notify_all()
            while self.pause.is_set() and not self.stop.is_set():
                self.idle_cv.wait(0.2)
            self.idle -= 1

    def client(self, thr):
        rng = random.Random("%d/client/%d" % (self.a.seed, thr))
        put_next = None
        while not self.stop.is_set():
            if self.pause.is_set():
                self.hold_idle()
                continue
            sku = rng.choice(self.skus)
            x = rng.random() * 100
            storm_sku = self.storm(self.traffic_now())
            # While chaos.sh has the order-log sink down (ctl/sink_down), PUTs (about half of
            # them shrink the layout) and DELETEs are 50 times as frequent: segments whose logs
            # the sink has not read are dropped (issue 29 item 3; the check "database").
            down = self.a.sink_bin and os.path.exists(os.path.join(self.a.ctl, "sink_down"))
            if put_next:
                self.op_put(rng, thr, put_next)
                put_next = None
            elif storm_sku and x < 50:
                self.op_put(rng, thr, storm_sku)
            elif x < (1.5 if down else 0.03):
                self.op_put(rng, thr, sku)
            elif x < (2.0 if down else 0.04):
                self.op_delete(rng, thr, sku)
            elif x < (2.5 if down else 0.05):
                self.op_delete_put(rng, thr, sku)
            elif x < 1.5:
                self.op_restock(rng, thr, sku)
            elif x < 1.8:
                self.op_patch(rng, thr, sku)
            elif x < 13.0:
                self.op_cancel(rng, thr)
            elif x < 25.0:
                self.op_status(rng, thr, sku)
            else:
                lop = self.op_order(rng, thr, sku)
                if lop.ack is None and any(a["status"] == 404 for a in lop.attempts) and rng.random() < 0.3:
                    put_next = sku   # the SKU is gone: someone (re)creates it
            if self.a.think_ms:
                time.sleep(rng.uniform(0, self.a.think_ms / 1000.0))

    def payer(self, i):
        """A payment service's thread (--payers of them, beside the clients, so that their
        waits for a hold's moment do not slow the clients down): confirms holds, one at a time,
        at the moment it chose (op_confirm); looks again after 50 ms when no hold fits."""
        rng = random.Random("%d/payer/%d" % (self.a.seed, i))
        thr = 1000 + i
        while not self.stop.is_set():
            if self.pause.is_set():
                self.hold_idle()
                continue
            ext = self.a.extends > 0 and rng.random() < self.a.extends
            if (self.op_extend(rng, thr) if ext else self.op_confirm(rng, thr)) is None:
                time.sleep(0.05)
            elif self.a.think_ms:
                time.sleep(rng.uniform(0, self.a.think_ms / 1000.0))

    # -- the damager: the nemesis's counter damage (docs/reliability.md) --
    def nemesis_event(self, ev, target, detail):
        """One line of nemesis.jsonl, like chaos.sh's (short lines appended: no interleaving)."""
        line = json.dumps({"t_ms": int(time.time() * 1000), "ev": ev, "target": target, "detail": detail}) + "\n"
        with open(os.path.join(self.a.out, "nemesis.jsonl"), "a") as f:
            f.write(line)

    def nap(self, secs):
        """Sleeps secs of traffic; False as soon as a checkpoint or the end is asked for."""
        end = now() + secs
        while now() < end:
            if self.pause.is_set() or self.stop.is_set():
                return False
            time.sleep(min(0.05, max(0.0, end - now())))
        return True

    def damager(self):
        """Every gap (--damage-gap-ms), damages one counter of one settled segment, holds it
        --damage-hold-ms, and repairs it — at once when a checkpoint or the end is asked for,
        so that no checkpoint ever sees a damaged counter."""
        rng = random.Random("%d/damage" % self.a.seed)
        gmin, gmax = self.a.damage_gap
        while not self.stop.is_set():
            if self.pause.is_set():
                self.hold_idle()
                continue
            if self.nap(rng.uniform(gmin, gmax) / 1000.0):
                try:
                    self.damage_once(rng)
                except Infra as e:
                    # A counter left damaged: the next checkpoint stops the run (Infra).
                    log("damager: %s" % e)
                    self.damager_failed = str(e)
                    return

    def damage_once(self, rng):
        sku = rng.choice(self.skus)
        target = rng.choice(DAMAGE_TARGETS)
        form = rng.choice(DAMAGE_FORMS)
        hold = rng.uniform(*self.a.damage_hold) / 1000.0
        try:
            rds = self.redis(2.0)
            try:
                meta = pairs(rds.cmd("HGETALL", KEYS.sku(sku, "meta")))
                n, v = as_int(meta.get("segments")), as_int(meta.get("version"))
                if not n or v is None or meta.get("state") != "r":
                    return      # no settled layout to damage: no fault this time
                k = rng.randrange(n)
                keys = [KEYS.seg(sku, k, x) for x in DAMAGE_KEYS]
                rep = rds.pipeline([("GET", keys[1])] + [("GET", KEYS.seg(sku, j, "stock")) for j in range(n)])
                if as_int(rep[0]) != v:
                    return      # the segment is not at the layout's version: not settled
                stocks = [as_int(x) for x in rep[1:]]
                other = sum(x or 0 for j, x in enumerate(stocks) if j != k)
                kidx, field = target
                cur = rds.cmd("HGET", keys[kidx], field) if field else rds.cmd("GET", keys[kidx])
                if isinstance(cur, RedisError) or as_int(cur) is None:
                    return
                bad = form.replace("{v}", cur)
                d = {"sku": sku, "k": k, "n": n, "version": v, "key": keys[kidx], "field": field, "orig": cur, "bad": bad,
                     "other_stock": other, "t0": now(), "t1": None, "before": None, "after": None, "result": "unknown"}
                self.damages.append(d)
                r = rds.cmd("EVAL", DAMAGE_LUA, len(keys), *keys, kidx + 1, field or "", "damage", cur, bad)
            finally:
                rds.close()
        except (OSError, ConnectionError) as e:
            if self.damages and self.damages[-1]["t1"] is None and self.damages[-1]["sku"] == sku:
                self.repair(self.damages[-1], "the damage's answer was lost (%s)" % e)
            return
        if isinstance(r, RedisError) or not isinstance(r, list):
            d["result"], d["t1"] = "refused: %s" % r, now()   # NOREPLICAS, say: nothing written
            return
        d["before"] = json.loads(r[1])
        d["result"] = "damaged" if r[0] == 1 else ("already" if r[0] == 2 else "changed meanwhile")
        if r[0] != 1:
            d["t1"] = now()
            if r[0] == 2:
                self.repair(d, "found already damaged (a resent EVAL)")
            return
        self.nemesis_event("damage", "%s segment %d" % (sku, k), "%s%s %r -> %r for %.0f ms" % (
            keys[kidx].rsplit(":", 1)[1], " " + field if field else "", cur, bad, hold * 1000))
        self.nap(hold)
        self.repair(d, "")

    def repair(self, d, why):
        """Writes the damaged counter's value back (only if it still holds the damage), reading
        the segment in the same script. Retries ≤ 60 s (Redis restarting, a failover)."""
        keys = [KEYS.seg(d["sku"], d["k"], x) for x in DAMAGE_KEYS]
        kidx = DAMAGE_KEYS.index(d["key"].rsplit(":", 1)[1])
        end, last = now() + 60, None
        while now() < end:
            try:
                rds = self.redis(2.0)
                try:
                    r = rds.cmd("EVAL", DAMAGE_LUA, len(keys), *keys, kidx + 1, d["field"] or "", "repair", d["orig"], d["bad"])
                finally:
                    rds.close()
                if isinstance(r, list):
                    d["t1"], d["after"] = now(), json.loads(r[1])
                    d["repaired"], d["found"] = r[0] == 1, r[2] if len(r) > 2 else None
                    self.nemesis_event("repair", "%s segment %d" % (d["sku"], d["k"]), "%s: %s%s" % (
                        "written back" if r[0] == 1 else "NOT written back: it held %r" % d["found"], d["orig"], "; " + why if why else ""))
                    return
                last = r
            except (OSError, ConnectionError) as e:
                last = e
            time.sleep(0.2)
        raise Infra("cannot repair the damaged counter %s %s: %s" % (d["key"], d["field"] or "", last))

    # -- Redis commands per request, from INFO commandstats (one redis-server only) --
    def cmdstats(self):
        """(run_id, {command: calls}) of the one redis-server, or None (a cluster, unreadable)."""
        if self.a.redis_cluster:
            return None
        try:
            rds = Redis(self.a.redis_port, timeout=2.0)
            try:
                srv, cs = rds.pipeline([("INFO", "server"), ("INFO", "commandstats")])
            finally:
                rds.close()
        except (OSError, ConnectionError):
            return None
        if isinstance(srv, RedisError) or isinstance(cs, RedisError):
            return None
        rid = re.search(r"^run_id:(\w+)", srv, re.M)
        calls = {m.group(1): int(m.group(2)) for m in re.finditer(r"^cmdstat_([\w|]+):calls=(\d+)", cs, re.M)}
        return (rid.group(1) if rid else "?", calls)

    def stretch_begin(self):
        self.stretch = (now(), self.cmdstats())

    def stretch_end(self):
        """Commands Redis ran during this stretch of traffic (clients idle at both ends), and
        the requests sent meanwhile: chaos.py's own reads happen outside the stretches."""
        t0, st0 = self.stretch
        st1 = self.cmdstats()
        t1 = now()
        with self.lock:
            sent = Counter(l.op for l in self.lops for a in l.attempts if a["sent"] and t0 <= a["t0"] < t1)
        if st0 is None or st1 is None:
            self.stretches.append({"t0": t0, "t1": t1, "sent": sent, "calls": None, "restarted": False})
            return
        restarted = st0[0] != st1[0]
        calls = Counter({c: n - (0 if restarted else st0[1].get(c, 0)) for c, n in st1[1].items() if c != "info"})
        self.stretches.append({"t0": t0, "t1": t1, "sent": sent, "calls": calls, "restarted": restarted})

    def traffic_now(self):
        with self.lock:
            base, since = self.traffic_s, self.traffic_since
        return base + (now() - since if since is not None else 0)

    # -- control of the nemesis (chaos.sh) --
    def ctl(self, name):
        open(os.path.join(self.a.ctl, name), "w").close()

    def wait_ctl(self, name, bound):
        end = now() + bound
        while now() < end:
            if os.path.exists(os.path.join(self.a.ctl, name)):
                return True
            time.sleep(0.05)
        return False

    # -- quiescence --
    def instance_state(self, i):
        """(ready, requests in flight) of instance i (in flight includes our /metrics request)."""
        ready = http_call(self.ports[i], "GET", "/readyz", timeout=2.0)["status"] == 200
        m = re.search(r"^inventory_requests_in_flight (\d+)", self.metrics_text(i) or "", re.M)
        return ready, int(m.group(1)) if m else None

    def metrics_text(self, i):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.ports[i], timeout=2.0)
            conn.request("GET", "/metrics", headers={"Connection": "close"})
            t = conn.getresponse().read().decode("utf-8", "replace")
            conn.close()
            return t
        except (OSError, http.client.HTTPException):
            return None

    def locks_held(self, rds):
        held = []
        for s in self.skus:
            for k in rds.scan(KEYS.seg_glob(s, "lock")):
                held.append((k, rds.cmd("PTTL", k)))
        return held

    def quiet(self, bound):
        """Waits (≤ bound s) until Redis answers, every instance is ready with nothing in flight
        but our own request, and no segment lock exists. Returns (ok, description)."""
        end, last = now() + bound, "not checked"
        while now() < end:
            try:
                rds = self.redis(2.0)
                try:
                    if rds.cmd("PING") != "PONG":
                        last = "Redis does not answer PONG"
                        time.sleep(0.2)
                        continue
                    states = [self.instance_state(i) for i in range(len(self.ports))]
                    bad = [(i, st) for i, st in enumerate(states) if not st[0] or st[1] is None or st[1] > 1]
                    held = self.locks_held(rds)
                finally:
                    rds.close()
            except (OSError, ConnectionError, Infra) as e:
                last = "Redis unreadable: %s" % e
                time.sleep(0.2)
                continue
            if not bad and not held:
                return True, "quiet"
            last = "; ".join(["instance %d ready=%s in_flight=%s" % (i, st[0], st[1]) for i, st in bad] +
                             ["lock %s held (PTTL %s ms)" % (k, t) for k, t in held[:5]])
            time.sleep(0.2)
        return False, last

    def due_and_give(self):
        """(the latest due time in any segment's due set, in s since the epoch or 0; the
        give-backs queued in all the give sets)."""
        last, queued = 0.0, 0
        try:
            rds = self.redis(5.0)
            try:
                for s in self.skus:
                    n = as_int(rds.cmd("HGET", KEYS.sku(s, "meta"), "segments")) or 0
                    if n <= 0 or KEYS.v != 2:
                        continue
                    rep = rds.pipeline([("ZRANGE", KEYS.seg(s, k, "due"), -1, -1, "WITHSCORES") for k in range(n)] +
                                       [("ZCARD", KEYS.seg(s, k, "give")) for k in range(n)])
                    for r in rep[:n]:
                        if isinstance(r, list) and len(r) == 2:
                            last = max(last, float(r[1]) / 1000.0)
                    queued += sum(x for x in rep[n:] if isinstance(x, int))
            finally:
                rds.close()
        except (OSError, ConnectionError) as e:
            raise Infra("cannot read the due and give sets: %s" % e)
        return last, queued

    def wait_out_holds(self):
        """At the end, clients stopped: waits (≤ 10 s) until every hold in the due sets is
        EXPIRY_BOUND_S past its expiry, so that the final check finds every hold ended with no
        traffic at all (the sweepers alone); then (≤ 5 s more) until the give sets are drained,
        so that an ended order's entry must be gone from its user's. Returns the seconds waited."""
        t0 = now()
        last, _ = self.due_and_give()
        wait = min(10.0, last + EXPIRY_BOUND_S + 0.05 - time.time())
        if wait > 0:
            time.sleep(wait)
        end = now() + 5.0
        while self.due_and_give()[1] and now() < end:
            time.sleep(0.1)
        # the follows of multi-segment orders and their intents (a cut-off one is healed D + 1 s
        # after its deadline, by a sweeper)
        end = now() + 10.0
        while self.multi_pending() and now() < end:
            time.sleep(0.1)
        return now() - t0

    def multi_pending(self):
        """Follows queued and intents left of multi-segment orders, over every SKU."""
        n = 0
        if KEYS.v != 2:
            return 0
        try:
            rds = self.redis(5.0)
            try:
                for s in self.skus:
                    segs = as_int(rds.cmd("HGET", KEYS.sku(s, "meta"), "segments")) or 0
                    rep = rds.pipeline([("HLEN", KEYS.sku(s, "multi"))] + [("ZCARD", KEYS.seg(s, k, "follow")) for k in range(max(segs, 0))])
                    n += sum(x for x in rep if isinstance(x, int))
            finally:
                rds.close()
        except (OSError, ConnectionError) as e:
            raise Infra("cannot read the follow queues and intents: %s" % e)
        return n

    def probe_large(self, name):
        """At a quiet checkpoint, for each SKU without a per-user limit whose remaining total is
        more than its largest segment holds: one keyless order of (largest segment + 1) units.
        Nothing else runs, so its answer must be 201 (SPEC §13: 409 insufficient_stock only when
        the remaining total is below the quantity); history_checks judges it with every other
        409. Returns the number sent."""
        if self.a.large_orders <= 0 or KEYS.v != 2:
            return 0
        rng = random.Random("%d/probe/%s" % (self.a.seed, name))
        sent = 0
        try:
            rds = self.redis(5.0)
            try:
                plan = []
                for s in self.skus:
                    if self.rules[s]["limit"] or self.rules[s]["closed"]:
                        continue
                    n = as_int(rds.cmd("HGET", KEYS.sku(s, "meta"), "segments")) or 0
                    if n < 2:
                        continue
                    stocks = [as_int(x) or 0 for x in rds.pipeline([("GET", KEYS.seg(s, k, "stock")) for k in range(n)])]
                    if max(stocks) < min(sum(stocks), LARGE_QTY_MAX):
                        plan.append((s, max(stocks) + 1))
            finally:
                rds.close()
        except (OSError, ConnectionError) as e:
            raise Infra("cannot read the stock for the probes: %s" % e)
        for s, q in plan:
            lop = self.new_lop("order", s, -1, {"sku": s, "quantity": q}, False)
            self.execute(rng, lop, "POST", "/api/v1/orders", lop.args)
            sent += 1
        return sent

    def checkpoint(self, name, final):
        t_begin = now()
        log("checkpoint %s: pausing the nemesis" % name)
        self.ctl("pause." + name)
        if not self.wait_ctl("paused." + name, 120):
            raise Infra("the nemesis did not pause within 120 s")
        t_nem = now()
        with self.lock:
            self.traffic_s += now() - self.traffic_since
            self.traffic_since = None
        self.pause.set()
        if final:
            self.stop.set()
        with self.idle_cv:
            end = now() + 90
            while now() < end:
                alive = sum(1 for t in self.threads if t.is_alive())
                if (final and alive == 0) or (not final and self.idle >= alive):
                    break
                self.idle_cv.wait(0.2)
        t_idle = now()
        busy = [t.name for t in self.threads if t.is_alive()] if final else []
        if final and busy:
            raise Infra("client threads still busy after 90 s: %s" % busy)
        self.stretch_end()
        if self.damager_failed:
            raise Infra("the damager could not repair a counter: %s" % self.damager_failed)
        ok, why = self.quiet(30)
        # Meet every SKU once (a PUT left half-done may be completed by whoever meets it).
        rng = random.Random("%d/checkpoint/%s" % (self.a.seed, name))
        for s in self.skus:
            self.op_status(rng, -1, s, exact=True)
        if ok:
            ok, why = self.quiet(10)
        waited = self.wait_out_holds() if final else 0.0
        self.checks.examined["quiescence"] += 1
        if not ok:
            self.checks.fail("quiescence", name, "checkpoint %s: not quiescent after 40 s: %s" % (name, why), [])
        log("checkpoint %s: %s after %.1f s (nemesis paused after %.1f s, clients idle after %.1f s more%s); reading Redis" % (
            name, "quiet" if ok else "NOT quiet (" + why + ")", now() - t_begin, t_nem - t_begin, t_idle - t_nem,
            ", the last holds waited out %.1f s" % waited if waited else ""))
        self.checks.redis_checks(name)
        self.checks.redis_call_bound(name)
        if self.room:
            self.room.checkpoint(name, final)
        if self.shop:
            self.shop.checkpoint(name, final)
        probes = 0 if final else self.probe_large(name)
        if probes:
            log("checkpoint %s: %d order(s) larger than any one segment's stock sent (quiet)" % (name, probes))
        cp = {"kind": "checkpoint", "name": name, "quiet": ok, "why": why, "t": round(now(), 3), "holds_waited_s": round(waited, 2),
              "wait_s": round(now() - t_begin, 2), "violations_so_far": self.checks.count()}
        self.hist.write(dict(cp))
        self.checkpoints.append(cp)
        log("checkpoint %s done in %.1f s: %d violation(s) so far" % (name, now() - t_begin, self.checks.count()))
        if not final:
            with self.lock:
                self.traffic_since = now()
            self.stretch_begin()
            self.pause.clear()
            with self.idle_cv:
                self.idle_cv.notify_all()
            self.ctl("resume." + name)

    def main(self):
        a = self.a
        log("seed %d: %d clients, SKUs %s, %d s of traffic, checkpoint every %d s, instances on %s, Redis on %s"
            % (a.seed, a.clients, ",".join(self.skus), a.duration, a.checkpoint_every, a.ports, a.redis_cluster or a.redis_port))
        # The SKU names, for the nemesis's failover of a SKU's master (chaos.sh --cluster).
        with open(os.path.join(a.ctl, "skus"), "w") as f:
            f.write("".join(s + "\n" for s in self.skus + (self.room.skus if self.room else []) + (self.shop.skus if self.shop else [])))
        rng = random.Random("%d/setup" % a.seed)
        for s in self.skus:
            self.op_put(rng, -1, s)
        if self.room:
            self.room.put(rng)
        if self.shop:
            self.shop.put(rng)
        self.traffic_since = now()
        self.threads = [threading.Thread(target=self.client, args=(i,), name="client%d" % i, daemon=True)
                        for i in range(a.clients)]
        if a.rules:
            self.threads += [threading.Thread(target=self.payer, args=(i,), name="payer%d" % i, daemon=True)
                             for i in range(a.payers)]
        if self.room:
            self.threads += [threading.Thread(target=self.room.client, args=(i,), name="qclient%d" % i, daemon=True)
                             for i in range(a.queue_clients)]
        if self.shop:
            self.threads += [threading.Thread(target=self.shop.client, args=(i,), name="cclient%d" % i, daemon=True)
                             for i in range(a.cart_clients)]
        if a.damage_gap[1] > 0:
            self.threads.append(threading.Thread(target=self.damager, name="damager", daemon=True))
        for t in self.threads:
            t.start()
        self.stretch_begin()
        n = 0
        while True:
            n += 1
            target = min(a.duration, n * a.checkpoint_every)
            while self.traffic_now() < target:
                if a.calm and self.traffic_now() >= target - a.calm and not os.path.exists(os.path.join(a.ctl, "calm")):
                    self.ctl("calm")
                time.sleep(0.1)
            final = target >= a.duration
            self.checkpoint("final" if final else str(n), final)
            if os.path.exists(os.path.join(a.ctl, "calm")):
                os.remove(os.path.join(a.ctl, "calm"))
            if final:
                break
        if not self.shop:
            for name, _ in chaos_cart.CCHECKS:
                self.checks.unavailable[name] = "no carts: --cart 0 (CH_CART=0, or an old key schema or no rules)"
        if not self.room:
            for name, _ in chaos_queue.QCHECKS:
                self.checks.unavailable[name] = "no waiting room: --queue 0 (CH_QUEUE=0, or an old key schema or no rules)"
        if not a.sink_bin:
            self.checks.unavailable["database"] = "no sink: CH_SINK=0, or an old key schema or no rules"
        else:
            # Still held still by the nemesis (it waits for done): the sink is running.
            self.checks.database()
        self.ctl("done")
        self.checks.history_checks()
        self.hist.close()
        return self.checks.report()


# --- the checker --------------------------------------------------------------------------------

ORDER_ID = re.compile(r"^[0-9a-f]+-(\d+)-(.+)$")
# The database check: how long the sink may take to catch up once the clients stopped, and how
# long after its client gave up a PUT or DELETE of unknown outcome may still reset the orders.
SINK_CATCHUP_S = 60
RESET_SLACK_S = 10
# Reads a segment's log stream in one step on its own slot: {exists, XLEN, the group sink's
# pending count, its last-delivered-id, the stream's last-generated-id, has the group}.
STREAM_LUA = r"""
local k = KEYS[1]
if redis.call('EXISTS', k) == 0 then return {0} end
local n = redis.call('XLEN', k)
local info = redis.call('XINFO', 'STREAM', k)
local last = ''
for i = 1, #info, 2 do if info[i] == 'last-generated-id' then last = info[i + 1] end end
for _, g in ipairs(redis.call('XINFO', 'GROUPS', k)) do
  local h = {}
  for i = 1, #g, 2 do h[g[i]] = g[i + 1] end
  if h['name'] == 'sink' then return {1, n, h['pending'], h['last-delivered-id'], last, 1} end
end
return {1, n, 0, '', last, 0}
"""

CHECKS = [
    ("processes", "no inventoryd or redis-server exits unless the nemesis killed it (chaos.sh restarts it and records its exit status)"),
    ("quiescence", "quiescent points are reached: nemesis paused, clients idle, instances ready with nothing in flight, no segment lock held (bounded wait)"),
    ("segments", "SPEC §8 per SKU from Redis (loadtest/verify.sh: inventory-check, tools/check/, but its per-user checks): stock ≥ 0, sver = meta version, t = stock + s, s/o/r = the live order records, the due set = the holds, each record well-formed, no stray key; the status endpoint agrees with Redis"),
    ("layout", "each SKU is exactly one PUT's layout: meta version/segments (and stock) match a PUT that was sent, Σ t = its stock + the restocks acknowledged since it (+ at most the unknown ones), no keys of segments ≥ n"),
    ("sku-existence", "a SKU whose last acknowledged PUT follows every DELETE exists; a SKU deleted (204) after every PUT has no keys left"),
    ("acked-orders", "every order acknowledged (201, or 200 replay) after its SKU's current PUT was acknowledged exists in Redis with its quantity, SKU and user"),
    ("order-records", "every order record belongs to a request that may have placed it (the order id of an answer, the segment's Idempotency-Key entry, or a keyless order's own user; SKU, user, quantity, segment; a known status, expires_at exactly on reserved ones), none where every attempt was refused"),
    ("idempotency", "at most one order record per logical order (per Idempotency-Key; a keyless order is sent once)"),
    ("units", "per SKU since its current PUT: units in 201/200 answers ≤ units placed ≤ those + units of unknown-outcome orders (keyless and keyed separately)"),
    ("cancels", "a cancelled record has a cancel request; an acknowledged cancel's order is cancelled in Redis; a 404 cancel's order does not reappear"),
    ("status-answers", "every status answer (GET — the exact read ?consistent=1 and, half the time, the plain GET from the instance's snapshot, SPEC §15 —, restock) satisfies SPEC §8 on its own: sold = stock_total − remaining = Σ segments, reserved ≤ sold, no negative number, orders ≤ sold ≤ the largest quantity sent × orders (+ the units of orders of 2+ units near the answer, up to 10 s after they ended: a multi-segment order's parts are sold before its order record exists), segments 0..n-1 of a PUT that was sent, version not older than an acknowledged PUT (for a snapshot's answer: acknowledged 1.5 s before its request began)"),
    ("put-answers", "PUT answers echo the request, versions are unique per SKU and grow in real-time order"),
    ("order-answers", "201/200 order bodies echo the request (SKU, quantity, user_id, segment in the id); cancel answers are the cancelled order"),
    ("damaged-segments", "while one of its counters is damaged (10.0, ' 5', 1e3, abc …), nothing but the repair writes that counter, and whatever else is written on the segment keeps SPEC §8 (t = stock + s, s = the live records' units, o = the live orders (not parts), checked with the counter put back): a script that does not read the damaged counter may run, one that reads it writes nothing (unless a PUT/DELETE of the SKU overlapped, or, on a cluster, a master failover)"),
    ("damage-failover", "no 5xx storm on a damaged SKU: when the other segments hold ≥ 20 units and ≥ 10 orders of the SKU were answered during the damage before 201s took all but 10 of those units, < 50 % of them are 5xx, or at most 30 points more than the other SKUs' orders meanwhile or the SKU's own in the 5 s before (not checked while a master failover overlaps, on a cluster, nor while a PUT/DELETE of the SKU that may have been recorded overlaps: its roll-out waits for the repair)"),
    ("holds", "SPEC §11 holds: none still reserved more than %.1f s (1 s + --redis-timeout-ms) after its expires_at (the bound runs from the end of a Redis outage or a damage of its segment that overlaps it); at the end the checker first waits out every hold in the due sets, clients stopped, so every 201 \"reserved\" order in the layout must be confirmed, cancelled or expired with no traffic; each segment's due set is exactly its reserved records, scored at their expires_at; an expired record was a hold whose expires_at has come" % EXPIRY_BOUND_S),
    ("confirms", "a confirm answered 200 is confirmed in Redis unless a cancel that may have run ended after it began; 409 reservation_expired (a confirm's or a cancel's) is expired, already_cancelled cancelled, not_reserved created or cancelled; no 404 for an order of the layout; a confirmed record had a confirm that may have run"),
    ("confirm-answers", "a confirm answered 200 is the order, confirmed, and its first attempt was sent before expires_at; a 409 reservation_expired (confirm or cancel) came after expires_at; an order answered \"created\" is never confirmed; a 201 \"reserved\" order body has an expires_at 1–2 s after the request (TTL 1 or 2; whether an order is a hold at all: rules-in-force)"),
    ("rules-in-force", "SPEC §11 (issue 29): a PUT or PATCH answered 2xx holds for every order begun after the answer, on every instance: such an order (when no other rule change that may have run overlaps; one of unknown outcome is given %d s more) is \"reserved\" exactly when the TTL is > 0, is answered 201 only while the sale window is open and 409 sale_ended only while it is closed (chaos's PATCHes add limits, set TTLs to 0 and close the window for a moment)" % STALE_RULE_S),
    ("limits", "no user holds more than limit_per_user units in live orders (the highest limit a PUT or PATCH that may have run sent: limits are only raised, a stale PATCH may lower one; on a SKU whose limit a PATCH added, the units of the orders begun after the answer of a PUT or PATCH stating a limit whose attempt began after every PUT or PATCH stating none may have been applied (answered: by its answer; else %d s after it was given up): one taken before the add may be applied after it and take the limit away), and the user's entries in inv:2:{S}:users name every live order of that user; at the end, the give sets drained, no ended (cancelled, expired) order is left in its user's entries" % STALE_RULE_S),
    ("extends", "issue 33, at each checkpoint: a hold's record agrees with its extensions' answers — a 200 is the order, reserved, with an expires_at later than its 201's and extensions ≥ 1, and the record has at least those extensions and (while it has an expiry) at least that expires_at; the record's extensions are at most the extensions that may have run and its expires_at at most the 201's + EXT_S each; 409 reservation_expired is expired, already_cancelled cancelled, not_reserved created/confirmed/cancelled, extend_limit at hold_extend_max; a bad seconds is 400; no 404 for an order of the layout; extend_not_allowed never (every PUT sets hold_extend_s)"),
    ("availability", "outside every fault (from the fault to 2 s after everything is back; a damage of the SKU's segment until 1 s after its repair), fewer than %d %% of a SKU's orders, confirms or cancels are answered 5xx (checked with ≥ %d such answers): a path that fails every time (a WAIT with no connection to go on, say) is a defect even when it changes nothing" % (AVAIL_MAX_5XX_PCT, AVAIL_MIN_ANSWERS)),
    ("multi-parts", "SPEC §8/§13 from Redis (inventory-check's \"multi\" findings): every part of a multi-segment order is sold or none is — each primary's parts are there with the quantity it lists and its status (a part may lag while its follow is queued), each part's primary lists it (a part without its primary only while the order's intent is left); at the end, follows and intents waited for, none left"),
    ("insufficient-409", "SPEC §13: a 409 insufficient_stock only when the remaining total is below the quantity, judged from the last checkpoint's Redis read less every other order begun since (refused ones too when a multi-segment order's parts may have held units a moment: a plain 503, or 409 sale_ended/sale_not_started, of 2+ units) (orders overlapping a PUT/DELETE/restock or a damage of the SKU are not judged); with --large-orders, each quiet checkpoint sends one order larger than any one segment's stock per SKU without a limit, which must be served"),
    ("database", "with the order log and its sink (chaos.sh, CH_SINK=1): at the end, the sink running and caught up (its /metrics: inventory_sink_lag_seconds 0, inventory_sink_pending 0; in Redis: every stream of every segment below max(segments, hwm, lhwm) — dropped segments' included — drained by group sink, and no segment with changes not logged (cnt u) left to backfill; within %d s), `inventory-sink reconcile --sku S` of every SKU exits 0: the database has every order Redis has, with its status, quantity, user and parts, and no log is left unread; the sink skipped no log entry as malformed (sink_malformed in logs/sink.log). Only a missing_in_redis row the sink backfilled (no order_events row) whose order was created before the end of the SKU's last PUT or DELETE that may have run (+ %d s when its outcome is unknown) is excused, with its units: such a reset took it out of Redis (docs/design.md)" % (SINK_CATCHUP_S, RESET_SLACK_S)),
    ("redis-calls", "at every checkpoint, every instance's inventory_order_redis_calls_max ≤ inventory_order_redis_call_budget (/metrics)"),
] + chaos_queue.QCHECKS + chaos_cart.CCHECKS


class Checker:
    def __init__(self, run):
        self.run = run
        self.viol = {name: {} for name, _ in CHECKS}
        self.examined = Counter()
        self.unavailable = {}           # check -> why it could not be made
        self.db_notes = []              # the database check's lines of SUMMARY.md
        self.calls_seen = []            # (checkpoint, instance, max, budget)
        self.damage_notes = []          # per damage: one line for SUMMARY.md

    def fail(self, check, subject, msg, seqs):
        d = self.viol[check]
        if subject not in d:
            d[subject] = (msg, list(seqs)[:12])

    def count(self):
        return sum(len(d) for d in self.viol.values())

    # -- the sale rules in force (issue 29: rules are versioned data) --
    @staticmethod
    def rule_state(op):
        """The rules a PUT, PATCH or DELETE leaves: {"ttl", "limit", "open"}, or None for a
        DELETE (a PUT resets every rule it does not name; chaos's PATCHes name all three)."""
        if op.op == "delete":
            return None
        a = op.args
        return {"ttl": a.get("reservation_ttl_s", 0), "limit": a.get("limit_per_user", 0),
                "open": op.op == "put" or a.get("sale_end") is None}

    def rules_at(self, sku, t0, t1):
        """The rules in force for the whole of [t0, t1] (an order's attempt), when the history
        settles them: the last PUT/PATCH/DELETE of sku answered 2xx before t0 (R), and every
        other one that may have run either ended before R began (and, if its outcome is
        unknown, STALE_RULE_S before) or began after t1. Returns (state, R) or None."""
        ops = self.rule_ops.get(sku, [])
        best = None
        for o in ops:
            if o.ack is not None and o.ack["t1"] < t0 and (best is None or o.ack["t1"] > best.ack["t1"]):
                best = o
        if best is None:
            return None
        for o in ops:
            if o is best or not any(a["eff"] != NONE for a in o.attempts) or o.t0 > t1:
                continue
            if o.t1 >= best.t0 or (o.final == "unknown" and o.t1 + STALE_RULE_S >= best.t0):
                return None
        return self.rule_state(best), best

    @staticmethod
    def landed_by(op):
        """The latest moment (monotonic s) an attempt of the rule change op may have been
        applied in Redis: an attempt answered 2xx by its answer, one without an answer (or a
        5xx) STALE_RULE_S after its client gave up on it (a request held by a stopped instance
        or Redis); None when no attempt may have run."""
        ts = [a["t1"] + (STALE_RULE_S if a["eff"] == MAYBE else 0) for a in op.attempts if a["eff"] != NONE]
        return max(ts) if ts else None

    def limit_from(self, sku, ops):
        """When a limit added by PATCH (0 -> n) to sku holds for every order begun after it (in
        monotonic s): the earliest answer of a PUT or PATCH stating a limit whose answered
        attempt began after every PUT or PATCH stating none may have been applied (landed_by).
        Such a rule change without a limit may be applied after the one that added it: its
        args were taken before the add (op_patch takes them under the lock and sends them
        after it, a PUT copies the rules, every retry of an op re-sends its args), and it
        takes the limit away until a later PUT or PATCH that states one is applied — orders
        meanwhile are placed with no limit and no entry, rightly. The answer of the first such
        change applied after all of them gives it back for good (the answered attempt of a
        PATCH was applied within it; a keyed PUT's 2xx may replay its first attempt's write).
        Returns (t, why), t infinity when no such answer came; None when the SKU's limit was
        never added by a PATCH."""
        if not self.run.limit_adds.get(sku):
            return None
        rule = [o for o in ops["put"] + ops["patch"] if o.attempts]
        free = [(o, self.landed_by(o)) for o in rule if not o.args.get("limit_per_user")]
        free = [(o, t) for o, t in free if t is not None]
        best, passed = None, []
        for o in rule:
            if not o.args.get("limit_per_user") or o.ack is None:
                continue
            began = o.ack["t0"] if o.op == "patch" else o.t0
            late = [(x, t) for x, t in free if t > began]
            if late:
                passed.append((o, late))
            elif best is None or o.ack["t1"] < best[1]:
                best = (o, o.ack["t1"], began)
        def name(o):
            return "%s lop %d (limit %s)" % (o.op.upper(), o.id, o.args.get("limit_per_user", 0))
        adds = [l for l in self.run.limit_adds[sku] if l.ack is not None]
        first = "the first add %s answered at %.3f s" % (name(adds[0]), adds[0].ack["t1"]) if adds else "no add answered"
        skipped = [(o, late) for o, late in passed if best is None or o.ack["t1"] < best[1]]
        why = "; ".join("%s answered at %.3f s passed over: %s may have been applied after its attempt began (%.3f s)" % (
            name(o), o.ack["t1"], ", ".join("%s by %.3f s" % (name(x), t) for x, t in late[:3]),
            o.ack["t0"] if o.op == "patch" else o.t0) for o, late in skipped[:3])
        if best is None:
            return float("inf"), "no answered PUT/PATCH stating a limit began after every one stating none may have been applied (%s)%s" % (
                first, ": " + why if why else "")
        o, t, began = best
        return t, "the answer of %s, its attempt begun at %.3f s after every PUT/PATCH without a limit may have been applied (%s)%s" % (
            name(o), began, first, "; " + why if why else "")

    def rule_ops_text(self, ops, t_lo, t_hi, n=10):
        """The PUTs and PATCHes of a SKU that may have run and may have been applied within
        [t_lo, t_hi] (the last n): lop, the limit stated, t0, t1 and each attempt's status and
        effect — what a "limits" violation is judged by."""
        sel = [o for o in ops["put"] + ops["patch"] if o.attempts and o.t0 <= t_hi and (self.landed_by(o) or -1) >= t_lo]
        sel.sort(key=lambda o: o.t0)
        return "; ".join("%s lop %d limit %s %.3f..%.3f [%s]" % (
            o.op.upper(), o.id, o.args.get("limit_per_user", 0), o.t0, o.t1,
            " ".join("%s/%s" % (a["status"] if a["status"] is not None else (a["err"] or "-"), a["eff"]) for a in o.attempts))
            for o in sel[-n:]) or "none"

    def rules_in_force(self, lops):
        """Every order attempt begun after a rule change was answered (and settled: rules_at)
        is judged by the rules it left: a 201 is "reserved" exactly when the TTL is > 0 and
        comes only while the window is open; 409 sale_ended only while it is closed."""
        for l in lops:
            if l.op != "order":
                continue
            for a in l.attempts:
                b = a["body"] if isinstance(a["body"], dict) else {}
                err = b.get("error") if a["status"] == 409 else None
                if a["status"] != 201 and err not in ("sale_ended", "sale_not_started"):
                    continue
                got = self.rules_at(l.sku, a["t0"], a["t1"])
                if got is None:
                    continue
                st, R = got
                self.examined["rules-in-force"] += 1
                bad = None
                if st is None:
                    # After a DELETE only a sale is wrong: a refusal an instance makes from its
                    # cached rules of the deleted SKU (sale_ended) changes nothing, and SPEC §11
                    # binds PUT and PATCH answers, not DELETE's
                    if a["status"] == 201:
                        bad = "201 for a SKU deleted (DELETE lop %d answered before it began)" % R.id
                elif a["status"] == 201 and not st["open"]:
                    bad = "201 while the sale window was closed"
                elif a["status"] == 201 and b.get("status") != ("reserved" if st["ttl"] > 0 else "created"):
                    bad = "status %r with reservation_ttl_s %d" % (b.get("status"), st["ttl"])
                elif err and st["open"]:
                    bad = "409 %s while the sale window was open" % err
                if bad:
                    self.fail("rules-in-force", ("order", l.id, a["seq"]), "order lop %d of %s (instance %d, began %.3f s) answered %s: %s, by the rules %s lop %d %s answered at %.3f s" % (
                        l.id, l.sku, a["inst"], a["t0"], a["status"], bad, R.op.upper(), R.id, R.args, R.ack["t1"]), [R.ack["seq"], a["seq"]])

    # -- at checkpoints: Redis against the history --
    def snapshot(self, rds, sku):
        meta = pairs(rds.cmd("HGETALL", KEYS.sku(sku, "meta")))
        if meta and as_int(meta.get("segments")) == 0:
            meta = {}  # a layout of 0 segments: the SKU was deleted (its meta stays, docs/design.md)
        keys = rds.scan(KEYS.seg_glob(sku, "*"))
        pat = KEYS.seg_re(sku)
        seg_keys = defaultdict(set)
        for k in keys:
            m = pat.match(k)
            if m:
                seg_keys[int(m.group(1))].add(m.group(2))
        n = as_int(meta.get("segments"))
        # The users' entries are read before the segments: the sweeper runs during a
        # checkpoint (expiring holds, applying give-backs), and an entry only goes after its
        # order has ended, while no order becomes live without a request: an order live in the
        # segments read after was live, and in its entries, when the entries were read.
        users = rds.cmd("HGETALL", KEYS.sku(sku, "users")) if KEYS.v == 2 else []
        if isinstance(users, RedisError):
            raise Infra("Redis error reading the users of %s: %s" % (sku, users))
        # The intents of multi-segment orders before the segments too: an order's parts are
        # written after its intent and the intent deleted after its parts are whole or undone.
        intents = rds.cmd("HGETALL", KEYS.sku(sku, "multi")) if KEYS.v == 2 else []
        if isinstance(intents, RedisError):
            raise Infra("Redis error reading the intents of %s: %s" % (sku, intents))
        wall = time.time()      # no segment below was read before this instant
        segs = {}
        if n and n > 0:
            # One MULTI/EXEC per segment: the sweeper may end a hold between two reads.
            cmds = []
            for k in range(n):
                cmds += [("MULTI",), ("GET", KEYS.seg(sku, k, "stock")), ("GET", KEYS.seg(sku, k, "sver")),
                         ("HGETALL", KEYS.seg(sku, k, "cnt")), ("HGETALL", KEYS.seg(sku, k, "orders")),
                         ("HGETALL", KEYS.seg(sku, k, "idem")), ("ZRANGE", KEYS.seg(sku, k, "due"), 0, -1, "WITHSCORES"),
                         ("ZRANGE", KEYS.seg(sku, k, "follow"), 0, -1), ("EXEC",)]
            rep = rds.pipeline(cmds)
            for k in range(n):
                x = rep[9 * k + 8]
                if not isinstance(x, list) or len(x) != 7 or any(isinstance(y, RedisError) for y in x):
                    raise Infra("Redis error reading segment %d of %s: %s" % (k, sku, x))
                st, sv, cnt, orders, idem, due, follow = x
                segs[k] = {"stock": as_int(st), "sver": as_int(sv), "cnt": pairs(cnt), "orders": pairs(orders),
                           "idem": pairs(idem), "due": pairs(due), "follow": set(follow or [])}
        return {"meta": meta, "seg_keys": seg_keys, "segs": segs, "users": pairs(users), "wall": wall,
                "intents": pairs(intents)}

    def crashes(self):
        """The processes that exited by themselves (chaos.sh's "crash" events)."""
        ev = self.nemesis_events()
        if ev is None:
            return
        t_start = time.time() - now()
        for e in ev:
            if e.get("ev") == "crash":
                self.fail("processes", (e["target"], e["t_ms"]), "%s exited by itself at %.3f s: %s (restarted); its log is logs/%s.log (a signal: see also dmesg)" % (
                    e["target"], e["t_ms"] / 1000.0 - t_start, e.get("detail", ""), e["target"]), [])
        self.examined["processes"] = len(ev)

    def redis_checks(self, cp):
        run = self.run
        self.crashes()
        try:
            rds = run.redis(10.0)
            try:
                t_read = now()
                snaps = {s: self.snapshot(rds, s) for s in run.skus}
            finally:
                rds.close()
        except (OSError, ConnectionError) as e:
            raise Infra("cannot read Redis at checkpoint %s: %s" % (cp, e))
        with run.lock:
            lops = list(run.lops)
        by_sku = defaultdict(lambda: defaultdict(list))
        for l in lops:
            by_sku[l.sku][l.op].append(l)
        cancels_of, confirms_of = defaultdict(list), defaultdict(list)
        extends_of = defaultdict(list)
        for l in lops:
            if l.op == "cancel":
                cancels_of[l.args["order_id"]].append(l)
            elif l.op == "confirm":
                confirms_of[l.args["order_id"]].append(l)
            elif l.op == "extend":
                extends_of[l.args["order_id"]].append(l)
        # How a record is traced to its request: the order id of an answer; else, for a keyed
        # order (a pool user's), the segment's Idempotency-Key entry naming it; else the user
        # of its own that a keyless order carries.
        trace = {"oid": {}, "key": {}, "tag": {}}
        for l in lops:
            if l.op != "order":
                continue
            if l.key:
                trace["key"][l.key] = l
            else:
                trace["tag"][l.args["user_id"]] = l
            for a in l.attempts:
                if a["eff"] == YES and isinstance(a["body"], dict) and isinstance(a["body"].get("order_id"), str):
                    trace["oid"][a["body"]["order_id"]] = l
        outages = self.redis_outages()
        run.stock_reads.append((t_read, {s: (sum(x["stock"] or 0 for x in snaps[s]["segs"].values()) if snaps[s]["meta"] and all(
            x["stock"] is not None for x in snaps[s]["segs"].values()) else None) for s in run.skus}))
        run.seg_reads.append((t_read, {s: {k: x["stock"] for k, x in snaps[s]["segs"].items()} for s in run.skus}))
        for s in run.skus:
            snap = snaps[s]
            ops = by_sku[s]
            self.examined["layout"] += 1
            report = None
            if snap["meta"]:
                # The status endpoint is compared with Redis only when no hold is live: the
                # sweeper may expire one between verify.sh's read and its GET.
                live_holds = sum(len(x.get("due", {})) for x in snap["segs"].values())
                report = self.verify_sh(cp, s, status=live_holds == 0)
            self.check_multi(cp, s, report)
            layout = self.check_layout(cp, s, snap, ops)
            self.check_orders(cp, s, snap, ops, layout, trace, cancels_of)
            self.check_lifecycle(cp, s, snap, ops, layout, trace, cancels_of, confirms_of, outages)
            self.check_extends(cp, s, snap, layout, trace, extends_of)

    def verify_sh(self, cp, sku, status=True):
        """loadtest/verify.sh for the history-independent §8 checks of one SKU (status: compare
        the status endpoint's totals with Redis too): inventory-check's, the one checker of the
        per-SKU state invariants (tools/check/), but for the per-user limit, which "limits"
        judges against the history of rule changes (--skip-users). Returns inventory-check's
        report (its JSON), or None when it wrote none."""
        run = self.run
        where = ["--redis-cluster", run.a.redis_cluster] if run.a.redis_cluster else ["--redis-port", str(run.a.redis_port)]
        report_path = os.path.join(run.a.out, "check-%s-%s.json" % (cp, sku))
        cmd = [run.a.verify] + where + ["--sku", sku, "--max-qty", str(run.max_qty), "--key-schema", str(KEYS.v),
                                        "--skip-users", "--json", report_path]
        if cp != "final":
            cmd.append("--pending-ok")  # follows and intents: drained only at the end (wait_out_holds)
        if status:
            cmd += ["--status-url", "http://127.0.0.1:%d/api/v1/skus/%s" % (run.ports[0], sku),
                "--status-token", run.a.token]
        else:
            self.examined["status-skipped"] += 1
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            raise Infra("verify.sh timed out")
        self.examined["segments"] += 1
        out = p.stdout + p.stderr
        with open(os.path.join(run.a.out, "verify-%s-%s.txt" % (cp, sku)), "w") as f:
            f.write(out)
        if p.returncode == 3:
            raise Infra("verify.sh could not read Redis: " + out[-300:])
        for line in out.splitlines():
            if line.startswith("verify: ✗"):
                # The subject drops the checkpoint so that one fault found again is reported once.
                self.fail("segments", (sku, re.sub(r"\d+", "#", line)), "checkpoint %s, %s: %s" % (cp, sku, line[len("verify: ✗ "):]), [])
        try:
            with open(report_path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def redis_call_bound(self, cp):
        """The Redis-call bound of issue 18 item 2, from every instance's /metrics."""
        run = self.run
        for i in range(len(run.ports)):
            t = run.metrics_text(i) or ""
            mx = re.search(r"^inventory_order_redis_calls_max(?:\{[^}]*\})? ([0-9.eE+-]+)", t, re.M)
            bd = re.search(r"^inventory_order_redis_call_budget(?:\{[^}]*\})? ([0-9.eE+-]+)", t, re.M)
            if not mx or not bd:
                self.unavailable.setdefault("redis-calls", "instance %d (checkpoint %s) exports no inventory_order_redis_calls_max / inventory_order_redis_call_budget" % (i, cp))
                continue
            mx, bd = float(mx.group(1)), float(bd.group(1))
            self.examined["redis-calls"] += 1
            self.calls_seen.append((cp, i, mx, bd))
            if mx > bd:
                self.fail("redis-calls", i, "checkpoint %s: instance %d: an order made %g Redis calls, over the budget of %g" % (cp, i, mx, bd), [])

    def master_fault_spans(self):
        """[(t0, t1)] in chaos.py's clock of the cluster's master faults (kill to back)."""
        ev = self.nemesis_events() or []
        t_start = time.time() - now()
        spans, open_ = [], {}
        for e in ev:
            t = e["t_ms"] / 1000.0 - t_start
            if e["ev"] in ("master-kill9", "master-cut-kill9", "master-pause-kill9", "sku-master-kill9", "sku-master-cut-kill9", "sku-master-pause-kill9"):
                open_[e["target"]] = t
            elif e["ev"] == "back" and e["target"] in open_:
                spans.append((open_.pop(e["target"]), t))
        return spans + [(t, float("inf")) for t in open_.values()]

    def damage_checks(self):
        """Each counter damage against the history: what was written on its segment while it
        was damaged, and how the SKU's orders were answered meanwhile."""
        run = self.run
        lops = list(run.lops)
        admin = defaultdict(list)
        orders = defaultdict(list)
        for l in lops:
            if l.op in ("put", "delete"):
                admin[l.sku].append(l)
            elif l.op == "order":
                orders[l.sku].append(l)
        order_by_tag = {l.args["user_id"]: l for l in lops if l.op == "order"}
        spans = self.master_fault_spans() if run.a.redis_cluster else []
        for d in run.damages:
            what = "%s segment %d/%d %s%s %r→%r" % (d["sku"], d["k"], d["n"], d["key"].rsplit(":", 1)[1], " " + d["field"] if d["field"] else "", d["orig"], d["bad"])
            if d["result"] != "damaged" or d["before"] is None or d["after"] is None:
                self.damage_notes.append("- %s: %s, not checked" % (what, d["result"]))
                continue
            t0, t1 = d["t0"], d["t1"]
            ans, pre, inwin = Counter(), Counter(), []
            for sku, ls in orders.items():
                for l in ls:
                    for a in l.attempts:
                        if a["status"] is None:
                            continue
                        if a["t0"] >= t0 and a["t1"] <= t1:
                            ans[(sku == d["sku"], "5xx" if a["status"] >= 500 else str(a["status"]))] += 1
                            if sku == d["sku"]:
                                inwin.append((a["t1"], a["status"], l.args["quantity"]))
                        elif sku == d["sku"] and t0 - 5 <= a["t0"] and a["t1"] < t0:
                            pre[a["status"] >= 500] += 1
            mine = {k[1]: v for k, v in ans.items() if k[0]}
            # The storm check counts the SKU's answers only while the other segments may still
            # hold stock: once the units answered 201 in the window come within 10 of what they
            # held at the damage, an order may find only the damaged segment (503 is honest).
            storm, sold = Counter(), 0
            for _, st, q in sorted(inwin):
                if sold >= d["other_stock"] - 10:
                    break
                storm["5xx" if st >= 500 else str(st)] += 1
                if st in (200, 201):
                    sold += q
            n_o = sum(v for k, v in ans.items() if not k[0])
            r_o = ans.get((False, "5xx"), 0) / n_o if n_o else 0.0
            # The SKU's own 5xx rate in the 5 s before the damage (with ≥ 5 answers): a SKU that
            # was failing already (an earlier defect, a fault) is not failing for the damage.
            n_p = pre[True] + pre[False]
            r_p = pre[True] / n_p if n_p >= 5 else 0.0
            # What was written meanwhile: the segment at the repair, with the damaged counter
            # put back, against the segment at the damage.
            self.examined["damaged-segments"] += 1
            b, af = seg_state(d["before"]), seg_state(d["after"])
            suf = d["key"].rsplit(":", 1)[1]
            changed = []
            if not d.get("repaired"):
                changed.append("the damaged counter held %r at the repair, not %r" % (d.get("found"), d["bad"]))
            elif suf in af:
                t, v = af[suf]
                if d["field"] and isinstance(v, dict):
                    v = dict(v)
                    v[d["field"]] = d["orig"]
                elif not d["field"]:
                    v = d["orig"]
                af[suf] = (t, v)
            new_orders = []
            for key in sorted(set(b) | set(af)):
                x, y = b.get(key, ("none", None)), af.get(key, ("none", None))
                if x == y:
                    continue
                if x[0] == y[0] == "hash" and isinstance(x[1], dict) and isinstance(y[1], dict):
                    diff = ["%s %r→%r" % (f, x[1].get(f), y[1].get(f)) for f in sorted(set(x[1]) | set(y[1])) if x[1].get(f) != y[1].get(f)]
                    if key == "orders":
                        new_orders = [f for f in y[1] if f not in x[1]]
                    changed.append("%s: %s" % (key, ", ".join(diff[:4]) + (" …" if len(diff) > 4 else "")))
                else:
                    changed.append("%s: %r→%r" % (key, x, y))
            # A violation is drift, or the damaged counter itself written: a script that does
            # not read the damaged counter (a restock with s damaged, an order with t damaged)
            # may run and keeps t = stock + s; one that reads it must write nothing.
            bad_write = not d.get("repaired")
            if changed:
                drift = self.segment_drift(af)
                bad_write = bad_write or bool(drift)
                changed.insert(0, "DRIFT: %s" % drift if drift else "no drift (t = stock + s, s = the live records' units, o = the live orders, with the counter put back)")
            why_ok = None
            resets = [l.id for l in admin[d["sku"]] if any(
                a["sent"] and a["eff"] != NONE and a["t0"] < t1 and (a["t1"] + (10 if a["eff"] == MAYBE else 0)) > t0 for a in l.attempts)]
            if resets:
                why_ok = "PUT/DELETE lops %s overlapped" % resets[:4]
            elif any(f0 < t1 and f1 > t0 for f0, f1 in spans):
                why_ok = "a master failover overlapped"
            note = "- %s, %.1f..%.1f s: orders of the SKU answered %s (other SKUs' 5xx %.0f %%); written meanwhile: %s" % (
                what, t0, t1, dict(sorted(mine.items())) or "none", 100 * r_o, "; ".join(changed) if changed else "nothing")
            if changed and why_ok:
                note += " (not a violation: %s)" % why_ok
            elif changed and not bad_write:
                note += " (not a violation: the damaged counter was left alone and §8 holds)"
            self.damage_notes.append(note)
            if bad_write and not why_ok:
                seqs = [x for oid in new_orders[:3] for tag in [self.record_tag(af.get("orders"), oid)] if tag in order_by_tag for x in order_by_tag[tag].seqs()]
                self.fail("damaged-segments", (d["sku"], d["k"], round(t0, 2)), "%s, damaged %.3f..%.3f s: written while damaged: %s" % (
                    what, t0, t1, "; ".join(changed)), seqs)
            n_s = sum(storm.values())
            r_s = storm.get("5xx", 0) / n_s if n_s else 0.0
            # A master failover in the window (on a cluster) makes 503s of its own: the SKU's
            # own keys' master down fails every order of the SKU, damaged or not (seed 1818,
            # --cluster --long: 28 of 28, "Idempotency-Key claim: Connection refused").
            failover = any(f0 < t1 and f1 > t0 for f0, f1 in spans)
            # So does a PUT or DELETE of the SKU recorded during the damage: its roll-out resets
            # every segment, the damaged one refuses (its version unknown), and no order may be
            # placed on a layout half rolled out, so every order of the SKU answers 503 until the
            # repair lets the roll-out finish (--cluster --short, seed 345884: twelve PUTs
            # answered 503 "outcome unknown" at 26.13 s, the damage 26.13..28.40 s).
            if d["n"] >= 2 and d["other_stock"] >= 20 and n_s >= 10 and not failover and not resets:
                self.examined["damage-failover"] += 1
                if r_s >= 0.5 and r_s >= r_o + 0.3 and r_s >= r_p + 0.3:
                    seqs = [a["seq"] for l in orders[d["sku"]] for a in l.attempts if a["status"] is not None and a["status"] >= 500 and t0 <= a["t0"] and a["t1"] <= t1][:6]
                    self.fail("damage-failover", (d["sku"], d["k"], round(t0, 2)), "%s, damaged %.3f..%.3f s with %d units in the other %d segments: %d of the SKU's first %d order answers (while the others may have had stock) were 5xx (%.0f %%; other SKUs %.0f %%, this SKU in the 5 s before %.0f %%); all its answers meanwhile: %s" % (
                        what, t0, t1, d["other_stock"], d["n"] - 1, storm.get("5xx", 0), n_s, 100 * r_s, 100 * r_o, 100 * r_p, dict(sorted(mine.items()))), seqs)

    @staticmethod
    def segment_drift(st):
        """What breaks §8 in a damage script's segment state (the damaged counter put back)."""
        if all(st.get(k, ("none",))[0] == "none" for k in ("stock", "cnt")):
            return ""       # the segment was dropped (a smaller re-PUT, a DELETE): nothing to add up
        try:
            stock = as_int(st["stock"][1])
            cnt = st["cnt"][1] if isinstance(st["cnt"][1], dict) else {}
            t, sold, o = as_int(cnt.get("t")), as_int(cnt.get("s")), as_int(cnt.get("o"))
            recs = [json.loads(x) for x in (st["orders"][1] or {}).values()] if isinstance(st["orders"][1], dict) else []
        except (KeyError, TypeError, ValueError):
            return "unreadable segment"
        live = [r for r in recs if isinstance(r, dict) and r.get("status") in LIVE]
        units_ = sum(units(r) for r in live)
        bad = []
        if None in (stock, t, sold, o):
            return "a counter is not an integer: stock %r t %r s %r o %r" % (stock, t, sold, o)
        if t != stock + sold:
            bad.append("t %d != stock %d + s %d" % (t, stock, sold))
        if sold != units_:
            bad.append("s %d != %d units in live records" % (sold, units_))
        orders_ = sum(1 for r in live if "part_of" not in r)  # o counts orders, never parts
        if o != orders_:
            bad.append("o %d != %d live orders (records that are not parts)" % (o, orders_))
        return ", ".join(bad)

    @staticmethod
    def record_tag(orders_state, oid):
        try:
            return json.loads(orders_state[1][oid]).get("user_id")
        except (TypeError, KeyError, ValueError, AttributeError):
            return None

    def check_layout(self, cp, s, snap, ops):
        """Which PUT this SKU's layout is, and Σ t against it. Returns (P, P's ack time or None,
        n, version) or None when the SKU has no meta."""
        meta, seg_keys = snap["meta"], snap["seg_keys"]
        puts, deletes = ops["put"], ops["delete"]
        acked_puts = [p for p in puts if p.final == "acked"]
        if not meta:
            self.examined["sku-existence"] += 1
            if acked_puts:
                last = max(acked_puts, key=lambda p: p.ack["t1"])
                if all(not d.maybe() and d.t1 < last.t0 for d in deletes):
                    self.fail("sku-existence", (s, "gone"), "checkpoint %s: %s has no meta, but PUT lop %d was acknowledged (version %s) after every DELETE had ended" % (
                        cp, s, last.id, (last.ack["body"] or {}).get("version")), last.seqs() + [x for d in deletes for x in d.seqs()][-4:])
            stray = sorted(k for k, suf in seg_keys.items() if suf & SEGMENT_DATA_KEYS)
            if stray:
                acked_del = [d for d in deletes if d.final == "acked"]
                last_del = max(acked_del, key=lambda d: d.t0) if acked_del else None
                if last_del and all(not p.maybe() and p.t1 < last_del.t0 for p in puts):
                    self.fail("sku-existence", (s, "stray"), "checkpoint %s: %s was deleted (204, lop %d) after every PUT had ended, yet keys of segments %s remain" % (
                        cp, s, last_del.id, stray[:8]), last_del.seqs())
            return None
        v, n, mstock = as_int(meta.get("version")), as_int(meta.get("segments")), meta.get("stock")
        mstock = as_int(mstock) if mstock is not None else None
        if v is None or not n or n < 1:
            self.fail("layout", (s, "meta", v), "checkpoint %s: %s meta is malformed: %s" % (cp, s, meta), [])
            return None
        # Keys of segments outside the layout (lock/fence keys of lockcore and sver tombstones stay).
        stray = sorted(k for k, suf in seg_keys.items() if k >= n and suf & SEGMENT_DATA_KEYS)
        if stray:
            self.fail("layout", (s, "stray", v), "checkpoint %s: %s has %d segments (version %d) but keys of segments %s exist (%s)" % (
                cp, s, n, v, stray[:8], sorted(seg_keys[stray[0]])), [])
        answered = {}
        for p in puts:
            for a in p.attempts:
                if a["eff"] == YES and isinstance(a["body"], dict) and a["body"].get("version") == v:
                    answered.setdefault(p.id, (p, a))
        if len(answered) > 1:
            ids = sorted(answered)
            self.fail("put-answers", (s, "dupver", v), "%s: PUT lops %s were all answered version %d" % (s, ids, v),
                      [answered[i][1]["seq"] for i in ids])
        if answered:
            p, a = next(iter(answered.values()))
            if p.args["segments"] != n or (mstock is not None and mstock != p.args["stock"]):
                self.fail("layout", (s, "meta-put", v), "checkpoint %s: %s meta %s does not match PUT lop %d %s that was answered version %d" % (
                    cp, s, meta, p.id, p.args, v), [a["seq"]])
            cands = [(p, a["t1"])]
        else:
            cands = [(p, None) for p in puts if p.maybe() and p.args["segments"] == n
                     and (mstock is None or mstock == p.args["stock"])]
            if not cands:
                self.fail("layout", (s, "noput", v), "checkpoint %s: %s meta %s (version %d) matches no PUT that was sent (no answer gave this version; no unanswered PUT has %d segments%s)" % (
                    cp, s, meta, v, n, "" if mstock is None else " and stock %d" % mstock), [x for p in puts for x in p.seqs()][-6:])
                return None
        segs = snap["segs"]
        sum_t = sum(as_int(segs[k]["cnt"].get("t")) or 0 for k in range(n))
        best = None
        for p, ack_t1 in cands:
            lo = hi = p.args["stock"]
            definite, possible = [], []
            for r in ops["restock"]:
                if not any(a["eff"] in (YES, MAYBE) for a in r.attempts):
                    continue        # refused every time (4xx) or never sent: added nothing
                if not r.maybe() and r.t1 < p.t0:
                    continue        # over before the PUT began: the PUT reset it away
                q = r.args["quantity"]
                added = r.ack["body"].get("added") if r.ack and isinstance(r.ack["body"], dict) else None
                if isinstance(added, int):
                    q = added
                if ack_t1 is not None and r.final == "acked" and r.t0 > ack_t1:
                    # Acknowledged, and wholly after the layout was in place: counted once. When
                    # an earlier attempt may have added part of it, "added" may be the rest only.
                    lo += q
                    hi += max(q, r.args["quantity"]) if r.maybe() else q
                    definite.append(r)
                else:
                    hi += q
                    possible.append(r)
            ok = lo <= sum_t <= hi
            if ok:
                best = None
                break
            if best is None:
                best = (p, ack_t1, lo, hi, definite, possible)
        if best:
            p, ack_t1, lo, hi, definite, possible = best
            retried = [r for r in definite if r.maybe()]
            self.fail("layout", (s, "sum_t", v), "checkpoint %s: %s (version %d, %d segments) Σ t = %d, expected %d..%d: PUT lop %d stock %d %s + %d restocks acknowledged after it (%d units%s) + up to %d overlapping or unknown ones (%d units)"
                      % (cp, s, v, n, sum_t, lo, hi, p.id, p.args["stock"], "(acknowledged)" if ack_t1 is not None else "(outcome unknown)",
                         len(definite), lo - p.args["stock"],
                         "; %d of them acknowledged only on a retry after an attempt without answer: lops %s, quantities %s" % (
                             len(retried), [r.id for r in retried][:6], [r.args["quantity"] for r in retried][:6]) if retried else "",
                         len(possible), hi - lo),
                      p.seqs()[-1:] + [x for r in retried[:3] for x in r.seqs()] + [x for r in possible[:2] for x in r.seqs()])
        p, ack_t1 = cands[0]
        return (p, ack_t1, n, v) if len(cands) == 1 else (None, None, n, v)

    def check_multi(self, cp, s, report):
        """SPEC §8 "every part of a multi-segment order is sold or none is", from Redis:
        inventory-check's "multi" findings in the report of verify_sh's read (tools/check/
        invcheck.c: each primary's parts are there with the quantity it lists and its status,
        created/reserved alike, a part lagging only while its follow is queued in the primary's
        segment; each part record's primary lists it, a part without its primary only while the
        order's intent is left; what a sweep between two segments' reads explains is judged
        again on the records read then; at the final checkpoint, after waiting for them, no
        follow or intent left). No report: the SKU has no layout, so no order."""
        if report is None:
            return
        self.examined["multi-parts"] += report.get("multi_orders", 0)
        problems = [p["text"] for p in report.get("problems", []) if p.get("check") == "multi"]
        for msg in problems[:10]:
            self.fail("multi-parts", (s, msg[:60]), "checkpoint %s: %s: %s" % (cp, s, msg), [])

    def insufficient_checks(self, lops):
        """SPEC §13: 409 insufficient_stock only when the remaining total is below the quantity.
        From the Redis read at the last checkpoint before the order (Σ stock then, R) and the
        history: until the 409 came, at least R − (the units of every other order of the SKU
        begun since that read and not refused, or refused after it may have held units a moment:
        held_for_a_moment) units remained, restocks, cancels and expiries
        only adding; orders overlapping a PUT/DELETE/restock of the SKU begun since the read, or
        a damage of one of its segments, are not judged. A 409 for q ≤ that bound is a
        violation. The probes sent at quiet checkpoints (probe_large) are judged the same way,
        with nothing else running: exact."""
        reads = sorted(self.run.stock_reads, key=lambda x: x[0])
        starts = [t for t, _ in reads]
        by_sku = defaultdict(list)
        for L in lops:
            by_sku[L.sku].append(L)
        for s, ls in by_sku.items():
            admin = [L for L in ls if L.op in ("put", "delete", "restock")]
            dmg = [(d["t0"], d["t1"] if d["t1"] is not None else now()) for d in self.run.damages if d["sku"] == s]
            for L in ls:
                if L.op != "order":
                    continue
                a = next((x for x in L.attempts if x["status"] == 409 and isinstance(x["body"], dict)
                          and x["body"].get("error") == "insufficient_stock"), None)
                if a is None:
                    continue
                i = bisect.bisect_right(starts, a["t0"]) - 1
                if i < 0:
                    continue
                t_read, rem = reads[i]
                R = rem.get(s)
                if R is None or L.t0 < t_read:
                    continue
                self.examined["insufficient-409"] += 1
                if any(x.attempts and x.t0 < a["t1"] and x.t1 > t_read for x in admin) or any(d0 < a["t1"] and d1 > t_read for d0, d1 in dmg):
                    continue
                others = [x for x in ls if x.op == "order" and x is not L and x.attempts and t_read <= x.t0 < a["t1"] and (
                    x.final != "failed" or self.held_for_a_moment(x))]
                low = R - sum(x.args["quantity"] for x in others)
                if L.args["quantity"] <= low:
                    self.fail("insufficient-409", L.id, "order lop %d of %s, quantity %d, answered 409 insufficient_stock at %.3f s while at least %d units remained (%d at the checkpoint read at %.3f s, less %d other order(s) that may have sold since)%s" % (
                        L.id, s, L.args["quantity"], a["t1"], low, R, t_read, len(others), self.insufficient_context(s, a, t_read, others)), L.seqs())

    @staticmethod
    def held_for_a_moment(x):
        """Whether an order refused in the end (every attempt "nothing changed") may still have
        taken units for a while: a multi-segment order's parts are sold before its primary, and
        undone when the primary cannot be written (its lock lost, an instance stopped past the
        lease, the sale window closed meanwhile): the answer is then a plain 503, or 409
        sale_ended / sale_not_started. One unit never takes several segments."""
        return x.args["quantity"] >= 2 and any(
            (y["status"] or 0) >= 500 or (y["status"] == 409 and isinstance(y["body"], dict) and y["body"].get("error") in ("sale_ended", "sale_not_started"))
            for y in x.attempts)

    def insufficient_context(self, s, a, t_read, others):
        """What an insufficient-409 violation needs to be explained from its report alone (the
        run's files may be gone): the SKU's segments at the checkpoint read before it and the
        one after, the other orders it was judged against with their answers, the nemesis's
        events from 1 s before the read to 0.5 s after the answer, and the answering
        instance's log lines within 1 s of it (this SKU's, and those naming none). Times in run
        seconds, as the message's."""
        fmt = lambda segs: "{%s}" % ", ".join("%s: %s" % (k, segs[k]) for k in sorted(segs, key=int)) if segs else "not read"
        reads = sorted(self.run.seg_reads, key=lambda x: x[0])
        before = next((r.get(s) for t, r in reads if t == t_read), None)
        after = next(((t, r.get(s)) for t, r in reads if t > a["t1"]), None)
        out = ["segments at the read: %s" % fmt(before)]
        if after:
            out.append("at the next read (%.3f s): %s" % (after[0], fmt(after[1])))
        out.append("the other orders: %s" % ("; ".join("lop %d q%d inst %s %.3f-%.3f s %s" % (
            x.id, x.args["quantity"], x.attempts[-1]["inst"], x.t0, x.attempts[-1]["t1"] or 0,
            "/".join(str(y["status"] or y["err"]) + ("" if not isinstance(y["body"], dict) or "error" not in y["body"] else " " + str(y["body"]["error"])) for y in x.attempts))
            for x in sorted(others, key=lambda x: x.t0)[:30]) or "none"))
        off = a["w0"] - a["t0"]     # run seconds -> wall clock
        ev = [e for e in self.nemesis_events() or [] if t_read + off - 1.0 <= e["t_ms"] / 1000.0 <= a["w1"] + 0.5]
        out.append("nemesis: %s" % ("; ".join("%.3f s %s %s %s" % (e["t_ms"] / 1000.0 - off, e["ev"], e.get("target", ""), e.get("detail", "")) for e in ev) or "nothing"))
        lines, own = [], re.compile(r'sku ' + re.escape(s) + r'(?=[ ,"]|:[ "]|$)')
        try:
            with open(os.path.join(self.run.a.out, "logs", "inventoryd%d.log" % a["inst"]), errors="replace") as f:
                for x in f:
                    m = re.match(r'\{"ts":"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.(\d{3})Z"', x)
                    if not m:
                        continue
                    w = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")) + int(m.group(2)) / 1000.0
                    # this SKU's lines and those of no SKU (the names alias: x, x:1, ...)
                    if a["w0"] - 1.0 <= w <= a["w1"] + 1.0 and (own.search(x) or "sku " not in x):
                        lines.append("%.3f s %s" % (w - off, x.strip()[:300]))
        except OSError as e:
            lines.append("(unreadable: %s)" % e)
        out.append("instance %s's log within 1 s: %s" % (a["inst"], " | ".join(lines[:20]) if lines else "no line"))
        return "\n      " + "\n      ".join(out)

    @staticmethod
    def records_of(snap, n):
        """{order id: (segment, record or None)} of a snapshot's n segments: the orders (a
        multi-segment order's part records, with part_of, are check_multi's)."""
        records = {}
        for k in range(n):
            for oid, raw in snap["segs"][k]["orders"].items():
                try:
                    rec = json.loads(raw)
                except ValueError:
                    rec = None
                if isinstance(rec, dict) and "part_of" in rec:
                    continue
                records[oid] = (k, rec)
        return records

    @staticmethod
    def traced(trace, snap, k, oid, rec):
        """The logical order that placed record oid of segment k, or None."""
        L = trace["oid"].get(oid)
        if L is None:
            key = next((kk for kk, o in snap["segs"][k].get("idem", {}).items() if o == oid), None)
            L = trace["key"].get(key) if key else None
        return L or trace["tag"].get(rec.get("user_id"))

    def check_orders(self, cp, s, snap, ops, layout, trace, cancels_of):
        if layout is None:
            return
        P, p_ack, n, v = layout
        records = self.records_of(snap, n)
        by_tag = defaultdict(list)      # lop id -> its records
        for oid, (k, rec) in records.items():
            self.examined["order-records"] += 1
            if not isinstance(rec, dict):
                continue    # verify.sh reports malformed records
            tag = rec.get("user_id")
            L = self.traced(trace, snap, k, oid, rec)
            m = ORDER_ID.match(oid)
            if L is None:
                self.fail("order-records", oid, "checkpoint %s: %s segment %d holds order %s for user %r, which no request of this test made (no answer named it, no Idempotency-Key entry of the segment does, and no keyless order carried that user)" % (cp, s, k, oid, tag), [])
                continue
            by_tag[L.id].append(oid)
            bad = []
            if tag != L.args["user_id"]:
                bad.append("user %r, asked %r" % (tag, L.args["user_id"]))
            if L.sku != s or rec.get("sku") != s:
                bad.append("SKU %r/%r" % (rec.get("sku"), L.sku))
            if rec.get("quantity") != L.args["quantity"]:
                bad.append("quantity %r, asked %d" % (rec.get("quantity"), L.args["quantity"]))
            if rec.get("segment") != k or not m or int(m.group(1)) != k:
                bad.append("segment %r in segment %d" % (rec.get("segment"), k))
            if rec.get("status") not in LIVE + ENDED:
                bad.append("status %r" % rec.get("status"))
            elif (rec.get("status") == "reserved") != isinstance(rec.get("expires_at"), str) and rec.get("status") in LIVE:
                bad.append("status %r %s expires_at" % (rec.get("status"), "without" if rec.get("status") == "reserved" else "with"))
            if bad:
                self.fail("order-records", oid, "checkpoint %s: order %s (lop %d) does not match its request: %s" % (cp, oid, L.id, ", ".join(bad)), L.seqs())
            if all(a["eff"] == NONE for a in L.attempts):
                self.fail("order-records", oid, "checkpoint %s: order %s exists, but every attempt of its request (lop %d) was refused or never sent: %s" % (
                    cp, oid, L.id, [a["status"] or a["err"] for a in L.attempts]), L.seqs())
            if rec.get("status") == "cancelled":
                self.examined["cancels"] += 1
                if not any(a["sent"] for c in cancels_of.get(oid, []) for a in c.attempts):
                    self.fail("cancels", oid, "checkpoint %s: order %s (lop %d) is cancelled, but no cancel of it was sent" % (cp, oid, L.id), L.seqs())
        lop_by_id = {L.id: L for L in ops["order"]}
        for lid, oids in by_tag.items():
            self.examined["idempotency"] += 1
            if len(oids) > 1 and lid in lop_by_id:
                L = lop_by_id[lid]
                self.fail("idempotency", tag, "checkpoint %s: %s logical order lop %d (%s, quantity %d; answers %s) has %d order records: %s" % (
                    cp, "keyed" if L.key else "keyless", L.id, "Idempotency-Key " + L.key if L.key else "no key", L.args["quantity"],
                    [a["status"] or a["err"] for a in L.attempts], len(oids), sorted(oids)), L.seqs())
        # Cancels: an acknowledged cancel's order is cancelled; a 404's order does not come back.
        for oid, cl in cancels_of.items():
            if oid not in records or cl[0].sku != s:
                continue
            rec = records[oid][1] or {}
            for c in cl:
                done = any(a["status"] == 200 or (a["status"] == 409 and isinstance(a["body"], dict) and a["body"].get("error") == "already_cancelled")
                           for a in c.attempts)
                if done and rec.get("status") != "cancelled":
                    self.fail("cancels", oid, "checkpoint %s: cancel lop %d of %s was answered %s, yet the record's status is %r" % (
                        cp, c.id, oid, [a["status"] for a in c.attempts], rec.get("status")), c.seqs())
                if any(a["status"] == 404 for a in c.attempts):
                    self.fail("cancels", oid, "checkpoint %s: cancel lop %d of %s got 404 unknown_order, yet the order exists in the current layout" % (
                        cp, c.id, oid), c.seqs())
        if p_ack is None:
            return
        # Orders that began after the current PUT was acknowledged can only live in this layout.
        units = {True: [0, 0, 0], False: [0, 0, 0]}     # keyed? -> [acked units, unknown units, placed units]
        for L in ops["order"]:
            if L.t0 <= p_ack:
                continue
            keyed = L.key is not None
            q = L.args["quantity"]
            placed = len(by_tag.get(L.id, []))
            units[keyed][2] += placed * q
            if L.final == "acked":
                units[keyed][0] += q
                self.examined["acked-orders"] += 1
                body = L.ack["body"] if isinstance(L.ack["body"], dict) else {}
                oid = body.get("order_id")
                if oid not in records:
                    # Other PUTs/DELETEs of the SKU that may have run while or after it ran: the
                    # version is still current, so any of them touching it is a layout fault too.
                    near = [x.id for x in ops["put"] + ops["delete"] if x is not P and any(
                        a["eff"] == MAYBE or (a["eff"] == YES and a["t1"] >= L.t0) for a in x.attempts)]
                    self.fail("acked-orders", oid, "checkpoint %s: order %s (lop %d, %s, quantity %d, answered %d at %.3f s) is missing from %s version %d, which PUT lop %d set up (acknowledged at %.3f s, before the order began)%s" % (
                        cp, oid, L.id, "key " + L.key if keyed else "no key", q, L.ack["status"], L.ack["t1"], s, v, P.id, p_ack,
                        "; PUT/DELETE lops that may have run meanwhile or later: %s" % near[:6] if near else ""), P.seqs()[-1:] + L.seqs())
            elif L.final == "unknown":
                units[keyed][1] += q
        for keyed, (acked, unknown, placed) in units.items():
            self.examined["units"] += 1
            if not acked <= placed <= acked + unknown:
                self.fail("units", (s, v, keyed), "checkpoint %s: %s version %d, %s orders begun after PUT lop %d was acknowledged: %d units placed in Redis, outside [%d acknowledged, %d = + %d of unknown outcome]" % (
                    cp, s, v, "keyed" if keyed else "keyless", P.id, placed, acked, acked + unknown, unknown), P.seqs()[-1:])

    # -- the order log and the sink (issue 29, "The net") --
    def sink_metrics(self):
        """The sink's /metrics (unlabelled lines: name -> float), or None when it does not answer."""
        try:
            with open(os.path.join(self.run.a.ctl, "sink_port")) as f:
                port = int(f.read().strip())
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=3)
            c.request("GET", "/metrics")
            text = c.getresponse().read().decode(errors="replace")
            c.close()
        except (OSError, ValueError, http.client.HTTPException):
            return None
        out = {}
        for line in text.splitlines():
            f = line.split()
            if len(f) == 2 and not line.startswith("#"):
                try:
                    out[f[0]] = float(f[1])
                except ValueError:
                    pass
        return out

    def db_skus(self):
        """The SKUs the check "database" reconciles: chaos's own, and the carts' and the limit
        group's (issue 33: a cart's parts are rows of order_items in each of its SKUs)."""
        return self.run.skus + (self.run.shop.skus if self.run.shop else [])

    def sink_behind(self, rds):
        """What the sink has still to do ("" when it has caught up): its gauges, then in Redis
        every stream of every segment below max(segments, hwm, lhwm) and the unlogged counts."""
        m = self.sink_metrics()
        if m is None:
            return "the sink's /metrics does not answer"
        for g in ("inventory_sink_lag_seconds", "inventory_sink_pending"):
            if m.get(g) != 0:
                return "%s %s" % (g, m.get(g))
        for s in self.db_skus():
            meta = pairs(rds.cmd("HGETALL", KEYS.sku(s, "meta")))
            n = max(as_int(meta.get(f)) or 0 for f in ("segments", "hwm", "lhwm"))
            for k in range(n):
                u = as_int(rds.cmd("HGET", KEYS.seg(s, k, "cnt"), "u"))
                if u:
                    return "%s segment %d: %d change(s) not logged, not yet backfilled (cnt u)" % (s, k, u)
                st = rds.cmd("EVAL", STREAM_LUA, 1, KEYS.seg(s, k, "log"))
                if isinstance(st, RedisError):
                    return "%s segment %d: %s" % (s, k, st)
                if st[0] == 0 or st[1] == 0:
                    continue
                if not st[5]:
                    return "%s segment %d: %d log entries and no group sink" % (s, k, st[1])
                if st[2] != 0 or st[3] != st[4]:
                    return "%s segment %d%s: %d pending, last delivered %s of %s" % (
                        s, k, " (dropped: segments %s)" % meta.get("segments") if k >= (as_int(meta.get("segments")) or 0) else "",
                        st[2], st[3], st[4])
        return ""

    def reset_ends(self):
        """{SKU: when (wall clock) its last PUT or DELETE that may have run could still have
        reset its orders}: the end of its last attempt that may have run, + RESET_SLACK_S when
        that attempt's outcome is unknown."""
        out = defaultdict(float)
        for l in list(self.run.lops):
            if l.op not in ("put", "delete"):
                continue
            for x in l.attempts:
                if x["eff"] != NONE:
                    out[l.sku] = max(out[l.sku], x["w1"] + (RESET_SLACK_S if x["eff"] == MAYBE else 0))
        return out

    def sink_down_resets(self):
        """(shrinking PUTs, DELETEs) acknowledged while the sink was down (sink-kill9 to back)."""
        spans, open_ = [], None
        for e in self.nemesis_events() or []:
            if e["ev"] == "sink-kill9" or (e["ev"] == "crash" and e.get("target") == "sink"):
                open_ = e["t_ms"] / 1000.0
            elif e["ev"] == "back" and e.get("target") == "sink" and open_ is not None:
                spans.append((open_, e["t_ms"] / 1000.0))
                open_ = None
        last, shrink, dels = {}, 0, 0
        for l in sorted(self.run.lops, key=lambda l: l.id):
            if l.op not in ("put", "delete"):
                continue
            inside = l.ack is not None and any(x <= l.ack["w1"] and l.ack["w0"] <= y for x, y in spans)
            if l.op == "delete":
                dels += inside
            else:
                segs = l.args.get("segments")
                if inside and isinstance(segs, int) and last.get(l.sku, 0) > segs:
                    shrink += 1
                if l.ack is not None and isinstance(segs, int):
                    last[l.sku] = segs
        return shrink, dels

    def backfilled_rows(self, sku):
        """{order id: created_at (epoch s)} of the SKU's rows the backfill wrote (no
        order_events row), read with the root user of chaos.sh's MariaDB."""
        q = ("SET time_zone = '+00:00'; SELECT o.order_id, UNIX_TIMESTAMP(o.created_at) FROM shop.orders o "
             "WHERE o.sku = '%s' AND NOT EXISTS (SELECT 1 FROM shop.order_events e WHERE e.order_id = o.order_id)" % sku)
        r = subprocess.run(["mariadb", "--no-defaults", "--connect-timeout=5", "-h", "127.0.0.1", "-P", str(self.run.a.db_port),
                            "-u", "root", "-N", "-B", "-e", q], capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise Infra("cannot read the database: %s" % r.stderr.strip()[-300:])
        return {f[0]: float(f[1]) for f in (x.split("\t") for x in r.stdout.splitlines()) if len(f) == 2}

    def database(self):
        """The check "database": once the sink caught up, reconcile of every SKU exits 0."""
        run, a = self.run, self.run.a
        t0 = now()
        why = "not read"
        while now() - t0 < SINK_CATCHUP_S:
            try:
                rds = run.redis(10.0)
                try:
                    why = self.sink_behind(rds)
                finally:
                    rds.close()
            except (OSError, ConnectionError) as e:
                why = "Redis: %s" % e
            if not why:
                break
            time.sleep(0.25)
        self.catchup_s = now() - t0
        self.examined["database"] += 1
        if why:
            self.fail("database", "catch-up", "the sink did not catch up within %d s of the end: %s" % (SINK_CATCHUP_S, why), [])
        m = self.sink_metrics() or {}
        shrink, dels = self.sink_down_resets()
        self.db_notes = ["- the sink caught up %.1f s after the final checkpoint%s; /metrics: %s" % (
            self.catchup_s, "" if not why else " (NOT: %s)" % why,
            ", ".join("%s %g" % (k[len("inventory_sink_"):], m[k]) for k in (
                "inventory_sink_events_written_total", "inventory_sink_unlogged_total", "inventory_sink_backfilled_total",
                "inventory_sink_order_log_missing") if k in m)),
            "- acknowledged while the sink was down: %d PUT(s) that shrank the layout, %d DELETE(s)" % (shrink, dels)]
        # An entry the sink cannot read is acknowledged without a row (sink_malformed): the
        # service must never write one.
        try:
            with open(os.path.join(a.out, "logs", "sink.log"), errors="replace") as f:
                bad_entries = [x.strip() for x in f if '"sink_malformed"' in x]
        except OSError:
            bad_entries = []
        self.examined["database"] += 1
        if bad_entries:
            self.fail("database", "malformed", "the sink skipped %d log entr%s it could not read (logs/sink.log): %s" % (
                len(bad_entries), "y" if len(bad_entries) == 1 else "ies", "; ".join(bad_entries[:3])), [])
        ends = self.reset_ends()
        excused_total = 0
        for s in self.db_skus():
            self.examined["database"] += 1
            r = subprocess.run([a.sink_bin, "reconcile", "--redis", a.sink_redis, "--sku", s],
                               capture_output=True, text=True, timeout=120)
            with open(os.path.join(a.out, "reconcile-%s.txt" % s.replace(":", "_")), "w") as f:
                f.write(r.stdout + r.stderr)
            if r.returncode == 0:
                continue
            if r.returncode != 1:
                self.fail("database", s, "reconcile --sku %s exited %d: %s" % (s, r.returncode, r.stderr.strip()[-300:]), [])
                continue
            rows = self.backfilled_rows(s)
            excused, bad = Counter(), []
            units, sold = [], []
            for line in r.stdout.splitlines():
                f = line.split()
                if not f:
                    continue
                if f[0] == "missing_in_redis" and len(f) >= 4 and f[1] in rows and rows[f[1]] <= ends.get(s, 0.0):
                    kv = dict(x.split("=", 1) for x in f[2:] if "=" in x)
                    excused[kv.get("status")] += as_int(kv.get("quantity")) or 0
                    excused_total += 1
                elif f[0] == "units":
                    units.append(f)
                elif f[0] == "sold":
                    sold.append(f)
                else:
                    bad.append(line)
            for f in units:
                kv = dict(x.split("=", 1) for x in f[2:] if "=" in x)
                if (as_int(kv.get("db")) or 0) - excused[f[1]] != as_int(kv.get("redis")):
                    bad.append(" ".join(f) + " (%d excused)" % excused[f[1]])
            # units sold per segment (order_items, issue 33): the excused rows' live units are
            # the database's surplus, over the segments together (a line does not name the rows)
            live = sum(excused[st] for st in ("reserved", "created", "confirmed"))
            surplus = 0
            for f in sold:
                kv = dict(x.split("=", 1) for x in f[1:] if "=" in x)
                d = (as_int(kv.get("db")) or 0) - (as_int(kv.get("redis")) or 0)
                surplus += d
                if d < 0:
                    bad.append(" ".join(f))
            if surplus != live:
                bad.extend(" ".join(f) + " (%d live units excused)" % live for f in sold)
            if bad:
                # The losses first: an order Redis has and the database lacks, a log not drained.
                order = ("missing_in_db", "log_unread", "log_unacknowledged", "status")
                bad.sort(key=lambda x: order.index(x.split()[0]) if x.split()[0] in order else len(order))
                kinds = Counter(x.split()[0] for x in bad)
                self.fail("database", s, "reconcile --sku %s exited 1 (reconcile-%s.txt): %d difference(s) not excused (%s): %s" % (
                    s, s.replace(":", "_"), len(bad), ", ".join("%s %d" % kv for kv in kinds.most_common()), "; ".join(bad[:6])), [])
        self.db_notes.append("- reconcile: %d SKU(s), %d missing_in_redis row(s) excused (backfilled, created before a later reset of their SKU)" % (
            len(self.db_skus()), excused_total))
        log("database: the sink caught up in %.1f s; reconcile of %d SKU(s): %d violation(s)" % (
            self.catchup_s, len(run.skus), len(self.viol["database"])))

    def nemesis_events(self):
        """nemesis.jsonl's events (chaos.sh's and the damager's), or None when unreadable."""
        try:
            with open(os.path.join(self.run.a.out, "nemesis.jsonl")) as f:
                return [json.loads(x) for x in f if x.strip()]
        except (OSError, ValueError):
            return None

    def fault_spans(self, redis_only, after_back):
        """[(t0, t1)] in wall-clock seconds of the nemesis's faults (the damager's excepted):
        from a fault to after_back s after its target is back (a crash: 5 s, restarted at
        once and reported under "processes"); redis_only: only Redis's (a kill -9 of the one
        redis-server, a cluster master's fault)."""
        spans, open_ = [], {}
        for e in self.nemesis_events() or []:
            t, tgt = e["t_ms"] / 1000.0, e.get("target", "")
            if redis_only and not tgt.startswith("redis"):
                continue
            if e["ev"] == "crash":
                spans.append((t, t + 5.0))
            elif e["ev"] in FAULTS and e["ev"] not in NO_EXCUSE:
                open_.setdefault(tgt, t)
            elif e["ev"] == "back" and tgt in open_:
                spans.append((open_.pop(tgt), t + after_back))
        return spans + [(t, float("inf")) for t in open_.values()]

    def redis_outages(self):
        """When (part of) Redis was down: the sweeper cannot expire what it cannot reach, so
        the expiry bound runs from the end of an outage that overlaps it."""
        return self.fault_spans(True, 0.0)

    @staticmethod
    def expiry_deadline(exp, outages):
        """When a hold due at exp (wall s) must have ended: exp + EXPIRY_BOUND_S, or that long
        after the end of an outage that overlaps [exp, deadline] (Redis down, or a counter of
        the hold's segment damaged: the expiry refuses to write on a damaged segment)."""
        d = exp + EXPIRY_BOUND_S
        moved = True
        while moved:
            moved = False
            for a, b in outages:
                if a < d and b > exp and b + EXPIRY_BOUND_S > d:
                    d, moved = b + EXPIRY_BOUND_S, True
        return d

    def check_extends(self, cp, s, snap, layout, trace, extends_of):
        """Issue 33 at a checkpoint: each hold's record against its extensions' answers (the
        "extends" row of CHECKS)."""
        if layout is None:
            return
        _, _, n, _ = layout
        records = self.records_of(snap, n)
        for oid, (k, rec) in records.items():
            if not isinstance(rec, dict):
                continue
            xs = [x for x in extends_of.get(oid, []) if x.sku == s]
            got = rec.get("extensions", 0)
            if not xs and not got:
                continue
            self.examined["extends"] += 1
            st, e = rec.get("status"), parse_iso(rec.get("expires_at"))
            L = self.traced(trace, snap, k, oid, rec)
            b201 = L.ack["body"] if L is not None and L.ack and isinstance(L.ack["body"], dict) else {}
            e0 = parse_iso(b201.get("expires_at")) if b201.get("order_id") == oid else None
            may = sum(1 for x in xs for a in x.attempts if a["eff"] != NONE)
            oks = [a for x in xs for a in x.attempts if a["status"] == 200]
            bad = []
            if not isinstance(got, int) or got < 0 or got > min(may, EXT_MAX):
                bad.append("the record has extensions %r, but %d extension(s) may have run (most %d)" % (got, may, EXT_MAX))
            if e is not None and e0 is not None and not (e0 - 0.002 <= e <= e0 + EXT_S * got + 0.002):
                bad.append("its expires_at %s is not its 201's %s + at most %d s per extension (%r)" % (rec.get("expires_at"), b201.get("expires_at"), EXT_S, got))
            for a in oks:
                b = a["body"] if isinstance(a["body"], dict) else {}
                be = parse_iso(b.get("expires_at"))
                if b.get("order_id") != oid or b.get("status") != "reserved" or be is None or (e0 is not None and be <= e0) or not isinstance(b.get("extensions"), int) or b["extensions"] < 1:
                    bad.append("a 200 that is not the extended order: %s" % b)
                    continue
                if isinstance(got, int) and got < b["extensions"]:
                    bad.append("a 200 said extensions %d, the record has %r" % (b["extensions"], got))
                if e is not None and e < be - 0.002:
                    bad.append("a 200 said expires_at %s, the record has %s" % (b.get("expires_at"), rec.get("expires_at")))
                if st == "expired" and e is not None and e < be - 0.002:
                    bad.append("expired at %s, before the 200's expires_at %s" % (rec.get("expires_at"), b.get("expires_at")))
            for x in xs:
                for a in x.attempts:
                    body = a["body"] if isinstance(a["body"], dict) else {}
                    err = body.get("error") if a["status"] in (400, 404, 409) else None
                    want = {"reservation_expired": ("expired",), "already_cancelled": ("cancelled",),
                            "not_reserved": ("created", "confirmed", "cancelled")}.get(err)
                    if want is not None and st not in want:
                        bad.append("lop %d answered 409 %s, yet the record is %r" % (x.id, err, st))
                    elif err == "extend_limit" and (not isinstance(got, int) or got < EXT_MAX):
                        bad.append("lop %d answered 409 extend_limit, yet the record has extensions %r (most %d)" % (x.id, got, EXT_MAX))
                    elif a["status"] == 400 and x.args.get("seconds") in (None, 1, EXT_S):
                        bad.append("lop %d (seconds %r) answered 400: %s" % (x.id, x.args.get("seconds"), body))
                    elif a["status"] == 200 and x.args.get("seconds") not in (None, 1, EXT_S):
                        bad.append("lop %d (seconds %r) answered 200: a bad number extended it" % (x.id, x.args.get("seconds")))
                    elif a["status"] in (404, 409) and err not in ("reservation_expired", "already_cancelled", "not_reserved", "extend_limit"):
                        bad.append("lop %d answered %d %s (the order is in the layout)" % (x.id, a["status"], err))
            if got and not may:
                bad.append("extended %r time(s), but no extension of it that may have run was sent" % got)
            if bad:
                self.fail("extends", (oid, "x"), "checkpoint %s: %s order %s (status %s): %s" % (cp, s, oid, st, "; ".join(bad[:3])),
                          [a["seq"] for x in xs for a in x.attempts][-4:] + (L.seqs()[-1:] if L else []))

    def check_lifecycle(self, cp, s, snap, ops, layout, trace, cancels_of, confirms_of, outages):
        """SPEC §11 at a checkpoint: holds end in time and the due set is exactly the holds;
        confirms and cancels against the records; no user over the limit, and every live order
        of a user in the user's entries."""
        if layout is None:
            return
        _, _, n, v = layout
        records = self.records_of(snap, n)
        wall = snap["wall"]
        off = time.time() - now()
        dmg = defaultdict(list)         # segment -> its damages, in wall-clock seconds
        for d in self.run.damages:
            if d["sku"] == s and d["result"] != "changed meanwhile":
                dmg[d["k"]].append((d["t0"] + off, (d["t1"] if d["t1"] is not None else now()) + off))
        # Holds: none still reserved past its bound; the due set = the reserved records.
        for k in range(n):
            due = snap["segs"][k].get("due", {})
            held = {oid for oid, (kk, rec) in records.items() if kk == k and isinstance(rec, dict) and rec.get("status") == "reserved"}
            self.examined["holds"] += 1
            for oid in sorted(set(due) ^ held)[:3]:
                self.fail("holds", (s, "due", oid), "checkpoint %s: %s segment %d: %s" % (
                    cp, s, k, "the due set names %s, not a reserved record" % oid if oid in due else "hold %s is not in the due set (it would never expire)" % oid), [])
            for oid in held & set(due):
                rec = records[oid][1]
                e = parse_iso(rec.get("expires_at"))
                if e is None or abs(float(due[oid]) / 1000.0 - e) > 0.002:
                    self.fail("holds", (s, "score", oid), "checkpoint %s: %s segment %d: hold %s expires_at %r, due-set score %s" % (
                        cp, s, k, oid, rec.get("expires_at"), due[oid]), [])
        L_of = {}
        for oid, (k, rec) in records.items():
            if isinstance(rec, dict):
                L_of[oid] = self.traced(trace, snap, k, oid, rec)
        for oid, (k, rec) in records.items():
            if not isinstance(rec, dict):
                continue
            st, L = rec.get("status"), L_of.get(oid)
            seqs = L.seqs() if L else []
            e = parse_iso(rec.get("expires_at"))
            if st == "reserved" and e is not None:
                self.examined["holds"] += 1
                d = self.expiry_deadline(e, outages + dmg[k])
                if wall > d:
                    self.fail("holds", (s, "late", oid), "checkpoint %s: %s hold %s (lop %s, user %s, quantity %s) is still reserved %.2f s after its expires_at %s (bound %.1f s%s)" % (
                        cp, s, oid, L.id if L else "?", rec.get("user_id"), rec.get("quantity"), wall - e, rec.get("expires_at"), EXPIRY_BOUND_S,
                        "; an outage (Redis, or a damaged counter of segment %d) overlapped: bound moved to %.2f s" % (k, d - e) if d > e + EXPIRY_BOUND_S else ""), seqs)
            if st == "expired":
                self.examined["holds"] += 1
                if e is None or e > wall + CLOCK_SLACK_S:
                    self.fail("holds", (s, "early", oid), "checkpoint %s: %s order %s is expired, but its expires_at %r %s" % (
                        cp, s, oid, rec.get("expires_at"), "is missing (never a hold)" if e is None else "has not come yet"), seqs)
            # Confirms against the record.
            for c in confirms_of.get(oid, []):
                if c.sku != s:
                    continue
                self.examined["confirms"] += 1
                for a in c.attempts:
                    body = a["body"] if isinstance(a["body"], dict) else {}
                    err = body.get("error") if a["status"] == 409 else None
                    want = None
                    if a["status"] == 200:
                        later = [x.id for x in cancels_of.get(oid, []) if x.t1 > a["t0"] and any(y["eff"] != NONE for y in x.attempts)]
                        if not later:
                            want = ("confirmed",)
                    elif err == "reservation_expired":
                        want = ("expired",)
                    elif err == "already_cancelled":
                        want = ("cancelled",)
                    elif err == "not_reserved":
                        want = ("created", "cancelled")
                    elif a["status"] == 404:
                        want = ()
                    if want is not None and st not in want:
                        self.fail("confirms", (oid, c.id), "checkpoint %s: confirm lop %d (%s) of %s was answered %s%s, yet the record's status is %r%s" % (
                            cp, c.id, c.args["mode"], oid, a["status"], " " + err if err else "", st,
                            " (404: the order exists in the current layout)" if a["status"] == 404 else ""), c.seqs() + seqs[-2:])
                        break
            if st == "confirmed":
                self.examined["confirms"] += 1
                if not any(a["sent"] and a["eff"] != NONE for c in confirms_of.get(oid, []) for a in c.attempts):
                    self.fail("confirms", (oid, "unasked"), "checkpoint %s: %s order %s is confirmed, but no confirm of it that may have run was sent (%s)" % (
                        cp, s, oid, [[a["status"] for a in c.attempts] for c in confirms_of.get(oid, [])]), seqs)
            for c in cancels_of.get(oid, []):
                if c.sku == s and any(a["status"] == 409 and isinstance(a["body"], dict) and a["body"].get("error") == "reservation_expired" for a in c.attempts) and st != "expired":
                    self.fail("confirms", (oid, c.id), "checkpoint %s: cancel lop %d of %s was answered 409 reservation_expired, yet the record's status is %r" % (
                        cp, c.id, oid, st), c.seqs() + seqs[-2:])
        # Limits: the highest limit a PUT or PATCH that may have run sent (limits only rise).
        sent = [l.args.get("limit_per_user", 0) for l in ops["put"] + ops["patch"] if any(a["eff"] != NONE for a in l.attempts)]
        limit = max(sent) if sent else 0
        mlimit = as_int(snap["meta"].get("limit")) or 0
        if mlimit <= 0:
            return
        self.examined["limits"] += 1
        if mlimit > limit:
            self.fail("limits", (s, "meta", mlimit), "checkpoint %s: %s meta limit %d, above every limit sent (%d)" % (cp, s, mlimit, limit), [])
        # A limit added by PATCH counts the orders begun once it holds for good (limit_from):
        # the ones before were placed with no limit, so they are neither counted nor recorded.
        got = self.limit_from(s, ops)
        since, since_why = got if got is not None else (None, None)
        units, live = defaultdict(int), defaultdict(list)
        for oid, (k, rec) in records.items():
            if isinstance(rec, dict) and rec.get("status") in LIVE and isinstance(rec.get("user_id"), str) and isinstance(rec.get("quantity"), int):
                if since is not None and (L_of.get(oid) is None or L_of[oid].t0 <= since):
                    continue
                units[rec["user_id"]] += rec["quantity"]
                live[rec["user_id"]].append(oid)

        def judged_by(oids):
            """What the verdict on these orders rests on: limit_from and the rule changes."""
            if since is None:
                return ""
            t0s = [L_of[o].t0 for o in oids if L_of.get(o)]
            adds = [l.t0 for l in self.run.limit_adds[s] if l.attempts]
            # those that may have been applied once the first add was sent, up to the orders
            lo = min(adds) if adds else (min(t0s) - STALE_RULE_S if t0s else 0.0)
            return "; orders counted from %.3f s: %s; the SKU's PUT/PATCH ops (limit, t0..t1, status/effect per attempt): %s" % (
                since, since_why, self.rule_ops_text(ops, lo, max(t0s) if t0s else float("inf")))
        for u, q in units.items():
            self.examined["limits"] += 1
            if q > limit:
                self.fail("limits", (s, u, "over"), "checkpoint %s: %s user %s holds %d units in %d live orders (%s), over the limit %d (meta %d)%s" % (
                    cp, s, u, q, len(live[u]), ", ".join("%s %s ×%s" % (o, records[o][1]["status"], records[o][1]["quantity"]) for o in sorted(live[u])[:8]), limit, mlimit,
                    judged_by(live[u])),
                    [x for o in sorted(live[u])[:4] if L_of.get(o) for x in L_of[o].seqs()[-1:]])
            try:
                ent = json.loads(snap["users"].get(u) or "{}")
            except ValueError:
                ent = None
            if not isinstance(ent, dict):
                self.fail("limits", (s, u, "entries"), "checkpoint %s: %s user %s: entries unreadable: %r" % (cp, s, u, snap["users"].get(u)), [])
                continue
            missing = [o for o in live[u] if o.split("-", 1)[0] not in ent]
            if missing:
                self.fail("limits", (s, u, "missing", missing[0]), "checkpoint %s: %s user %s: live order(s) %s not in the user's entries %s (the count would let the user past the limit)%s" % (
                    cp, s, u, missing[:4], sorted(ent)[:8], judged_by(missing)), [x for o in missing[:3] if L_of.get(o) for x in L_of[o].seqs()])
        if cp != "final":
            return
        # The give-backs drained (wait_out_holds): an ended order no longer counts for its user.
        ended_of = defaultdict(list)
        for o, (k, rec) in records.items():
            if isinstance(rec, dict) and rec.get("status") in ENDED and isinstance(rec.get("user_id"), str):
                ended_of[rec["user_id"]].append(o)
        for u, raw in snap["users"].items():
            try:
                ent = json.loads(raw)
            except ValueError:
                continue        # reported above when the user has live orders
            if not isinstance(ent, dict):
                continue
            self.examined["limits"] += 1
            ended = [o for o in ended_of.get(u, []) if o.split("-", 1)[0] in ent]
            if ended:
                self.fail("limits", (s, u, "given", ended[0]), "checkpoint %s: %s user %s: ended order(s) %s still in the user's entries, the give sets drained (their units never given back to the user's count)" % (
                    cp, s, u, ["%s %s" % (o, records[o][1]["status"]) for o in ended[:4]]), [x for o in ended[:3] if L_of.get(o) for x in L_of[o].seqs()])

    # -- at the end: the answers themselves --
    def status_problems(self, body, sku, put_segments, multi_units=0):
        errs = []
        need = ("sku", "version", "stock_total", "remaining", "sold", "orders", "segments")
        if not isinstance(body, dict) or any(f not in body for f in need):
            return ["not a status object"]
        nums = {f: body[f] for f in ("version", "stock_total", "remaining", "sold", "orders")}
        if any(not isinstance(x, int) or isinstance(x, bool) for x in nums.values()) or not isinstance(body["segments"], list):
            return ["fields of the wrong type"]
        if body["sku"] != sku:
            errs.append("sku %r" % body["sku"])
        if any(x < 0 for x in nums.values()):
            errs.append("a negative number")
        if "reserved" in body and (not isinstance(body["reserved"], int) or not 0 <= body["reserved"] <= body["sold"]):
            errs.append("reserved %r of sold %d" % (body["reserved"], body["sold"]))
        if body["sold"] != body["stock_total"] - body["remaining"]:
            errs.append("sold %d != stock_total %d - remaining %d" % (body["sold"], body["stock_total"], body["remaining"]))
        segs = body["segments"]
        try:
            rem = sum(x["remaining"] for x in segs)
            sold = sum(x["sold"] for x in segs)
            idx = [x["index"] for x in segs]
            if any(x["remaining"] < 0 or x["sold"] < 0 for x in segs):
                errs.append("a segment below 0")
        except (TypeError, KeyError):
            return errs + ["malformed segments"]
        if rem != body["remaining"]:
            errs.append("remaining %d != Σ segments %d" % (body["remaining"], rem))
        if sold != body["sold"]:
            errs.append("sold %d != Σ segments %d" % (body["sold"], sold))
        if idx != list(range(len(segs))):
            errs.append("segment indexes %s" % idx[:6])
        # A multi-segment order's parts are sold before its primary (the order record) exists,
        # for a WAIT at least under --redis-replica-acks, and until a heal when it was cut off:
        # multi_units, the units of the orders that may be such an order near the answer, may be
        # sold with no order counted yet.
        if not body["orders"] <= body["sold"] <= self.run.max_qty * body["orders"] + multi_units:
            errs.append("orders %d vs sold %d (each order is 1..%d units; %d units of orders that may be multi-segment near it)" % (
                body["orders"], body["sold"], self.run.max_qty, multi_units))
        if len(segs) not in put_segments:
            errs.append("%d segments: no PUT of %s sent before it had that many (%s)" % (len(segs), sku, sorted(put_segments)[:10]))
        return errs

    def history_checks(self):
        run = self.run
        self.crashes()
        self.damage_checks()
        lops = list(run.lops)
        self.rule_ops = defaultdict(list)
        for l in lops:
            if l.op in ("put", "patch", "delete") and l.attempts:
                self.rule_ops[l.sku].append(l)
        self.rules_in_force(lops)
        self.confirm_answers(lops)
        self.availability(lops)
        self.insufficient_checks(lops)
        puts = defaultdict(list)
        for l in lops:
            if l.op == "put":
                puts[l.sku].append(l)
        # PUT answers.
        acks = defaultdict(list)      # sku -> [(t1, version, segments, lop)]
        for s, pl in puts.items():
            seen = {}
            for p in pl:
                for a in p.attempts:
                    if a["eff"] != YES:
                        continue
                    self.examined["put-answers"] += 1
                    b = a["body"] if isinstance(a["body"], dict) else {}
                    if b.get("stock") != p.args["stock"] or b.get("segments") != p.args["segments"] or b.get("sku") != s or not isinstance(b.get("version"), int):
                        self.fail("put-answers", ("body", p.id), "PUT lop %d %s of %s was answered %s" % (p.id, p.args, s, b), [a["seq"]])
                        continue
                    v = b["version"]
                    if v in seen and seen[v] != p.id:
                        self.fail("put-answers", (s, "dupver", v), "%s: PUT lops %d and %d were both answered version %d" % (s, seen[v], p.id, v), [a["seq"]])
                    seen[v] = p.id
                    acks[s].append((a["t1"], v, p.args["segments"], p, a))
        for s, al in acks.items():
            for t1, v, _, p, a in al:
                for q in puts[s]:
                    if q.ack and q.t0 > t1 and isinstance((q.ack["body"] or {}).get("version"), int) and q.ack["body"]["version"] <= v:
                        self.fail("put-answers", (s, "order", q.id), "%s: PUT lop %d began after PUT lop %d was answered version %d, yet got version %d" % (
                            s, q.id, p.id, v, q.ack["body"]["version"]), [a["seq"], q.ack["seq"]])
        # Status answers (GET and restock bodies).
        ack_sorted = {s: sorted(al, key=lambda x: x[0]) for s, al in acks.items()}
        ack_t = {s: [x[0] for x in al] for s, al in ack_sorted.items()}
        ack_maxv = {}
        for s, al in ack_sorted.items():
            m, out = 0, []
            for x in al:
                m = max(m, x[1])
                out.append(m)
            ack_maxv[s] = out
        ver_segments = {s: {x[1]: x[2] for x in al} for s, al in acks.items()}
        sent_puts = {s: sorted((p.t0, p.args["segments"]) for p in pl) for s, pl in puts.items()}
        # the orders that may be served from several segments (2 units or more: at a sale's tail
        # segments hold one unit each), by SKU
        large_of = defaultdict(list)
        for l in lops:
            if l.op == "order" and l.attempts and l.args.get("quantity", 0) >= 2:
                large_of[l.sku].append(l)
        # Each SKU's large orders as (t0, t1 + MULTI_NEAR_S, quantity) sorted by t0, and the
        # longest order's length: a status answer's "near" sum looks only at the orders that
        # began in [its t0 - MULTI_NEAR_S - longest - 1 s, its t1] (every other one ended too
        # early or began too late), not at all of them for each answer (that scan was most of
        # the check's time: 19 of 21 s in a --short run).
        near_of, near_t0, near_len = {}, {}, {}
        for sku_, ol in large_of.items():
            rows = sorted((o.t0, o.t1 + MULTI_NEAR_S, o.args["quantity"]) for o in ol)
            near_of[sku_] = rows
            near_t0[sku_] = [r[0] for r in rows]
            near_len[sku_] = max(r[1] - MULTI_NEAR_S - r[0] for r in rows)

        def near_units(sku_, t0, t1):
            rows = near_of.get(sku_)
            if not rows:
                return 0
            ts = near_t0[sku_]
            lo = bisect.bisect_left(ts, t0 - MULTI_NEAR_S - near_len[sku_] - 1.0)
            hi = bisect.bisect_right(ts, t1)
            return sum(q for _, end, q in rows[lo:hi] if t0 <= end)

        for l in lops:
            if l.op not in ("status", "restock"):
                continue
            for a in l.attempts:
                if a["status"] != 200:
                    continue
                body = a["body"]
                self.examined["status-answers"] += 1
                segset = {n for t, n in sent_puts.get(l.sku, []) if t < a["t1"]}
                t_read = a["t0"] - (SNAPSHOT_STALE_S if l.args.get("snapshot") else 0.0)
                near = near_units(l.sku, t_read, a["t1"])
                errs = self.status_problems(body, l.sku, segset, near)
                if not errs:
                    v = body["version"]
                    since = a["t0"] - (SNAPSHOT_STALE_S if l.args.get("snapshot") else 0.0)
                    i = bisect.bisect_left(ack_t.get(l.sku, []), since)
                    if i > 0 and v < ack_maxv[l.sku][i - 1]:
                        errs.append("version %d, but version %d was acknowledged by a PUT before this request began" % (v, ack_maxv[l.sku][i - 1]))
                    n_v = ver_segments.get(l.sku, {}).get(v)
                    if n_v is not None and n_v != len(body["segments"]):
                        errs.append("version %d has %d segments, this answer %d" % (v, n_v, len(body["segments"])))
                if l.op == "restock" and isinstance(body, dict) and "added" in body:
                    ad = body["added"]
                    if not isinstance(ad, int) or not 0 <= ad <= l.args["quantity"]:
                        errs.append("added %r of a restock of %d" % (ad, l.args["quantity"]))
                if errs:
                    dmg = [d for d in run.damages if d["sku"] == l.sku and d["result"] == "damaged" and d["t0"] < a["t1"] and (d["t1"] or 1e9) > a["t0"]]
                    self.fail("status-answers", ("%s %s" % (l.op, a["seq"])), "%s answer of %s (lop %d, instance %d, %.3f..%.3f s%s): %s" % (
                        l.op, l.sku, l.id, a["inst"], a["t0"], a["t1"],
                        "; while segment %d's %s was damaged" % (dmg[0]["k"], dmg[0]["key"].rsplit(":", 1)[1] + (" " + dmg[0]["field"] if dmg[0]["field"] else "")) if dmg else "",
                        "; ".join(errs)), [a["seq"]])
        # Order and cancel answers.
        for l in lops:
            if l.op == "order" and l.ack:
                self.examined["order-answers"] += 1
                b = l.ack["body"] if isinstance(l.ack["body"], dict) else {}
                m = ORDER_ID.match(str(b.get("order_id")))
                bad = []
                if b.get("sku") != l.sku or b.get("quantity") != l.args["quantity"] or b.get("user_id") != l.args["user_id"]:
                    bad.append("sku/quantity/user_id %r/%r/%r" % (b.get("sku"), b.get("quantity"), b.get("user_id")))
                if not m or m.group(2) != l.sku or int(m.group(1)) != b.get("segment"):
                    bad.append("order_id %r vs segment %r" % (b.get("order_id"), b.get("segment")))
                if b.get("status") == "reserved":
                    e = parse_iso(b.get("expires_at"))
                    first = next((a for a in l.attempts if a["sent"]), l.ack)
                    if e is None or not first["w0"] + min(TTLS) - CLOCK_SLACK_S <= e <= l.ack["w1"] + max(TTLS) + CLOCK_SLACK_S:
                        self.fail("confirm-answers", ("exp", l.id), "order lop %d %s answered %s %s: expires_at %r is not %d–%d s after the request (%.3f..%.3f)" % (
                            l.id, l.args, l.ack["status"], b.get("status"), b.get("expires_at"), min(TTLS), max(TTLS), first["w0"], l.ack["w1"]), [l.ack["seq"]])
                if bad:
                    self.fail("order-answers", l.id, "order lop %d %s answered %d: %s" % (l.id, l.args, l.ack["status"], "; ".join(bad)), [l.ack["seq"]])
            if l.op == "cancel" and l.ack:
                self.examined["order-answers"] += 1
                b = l.ack["body"] if isinstance(l.ack["body"], dict) else {}
                if b.get("order_id") != l.args["order_id"] or b.get("status") != "cancelled":
                    self.fail("order-answers", l.id, "cancel lop %d of %s answered %s" % (l.id, l.args["order_id"], b), [l.ack["seq"]])

    def availability(self, lops):
        """The 5xx share of each SKU's orders, confirms and cancels outside every fault."""
        spans = self.fault_spans(False, 2.0)
        off = time.time() - now()
        dmg = defaultdict(list)
        for d in self.run.damages:
            dmg[d["sku"]].append((d["t0"] + off, (d["t1"] if d["t1"] is not None else now()) + off + 1.0))
        n, bad = Counter(), defaultdict(list)
        for l in lops:
            if l.op not in ("order", "confirm", "cancel", "extend"):
                continue
            for a in l.attempts:
                if a["status"] is None or any(x <= a["w1"] and a["w0"] <= y for x, y in spans + dmg[l.sku]):
                    continue
                n[(l.sku, l.op)] += 1
                if a["status"] >= 500:
                    bad[(l.sku, l.op)].append(a)
        for (sku, op), cnt in sorted(n.items()):
            self.examined["availability"] += 1
            b = bad.get((sku, op), [])
            if cnt >= AVAIL_MIN_ANSWERS and 100 * len(b) >= AVAIL_MAX_5XX_PCT * cnt:
                why = Counter(str((x["body"] or {}).get("message") if isinstance(x["body"], dict) else x["body"])[:120] for x in b)
                self.fail("availability", (sku, op), "%s: %d of %d %s answers outside every fault were 5xx (%.0f %%; rules: limit %s, TTL %s): %s" % (
                    sku, len(b), cnt, op, 100.0 * len(b) / cnt, self.run.rules[sku]["limit"] or "none", self.run.rules[sku]["ttl"] or "none",
                    "; ".join("%d× %s" % (v, k) for k, v in why.most_common(3))), [x["seq"] for x in b[:4]])

    def rules_report(self, lops):
        """SUMMARY.md's lines on SPEC §11: per SKU its rules, and its orders, confirms (by
        moment) and cancels by answer (a 201/200's status, a 4xx/5xx's error)."""
        def ans(a):
            b = a["body"] if isinstance(a["body"], dict) else {}
            if a["status"] is None:
                return "no-answer" if a["sent"] else "not-sent"
            return "%d %s" % (a["status"], b.get("status") if a["status"] < 300 else b.get("error", ""))
        out = ["## Sale rules (SPEC §11)", "",
               "Users: %s (keyed orders) and one of its own per keyless order. Holds waited out at the end: %.1f s." % (
                   ", ".join(self.run.users), self.run.checkpoints[-1].get("holds_waited_s", 0) if self.run.checkpoints else 0), "",
               "| SKU | rules at the end (sent) | orders | confirms by moment | cancels |", "|---|---|---|---|---|"]
        for sku in self.run.skus:
            r = self.run.rules[sku]
            o, c, x = Counter(), defaultdict(Counter), Counter()
            for l in lops:
                if l.sku != sku:
                    continue
                for a in l.attempts:
                    if l.op == "order":
                        o[ans(a)] += 1
                    elif l.op == "confirm":
                        c[l.args["mode"]][ans(a)] += 1
                    elif l.op == "cancel":
                        x[ans(a)] += 1
            fmt = lambda cn: ", ".join("%s: %d" % kv for kv in sorted(cn.items())) or "none"
            out.append("| %s | limit %s, TTL %s | %s | %s | %s |" % (
                sku, r["limit"] or "none", "%d s" % r["ttl"] if r["ttl"] else "none (orders final at once)", fmt(o),
                "; ".join("%s: %s" % (m, fmt(c[m])) for m in ("before", "race", "after", "nothold") if c[m]) or "none", fmt(x)))
        out.append("")
        return out

    def confirm_answers(self, lops):
        """Confirm and cancel answers against the hold's expires_at (this machine's clock is
        Redis's): a confirm answered 200 was first sent before it, a reservation_expired answer
        came after it. A repeat answers 200 too: a 200 after expires_at needs a confirm of the
        same order that may have run and was first sent before it."""
        # An extension (issue 33) that may have run moves a hold's expiry by at most EXT_S.
        ext_may = Counter(l.args["order_id"] for l in lops if l.op == "extend" for a in l.attempts if a["eff"] != NONE)
        early = set()           # orders with a confirm that may have run, first sent before expiry
        for l in lops:
            if l.op == "confirm" and l.args.get("expires_at") is not None:
                first = next((a for a in l.attempts if a["sent"]), None)
                latest = l.args["expires_at"] + EXT_S * ext_may[l.args["order_id"]]
                if first and first["w0"] <= latest + CLOCK_SLACK_S and any(a["eff"] != NONE for a in l.attempts):
                    early.add(l.args["order_id"])
        for l in lops:
            if l.op == "confirm":
                self.examined["confirm-answers"] += 1
                e, oid = l.args.get("expires_at"), l.args["order_id"]
                for a in l.attempts:
                    b = a["body"] if isinstance(a["body"], dict) else {}
                    bad = None
                    if a["status"] == 200:
                        if b.get("order_id") != oid or b.get("status") != "confirmed" or "expires_at" in b:
                            bad = "the body is not the confirmed order: %s" % b
                        elif e is None:
                            bad = "the order was answered \"created\" (never a hold), yet the confirm succeeded"
                        elif oid not in early:
                            bad = "confirmed, but this confirm and every other of the order that may have run were first sent after expires_at (this one %.3f s after)" % (
                                next(x for x in l.attempts if x["sent"])["w0"] - e)
                    elif a["status"] == 409 and b.get("error") == "reservation_expired" and e is not None and a["w1"] < e - CLOCK_SLACK_S:
                        bad = "reservation_expired answered %.3f s before expires_at" % (e - a["w1"])
                    elif a["status"] == 409 and b.get("error") not in ("reservation_expired", "already_cancelled", "not_reserved"):
                        bad = "409 %r" % b.get("error")
                    if bad:
                        self.fail("confirm-answers", ("confirm", l.id), "confirm lop %d (%s) of %s (expires_at %s): %s" % (
                            l.id, l.args["mode"], oid, "%.3f" % e if e else "none", bad), [a["seq"]])
                        break
        exp_of = {}
        for l in lops:
            if l.op == "order" and l.ack and isinstance(l.ack["body"], dict) and l.ack["body"].get("status") == "reserved":
                exp_of[l.ack["body"].get("order_id")] = parse_iso(l.ack["body"].get("expires_at"))
        for l in lops:
            if l.op != "cancel" or exp_of.get(l.args["order_id"]) is None:
                continue
            e = exp_of[l.args["order_id"]]
            for a in l.attempts:
                if a["status"] == 409 and isinstance(a["body"], dict) and a["body"].get("error") == "reservation_expired":
                    self.examined["confirm-answers"] += 1
                    if a["w1"] < e - CLOCK_SLACK_S:
                        self.fail("confirm-answers", ("cancel", l.id), "cancel lop %d of hold %s answered reservation_expired %.3f s before its expires_at" % (
                            l.id, l.args["order_id"], e - a["w1"]), [a["seq"]])

    # -- report --
    def report(self):
        run, a = self.run, self.run.a
        lops = list(run.lops)
        need = set()
        for d in self.viol.values():
            for _, (msg, seqs) in list(d.items())[:5]:
                need.update(seqs)
        lines = {}
        if need:
            with open(os.path.join(a.out, "history.jsonl")) as f:
                for line in f:
                    m = re.search(r'"seq":(\d+)\}$', line.rstrip("\n"))
                    if m and int(m.group(1)) in need:
                        lines[int(m.group(1))] = line.rstrip("\n")
        out = []
        out.append("# Randomized history test: seed %d" % a.seed)
        out.append("")
        out.append("Replay the random choices: %s" % (a.replay or "loadtest/chaos.sh --seed %d %s" % (a.seed, "--long" if a.duration >= 600 else "--short")))
        out.append("")
        if a.setup:
            out.append(a.setup)
            out.append("")
        by_op = Counter()
        for l in lops:
            for x in l.attempts:
                by_op[(l.op, str(x["status"]) if x["status"] is not None else ("no-answer" if x["sent"] else "not-sent"))] += 1
        finals = Counter((l.op, l.final) for l in lops)
        out.append("## Operations (%d logical, %d attempts)" % (len(lops), sum(by_op.values())))
        out.append("")
        out.append("| op | logical: acked / failed / unknown | attempts by answer |")
        out.append("|---|---|---|")
        for op in ("put", "patch", "restock", "order", "confirm", "extend", "cancel", "delete", "status") + (chaos_queue.qops() if run.room else ()) + (chaos_cart.cops() if run.shop else ()):
            st = ", ".join("%s: %d" % (k[1], v) for k, v in sorted(by_op.items()) if k[0] == op)
            out.append("| %s | %d / %d / %d | %s |" % (op, finals[(op, "acked")], finals[(op, "failed")], finals[(op, "unknown")], st))
        keyed = Counter((l.key is not None, l.final) for l in lops if l.op == "order")
        out.append("")
        out.append("Orders with Idempotency-Key: %d acked, %d failed, %d unknown; without: %d acked, %d failed, %d unknown." % (
            keyed[(True, "acked")], keyed[(True, "failed")], keyed[(True, "unknown")],
            keyed[(False, "acked")], keyed[(False, "failed")], keyed[(False, "unknown")]))
        out.append("")
        if a.rules:
            out.extend(self.rules_report(lops))
        ev = []
        try:
            with open(os.path.join(a.out, "nemesis.jsonl")) as f:
                ev = [json.loads(x) for x in f if x.strip()]
        except (OSError, ValueError):
            pass
        evc = Counter(e["ev"] for e in ev if e["ev"] in FAULTS)
        out.append("## Nemesis: %s" % (", ".join("%s ×%d" % kv for kv in sorted(evc.items())) or "nothing"))
        out.append("")
        for e in ev:
            if e["ev"] in FAULTS:
                out.append("- %s %s %s" % (e["ev"], e["target"], e.get("detail", "")))
        out.append("")
        if run.damages or a.damage_gap[1] > 0:
            out.append("## Damaged counters: %d" % len([d for d in run.damages if d["result"] == "damaged"]))
            out.append("")
            out.extend(self.damage_notes or ["- none"])
            out.append("")
        if run.room:
            out.append("## The waiting room (%s)" % ", ".join(run.room.skus))
            out.append("")
            out.extend(run.room.report_lines(lops))
            out.append("")
        if run.shop:
            out.append("## Carts and limit groups (%s)" % ", ".join(run.shop.skus))
            out.append("")
            out.extend(run.shop.report_lines(lops))
            out.append("")
        if self.db_notes:
            out.append("## The database (order log and sink)")
            out.append("")
            out.extend(self.db_notes)
            out.append("")
        out.append("## Redis calls")
        out.append("")
        if self.calls_seen:
            worst = max(self.calls_seen, key=lambda x: x[2] / x[3] if x[3] else float("inf"))
            out.append("- /metrics: the most Redis calls of one order, any instance, any checkpoint: %g (budget %g, checkpoint %s, instance %d)" % (
                worst[2], worst[3], worst[0], worst[1]))
        else:
            out.append("- /metrics: %s" % self.unavailable.get("redis-calls", "not read"))
        st = [x for x in run.stretches if x["calls"] is not None]
        if st:
            tot, sent = Counter(), Counter()
            for x in st:
                tot.update(x["calls"])
                sent.update(x["sent"])
            n_req = sum(sent.values())
            out.append("- INFO commandstats over %d stretches of traffic (%.0f s%s): %d commands for %d requests sent (%s): %.1f per request; orders are %.0f %% of them. Most run: %s" % (
                len(st), sum(x["t1"] - x["t0"] for x in st),
                "; %d across a Redis restart, counted from its start" % sum(1 for x in st if x["restarted"]) if any(x["restarted"] for x in st) else "",
                sum(tot.values()), n_req, ", ".join("%s %d" % kv for kv in sorted(sent.items())), sum(tot.values()) / max(1, n_req),
                100.0 * sent.get("order", 0) / max(1, n_req), ", ".join("%s %d" % kv for kv in tot.most_common(8))))
            worst = max(st, key=lambda x: sum(x["calls"].values()) / max(1, sum(x["sent"].values())))
            out.append("- the stretch with the most commands per request: %.1f..%.1f s, %.1f per request (%d commands, %d requests)" % (
                worst["t0"], worst["t1"], sum(worst["calls"].values()) / max(1, sum(worst["sent"].values())), sum(worst["calls"].values()), sum(worst["sent"].values())))
        else:
            out.append("- INFO commandstats: not measured%s" % (" (a cluster: failovers move and reset the counts)" if a.redis_cluster else ""))
        out.append("")
        out.append("## Checkpoints")
        out.append("")
        for cp in run.checkpoints:
            out.append("- %s at %.1f s: %s, reached in %.1f s, %d violation(s) so far" % (
                cp["name"], cp["t"], "quiescent" if cp["quiet"] else "NOT quiescent: " + cp["why"], cp["wait_s"], cp["violations_so_far"]))
        out.append("")
        out.append("## Checks")
        out.append("")
        total = 0
        for name, desc in CHECKS:
            d = self.viol[name]
            total += len(d)
            if name in self.unavailable and not self.examined[name]:
                out.append("- – %s: not available (%s): %s" % (name, self.unavailable[name], desc))
                continue
            out.append("- %s %s (%d examined, %d violation%s): %s" % ("✗" if d else "✓", name, self.examined[name], len(d), "" if len(d) == 1 else "s", desc))
        for name, _ in CHECKS:
            d = self.viol[name]
            if not d:
                continue
            out.append("")
            out.append("### %s: %d violation%s (first %d)" % (name, len(d), "" if len(d) == 1 else "s", min(5, len(d))))
            for _, (msg, seqs) in list(d.items())[:5]:
                out.append("")
                out.append("- " + msg)
                for sq in seqs:
                    if sq in lines:
                        out.append("      " + lines[sq])
        out.append("")
        out.append("RESULT %s seed=%d violations=%d lops=%d attempts=%d nemesis=%d checkpoints=%d" % (
            "PASS" if total == 0 else "FAIL", a.seed, total, len(lops), sum(by_op.values()), sum(evc.values()), len(run.checkpoints)))
        text = "\n".join(out) + "\n"
        with open(os.path.join(a.out, "SUMMARY.md"), "w") as f:
            f.write(text)
        return total, text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--redis-port", type=int, help="the one redis-server")
    ap.add_argument("--redis-cluster", help="or a Redis Cluster: redis-cluster://host:port[,…]")
    ap.add_argument("--setup", default="", help="a line for SUMMARY.md: what Redis is, the faults")
    ap.add_argument("--replay", default="", help="the command that replays this run")
    ap.add_argument("--ports", required=True, help="instance ports, comma-separated")
    ap.add_argument("--token", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ctl", required=True)
    ap.add_argument("--verify", required=True)
    ap.add_argument("--duration", type=int, default=70)
    ap.add_argument("--checkpoint-every", type=int, default=35)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--skus", type=int, default=4)
    ap.add_argument("--client-timeout", type=float, default=3.0)
    ap.add_argument("--think-ms", type=float, default=0)
    ap.add_argument("--storms", type=int, default=1, help="0: no bursts of concurrent PUTs")
    ap.add_argument("--calm", type=float, default=0, help="no fault starts in the last S s of traffic before a checkpoint")
    ap.add_argument("--damage-gap-ms", default="2000 6000", help="min max pause between counter damages ('0 0': none)")
    ap.add_argument("--damage-hold-ms", default="1000 3000", help="min max time a counter stays damaged")
    ap.add_argument("--key-schema", type=int, choices=(1, 2), default=2, help="1: the keys of binaries before 34f3be8")
    ap.add_argument("--rules", type=int, choices=(0, 1), default=1, help="0: no sale rules, PATCHes or confirms (binaries before issue 20)")
    ap.add_argument("--payers", type=int, default=8, help="threads that confirm holds (with --rules 1)")
    ap.add_argument("--extends", type=float, default=0.3,
                    help="share of the payers' operations that extend a hold instead of confirming it (issue 33; 0: none, and PUTs without hold_extend_s: binaries before it)")
    ap.add_argument("--sink-bin", default="", help="inventory-sink: check the database at the end (its URL in INVENTORY_SINK_DB_URL)")
    ap.add_argument("--sink-redis", default="", help="the sink's --redis URL")
    ap.add_argument("--db-port", type=int, default=0, help="the database's port (root, no password: the backfilled rows' times)")
    ap.add_argument("--large-orders", type=float, default=0.1,
                    help="the fraction of orders of %d..%d units, more than one segment holds (SPEC §13; 0: none, "
                         "the mix of binaries before issue 22)" % (MAX_QTY + 1, LARGE_QTY_MAX))
    ap.add_argument("--queue", type=int, choices=(0, 1), default=0,
                    help="1: two SKUs with a waiting room, their clients and checks (SPEC §16; the instances need "
                         "--queue-key-file and --user-header X-User from 127.0.0.1)")
    ap.add_argument("--queue-clients", type=int, default=6, help="threads that join, poll and order through the waiting room")
    ap.add_argument("--cart", type=int, choices=(0, 1), default=0,
                    help="carts and limit groups (loadtest/chaos_cart.py): their SKUs, clients and checks")
    ap.add_argument("--cart-clients", type=int, default=3, help="threads that send carts, group orders, cancels, confirms and extends")
    a = ap.parse_args()
    if not 0 <= a.large_orders <= 1:
        ap.error("--large-orders is a fraction, 0..1")
    try:
        a.damage_gap = [float(x) for x in a.damage_gap_ms.split()]
        a.damage_hold = [float(x) for x in a.damage_hold_ms.split()]
        assert len(a.damage_gap) == 2 and len(a.damage_hold) == 2 and 0 <= a.damage_gap[0] <= a.damage_gap[1] and 0 <= a.damage_hold[0] <= a.damage_hold[1]
    except (ValueError, AssertionError):
        ap.error("--damage-gap-ms and --damage-hold-ms take two numbers, min ≤ max")
    global KEYS
    KEYS = Keys(a.key_schema)
    if (a.redis_port is None) == (a.redis_cluster is None):
        ap.error("give one of --redis-port and --redis-cluster")
    global LOG
    LOG = open(os.path.join(a.out, "run.log"), "a")
    run = Run(a)
    try:
        total, text = run.main()
    except Infra as e:
        log("INFRASTRUCTURE FAILURE: %s" % e)
        return 3
    sys.stdout.write(text)
    sys.stdout.flush()
    return 0 if total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
