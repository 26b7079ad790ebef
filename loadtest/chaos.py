#!/usr/bin/env python3
"""loadtest/chaos.py — the clients and the checker of loadtest/chaos.sh, the randomized
concurrent-history test (Jepsen-style). Python 3 standard library only; started by chaos.sh,
which owns every process (redis-server, the inventoryd instances) and runs the nemesis.

Many client threads send a seeded random mix of requests straight to the instances (PUT,
restock, orders with and without Idempotency-Key, cancels, DELETE of a SKU, status reads) and
behave like real clients: short timeouts, bounded retries with back-off (the same
Idempotency-Key on every retry), a keyless order whose outcome is unknown is not retried.
Every attempt and its answer is one line of history.jsonl. At checkpoints (nemesis paused,
clients idle, instances ready with nothing in flight, no segment lock held) the state is read
from Redis directly (a tiny RESP client, plus loadtest/verify.sh per SKU) and checked against
the history; at the end the answers themselves are checked too. See loadtest/README.md and
docs/reliability.md ("Randomized history test") for what is checked and why it is sound.

With --redis-cluster (chaos.sh --cluster) Redis is a Redis Cluster: every read goes to the
master of its key's slot and SCANs to every master (loadtest/resp.py, which verify.sh uses too),
the slot map asked for again after each failover.

Talks to chaos.sh through files in --ctl: it creates pause.<N> and waits for paused.<N> (the
nemesis has restored everything and holds still), later creates resume.<N>; done at the end.
With --calm S, calm exists in the last S seconds of traffic before each checkpoint: the nemesis
starts no fault then, so that a checkpoint does not wait long for one (a master's takes ~8 s).
Exit status: 0 every check passed, 1 a violation, 3 infrastructure failure.
"""

import argparse
import bisect
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



# A segment's data keys (docs/design.md). A dropped segment keeps only its `sver`, as a tombstone
# that stops an older PUT still rolling out from bringing it back, and lockcore's lock/fence keys.
SEGMENT_DATA_KEYS = {"stock", "cnt", "orders", "idem", "rst"}

class Infra(Exception):
    """Something the test needs (Redis, the nemesis) is not there: not a finding about the service."""


# --- Redis, read directly: one redis-server (Redis) or a Redis Cluster (Cluster), loadtest/resp.py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resp import Cluster, Redis, RedisError  # noqa: E402  (beside this file)


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
# The nemesis events (nemesis.jsonl) that are faults, as chaos.sh names them.
FAULTS = ("kill9", "sigstop", "redis-kill9", "master-kill9", "master-cut-kill9", "crash")


def effect(op, a):
    """What an attempt may have changed: YES (2xx), NONE (never sent, a 4xx, an order's plain
    503 — documented as "nothing changed" —, or a read), MAYBE (no answer, or a 5xx that does not
    promise nothing changed: an order's 503 "outcome":"unknown", any admin 5xx)."""
    if not a["sent"] or op == "status":
        return NONE
    s = a["status"]
    if s is None:
        return MAYBE
    if 200 <= s < 300:
        return YES
    if 400 <= s < 500:
        return NONE
    if op == "order" and s == 503 and not (isinstance(a["body"], dict) and a["body"].get("outcome") == "unknown"):
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


# --- the run ------------------------------------------------------------------------------------

MAX_QTY = 5
MAX_ATTEMPTS = 6
RETRY_FOR_S = 8.0


class Run:
    def __init__(self, a):
        self.a = a
        self.ports = [int(p) for p in a.ports.split(",")]
        self.skus = ["chaos%d-%s" % (a.seed % 1000, chr(ord("a") + i)) for i in range(a.skus)]
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
        if op == "order":
            args["user_id"] = "L%d-%d" % (self.a.seed, lid)
        return lop

    def execute(self, rng, lop, method, path, body=None, admin=False):
        """Sends the logical operation, retrying like a real client; fills lop.attempts,
        lop.final ("acked", "failed" or "unknown") and lop.ack."""
        headers = {}
        if admin:
            headers["Authorization"] = "Bearer " + self.a.token
        if lop.key:
            headers["Idempotency-Key"] = lop.key
        for n in range(MAX_ATTEMPTS):
            inst = rng.randrange(len(self.ports))
            t0 = now()
            r = http_call(self.ports[inst], method, path, body, headers, self.a.client_timeout)
            t1 = now()
            a = {"inst": inst, "t0": t0, "t1": t1, "sent": r["sent"], "status": r["status"],
                 "body": r["body"], "err": r["err"]}
            a["eff"] = effect(lop.op, a)
            a["seq"] = self.hist.write({"kind": "attempt", "lop": lop.id, "n": n, "thr": lop.thr,
                                        "op": lop.op, "sku": lop.sku, "args": lop.args, "key": lop.key,
                                        "inst": inst, "t0": round(t0, 4), "t1": round(t1, 4),
                                        "status": r["status"], "body": r["body"], "err": r["err"],
                                        "eff": a["eff"]})
            lop.attempts.append(a)
            s = r["status"]
            if r["sent"] and s is not None and s < 500:
                break
            # A keyless order whose outcome is unknown is not retried: a retry could buy twice.
            if lop.op == "order" and not lop.key and a["eff"] == MAYBE:
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
        args = {"stock": rng.randint(0, 2000), "segments": rng.randint(1, 32)}
        lop = self.new_lop("put", sku, thr, args, True)
        return self.execute(rng, lop, "PUT", "/api/v1/skus/" + sku, args, admin=True)

    def op_restock(self, rng, thr, sku):
        args = {"quantity": rng.randint(1, 100)}
        lop = self.new_lop("restock", sku, thr, args, True)
        return self.execute(rng, lop, "POST", "/api/v1/skus/%s/restock" % sku, args, admin=True)

    def op_order(self, rng, thr, sku):
        args = {"sku": sku, "quantity": rng.randint(1, MAX_QTY)}
        lop = self.new_lop("order", sku, thr, args, rng.random() < 0.5)
        self.execute(rng, lop, "POST", "/api/v1/orders", args)
        if lop.ack and isinstance(lop.ack["body"], dict) and isinstance(lop.ack["body"].get("order_id"), str):
            with self.lock:
                self.known_orders.append((lop.ack["body"]["order_id"], lop))
        return lop

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

    def op_status(self, rng, thr, sku):
        lop = self.new_lop("status", sku, thr, {}, False)
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

    def client(self, thr):
        rng = random.Random("%d/client/%d" % (self.a.seed, thr))
        put_next = None
        while not self.stop.is_set():
            if self.pause.is_set():
                with self.idle_cv:
                    self.idle += 1
                    self.idle_cv.notify_all()
                    while self.pause.is_set() and not self.stop.is_set():
                        self.idle_cv.wait(0.2)
                    self.idle -= 1
                continue
            sku = rng.choice(self.skus)
            x = rng.random() * 100
            storm_sku = self.storm(self.traffic_now())
            if put_next:
                self.op_put(rng, thr, put_next)
                put_next = None
            elif storm_sku and x < 50:
                self.op_put(rng, thr, storm_sku)
            elif x < 0.03:
                self.op_put(rng, thr, sku)
            elif x < 0.04:
                self.op_delete(rng, thr, sku)
            elif x < 1.5:
                self.op_restock(rng, thr, sku)
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
            for k in rds.scan("inv:2:{%s/*}:lock" % s):
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
        ok, why = self.quiet(30)
        # Meet every SKU once (a PUT left half-done may be completed by whoever meets it).
        rng = random.Random("%d/checkpoint/%s" % (self.a.seed, name))
        for s in self.skus:
            self.op_status(rng, -1, s)
        if ok:
            ok, why = self.quiet(10)
        self.checks.examined["quiescence"] += 1
        if not ok:
            self.checks.fail("quiescence", name, "checkpoint %s: not quiescent after 40 s: %s" % (name, why), [])
        log("checkpoint %s: %s after %.1f s (nemesis paused after %.1f s, clients idle after %.1f s more); reading Redis" % (
            name, "quiet" if ok else "NOT quiet (" + why + ")", now() - t_begin, t_nem - t_begin, t_idle - t_nem))
        self.checks.redis_checks(name)
        cp = {"kind": "checkpoint", "name": name, "quiet": ok, "why": why, "t": round(now(), 3),
              "wait_s": round(now() - t_begin, 2), "violations_so_far": self.checks.count()}
        self.hist.write(dict(cp))
        self.checkpoints.append(cp)
        log("checkpoint %s done in %.1f s: %d violation(s) so far" % (name, now() - t_begin, self.checks.count()))
        if not final:
            with self.lock:
                self.traffic_since = now()
            self.pause.clear()
            with self.idle_cv:
                self.idle_cv.notify_all()
            self.ctl("resume." + name)

    def main(self):
        a = self.a
        log("seed %d: %d clients, SKUs %s, %d s of traffic, checkpoint every %d s, instances on %s, Redis on %s"
            % (a.seed, a.clients, ",".join(self.skus), a.duration, a.checkpoint_every, a.ports, a.redis_cluster or a.redis_port))
        rng = random.Random("%d/setup" % a.seed)
        for s in self.skus:
            self.op_put(rng, -1, s)
        self.traffic_since = now()
        self.threads = [threading.Thread(target=self.client, args=(i,), name="client%d" % i, daemon=True)
                        for i in range(a.clients)]
        for t in self.threads:
            t.start()
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
        self.ctl("done")
        self.checks.history_checks()
        self.hist.close()
        return self.checks.report()


# --- the checker --------------------------------------------------------------------------------

ORDER_ID = re.compile(r"^[0-9a-f]+-(\d+)-(.+)$")

CHECKS = [
    ("processes", "no inventoryd or redis-server exits unless the nemesis killed it (chaos.sh restarts it and records its exit status)"),
    ("quiescence", "quiescent points are reached: nemesis paused, clients idle, instances ready with nothing in flight, no segment lock held (bounded wait)"),
    ("segments", "SPEC §8 per segment from Redis (loadtest/verify.sh): stock ≥ 0, sver = meta version, t = stock + s, s/o = the live order records; the status endpoint agrees with Redis"),
    ("layout", "each SKU is exactly one PUT's layout: meta version/segments (and stock) match a PUT that was sent, Σ t = its stock + the restocks acknowledged since it (+ at most the unknown ones), no keys of segments ≥ n"),
    ("sku-existence", "a SKU whose last acknowledged PUT follows every DELETE exists; a SKU deleted (204) after every PUT has no keys left"),
    ("acked-orders", "every order acknowledged (201, or 200 replay) after its SKU's current PUT was acknowledged exists in Redis with its quantity, SKU and user"),
    ("order-records", "every order record belongs to a request that may have placed it (its user_id tag, SKU, quantity, segment), none where every attempt was refused"),
    ("idempotency", "at most one order record per logical order (per Idempotency-Key; a keyless order is sent once)"),
    ("units", "per SKU since its current PUT: units in 201/200 answers ≤ units placed ≤ those + units of unknown-outcome orders (keyless and keyed separately)"),
    ("cancels", "a cancelled record has a cancel request; an acknowledged cancel's order is cancelled in Redis; a 404 cancel's order does not reappear"),
    ("status-answers", "every status answer (GET, restock) satisfies SPEC §8 on its own: sold = stock_total − remaining = Σ segments, no negative number, orders ≤ sold ≤ 5 × orders, segments 0..n-1 of a PUT that was sent, version not older than an acknowledged PUT"),
    ("put-answers", "PUT answers echo the request, versions are unique per SKU and grow in real-time order"),
    ("order-answers", "201/200 order bodies echo the request (SKU, quantity, user_id, segment in the id); cancel answers are the cancelled order"),
]


class Checker:
    def __init__(self, run):
        self.run = run
        self.viol = {name: {} for name, _ in CHECKS}
        self.examined = Counter()

    def fail(self, check, subject, msg, seqs):
        d = self.viol[check]
        if subject not in d:
            d[subject] = (msg, list(seqs)[:12])

    def count(self):
        return sum(len(d) for d in self.viol.values())

    # -- at checkpoints: Redis against the history --
    def snapshot(self, rds, sku):
        meta = pairs(rds.cmd("HGETALL", "inv:2:{%s}:meta" % sku))
        if meta and as_int(meta.get("segments")) == 0:
            meta = {}  # a layout of 0 segments: the SKU was deleted (its meta stays, docs/design.md)
        keys = rds.scan("inv:2:{%s/*}:*" % sku)
        pat = re.compile(r"^inv:2:\{" + re.escape(sku) + r"/(\d+)\}:(.+)$")
        seg_keys = defaultdict(set)
        for k in keys:
            m = pat.match(k)
            if m:
                seg_keys[int(m.group(1))].add(m.group(2))
        n = as_int(meta.get("segments"))
        segs = {}
        if n and n > 0:
            cmds = []
            for k in range(n):
                p = "inv:2:{%s/%d}:" % (sku, k)
                cmds += [("GET", p + "stock"), ("GET", p + "sver"), ("HGETALL", p + "cnt"), ("HGETALL", p + "orders")]
            rep = rds.pipeline(cmds)
            for k in range(n):
                st, sv, cnt, orders = rep[4 * k: 4 * k + 4]
                if any(isinstance(x, RedisError) for x in (st, sv, cnt, orders)):
                    raise Infra("Redis error reading segment %d of %s" % (k, sku))
                segs[k] = {"stock": as_int(st), "sver": as_int(sv), "cnt": pairs(cnt), "orders": pairs(orders)}
        return {"meta": meta, "seg_keys": seg_keys, "segs": segs}

    def crashes(self):
        """The processes that exited by themselves (chaos.sh's "crash" events)."""
        try:
            with open(os.path.join(self.run.a.out, "nemesis.jsonl")) as f:
                ev = [json.loads(x) for x in f if x.strip()]
        except (OSError, ValueError):
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
        cancels_of = defaultdict(list)
        for l in lops:
            if l.op == "cancel":
                cancels_of[l.args["order_id"]].append(l)
        order_by_tag = {l.args["user_id"]: l for l in lops if l.op == "order"}
        for s in run.skus:
            snap = snaps[s]
            ops = by_sku[s]
            self.examined["layout"] += 1
            if snap["meta"]:
                self.verify_sh(cp, s)
            layout = self.check_layout(cp, s, snap, ops)
            self.check_orders(cp, s, snap, ops, layout, order_by_tag, cancels_of)

    def verify_sh(self, cp, sku):
        """loadtest/verify.sh for the history-independent §8 checks of one SKU."""
        run = self.run
        where = ["--redis-cluster", run.a.redis_cluster] if run.a.redis_cluster else ["--redis-port", str(run.a.redis_port)]
        cmd = [run.a.verify] + where + ["--sku", sku, "--max-qty", str(MAX_QTY),
               "--status-url", "http://127.0.0.1:%d/api/v1/skus/%s" % (run.ports[0], sku)]
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

    def check_orders(self, cp, s, snap, ops, layout, order_by_tag, cancels_of):
        if layout is None:
            return
        P, p_ack, n, v = layout
        records = {}
        for k in range(n):
            for oid, raw in snap["segs"][k]["orders"].items():
                try:
                    rec = json.loads(raw)
                except ValueError:
                    rec = None
                records[oid] = (k, rec)
        by_tag = defaultdict(list)
        for oid, (k, rec) in records.items():
            self.examined["order-records"] += 1
            if not isinstance(rec, dict):
                continue    # verify.sh reports malformed records
            tag = rec.get("user_id")
            L = order_by_tag.get(tag)
            m = ORDER_ID.match(oid)
            if L is None:
                self.fail("order-records", oid, "checkpoint %s: %s segment %d holds order %s for user %r, which no request of this test made" % (cp, s, k, oid, tag), [])
                continue
            by_tag[tag].append(oid)
            bad = []
            if L.sku != s or rec.get("sku") != s:
                bad.append("SKU %r/%r" % (rec.get("sku"), L.sku))
            if rec.get("quantity") != L.args["quantity"]:
                bad.append("quantity %r, asked %d" % (rec.get("quantity"), L.args["quantity"]))
            if rec.get("segment") != k or not m or int(m.group(1)) != k:
                bad.append("segment %r in segment %d" % (rec.get("segment"), k))
            if rec.get("status") not in ("created", "cancelled"):
                bad.append("status %r" % rec.get("status"))
            if bad:
                self.fail("order-records", oid, "checkpoint %s: order %s (lop %d) does not match its request: %s" % (cp, oid, L.id, ", ".join(bad)), L.seqs())
            if all(a["eff"] == NONE for a in L.attempts):
                self.fail("order-records", oid, "checkpoint %s: order %s exists, but every attempt of its request (lop %d) was refused or never sent: %s" % (
                    cp, oid, L.id, [a["status"] or a["err"] for a in L.attempts]), L.seqs())
            if rec.get("status") == "cancelled":
                self.examined["cancels"] += 1
                if not any(a["sent"] for c in cancels_of.get(oid, []) for a in c.attempts):
                    self.fail("cancels", oid, "checkpoint %s: order %s (lop %d) is cancelled, but no cancel of it was sent" % (cp, oid, L.id), L.seqs())
        for tag, oids in by_tag.items():
            self.examined["idempotency"] += 1
            if len(oids) > 1:
                L = order_by_tag[tag]
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
            placed = sum(1 for oid in by_tag.get(L.args["user_id"], []))
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

    # -- at the end: the answers themselves --
    def status_problems(self, body, sku, put_segments):
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
        if not body["orders"] <= body["sold"] <= MAX_QTY * body["orders"]:
            errs.append("orders %d vs sold %d (each order is 1..%d units)" % (body["orders"], body["sold"], MAX_QTY))
        if len(segs) not in put_segments:
            errs.append("%d segments: no PUT of %s sent before it had that many (%s)" % (len(segs), sku, sorted(put_segments)[:10]))
        return errs

    def history_checks(self):
        run = self.run
        self.crashes()
        lops = list(run.lops)
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
        for l in lops:
            if l.op not in ("status", "restock"):
                continue
            for a in l.attempts:
                if a["status"] != 200:
                    continue
                body = a["body"]
                self.examined["status-answers"] += 1
                segset = {n for t, n in sent_puts.get(l.sku, []) if t < a["t1"]}
                errs = self.status_problems(body, l.sku, segset)
                if not errs:
                    v = body["version"]
                    i = bisect.bisect_left(ack_t.get(l.sku, []), a["t0"])
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
                    self.fail("status-answers", ("%s %s" % (l.op, a["seq"])), "%s answer of %s (lop %d, instance %d, %.3f..%.3f s): %s" % (
                        l.op, l.sku, l.id, a["inst"], a["t0"], a["t1"], "; ".join(errs)), [a["seq"]])
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
                if l.ack["status"] == 201 and b.get("status") != "created":
                    bad.append("status %r" % b.get("status"))
                if bad:
                    self.fail("order-answers", l.id, "order lop %d %s answered %d: %s" % (l.id, l.args, l.ack["status"], "; ".join(bad)), [l.ack["seq"]])
            if l.op == "cancel" and l.ack:
                self.examined["order-answers"] += 1
                b = l.ack["body"] if isinstance(l.ack["body"], dict) else {}
                if b.get("order_id") != l.args["order_id"] or b.get("status") != "cancelled":
                    self.fail("order-answers", l.id, "cancel lop %d of %s answered %s" % (l.id, l.args["order_id"], b), [l.ack["seq"]])

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
        for op in ("put", "restock", "order", "cancel", "delete", "status"):
            st = ", ".join("%s: %d" % (k[1], v) for k, v in sorted(by_op.items()) if k[0] == op)
            out.append("| %s | %d / %d / %d | %s |" % (op, finals[(op, "acked")], finals[(op, "failed")], finals[(op, "unknown")], st))
        keyed = Counter((l.key is not None, l.final) for l in lops if l.op == "order")
        out.append("")
        out.append("Orders with Idempotency-Key: %d acked, %d failed, %d unknown; without: %d acked, %d failed, %d unknown." % (
            keyed[(True, "acked")], keyed[(True, "failed")], keyed[(True, "unknown")],
            keyed[(False, "acked")], keyed[(False, "failed")], keyed[(False, "unknown")]))
        out.append("")
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
    a = ap.parse_args()
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
