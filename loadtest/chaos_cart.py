"""loadtest/chaos_cart.py — carts and limit groups (SPEC §17, issue 33) in chaos.py's history:
their SKUs, their clients and their checks. Imported by chaos.py (Python 3 standard library
only); the nemesis (chaos.sh) knows nothing of it: its faults hit these SKUs as any other (an
instance killed -9 or stopped, Redis killed -9 and restarted from its AOF, on a cluster the
master of a SKU's own keys — a cart's SKUs sit on different masters there).

SKUs of their own (`chaos<seed>-k0..k3`, `chaos<seed>-g0..g5`): k0..k3 are sold in carts of 2-4
items (k3 with holds of 2 s, so a cart holding it is a hold: confirmed, cancelled, extended or
left to expire); g0..g5 are one style's sizes in the limit group `chaos<seed>-style` (1 unit per
user across the six), bought by a small pool of users in single orders and in carts (of sizes
only, and of sizes with a k SKU), so the group's limit binds all the time. Restocks keep the k
SKUs selling; cancels and expiries give units and the group's allowance back. The verified user
is the body's user_id, as chaos.py's orders (the instances run with --trust-body-user-id).

The cart clients (--cart-clients threads) send carts with and without Idempotency-Key (a replay
of the same key now and then), group orders and carts, cancels, confirms, extends and restocks.
Every attempt is a line of history.jsonl (ops c*), as chaos.py's.

The checks (CCHECKS) are made at every checkpoint from the segments' order records, the cart
intents and the history (docs/reliability.md "Carts in the history").
"""

import random
import threading
import time
from collections import Counter, defaultdict

CART_USERS = 60
GROUP_USERS = 10        # few: each buys one unit of the style at most, and keeps trying
GROUP_LIMIT = 1
HOLD_TTL_S = 2
LIVE = ("created", "reserved", "confirmed")

CCHECKS = [
    ("cart-whole", "carts (SPEC §17): at a quiet checkpoint, every cart's primary (a record with items) has every part of every item in its SKU's segment, part_of naming it, with the primary's status (follows drained); every part (part_of) of a cart SKU names a primary that exists; per SKU the units of its live records equal what it sold (verify.sh); no cart intent left at the end"),
    ("cart-answers", "every 201/200 cart answer names an order whose record exists with the answered items (SKU and quantity each), and one Idempotency-Key's answers all name the same order; a cart answered 4xx or a plain 503 (nothing changed) left no record under its key"),
    ("group-limit", "no user holds more than the group's limit of live units across the group's SKUs (single orders and carts' items together), at any checkpoint"),
]


def cops():
    return ("cput", "corder", "ccancel", "cconfirm", "cextend", "crestock", "cstatus")


def body_of(lop):
    for a in reversed(lop.attempts):
        if a["status"] in (200, 201) and isinstance(a["body"], dict):
            return a["body"]
    return {}


def id_parts(oid):
    """(segment, sku) of an order or part id "<32 hex>-<k>-<sku>", or None."""
    if not isinstance(oid, str) or len(oid) < 36 or oid[32] != "-":
        return None
    rest = oid[33:]
    k, _, sku = rest.partition("-")
    if not k.isdigit() or not sku:
        return None
    return int(k), sku


def items_of(rec):
    """[(sku, quantity)] of a record: a cart's items, or a single order's one line."""
    if isinstance(rec.get("items"), list):
        out = []
        for it in rec["items"]:
            if isinstance(it, dict):
                out.append((it.get("sku"), int(it.get("quantity") or 0)))
        return out
    return [(rec.get("sku"), int(rec.get("quantity") or 0))]


class CartShop:
    def __init__(self, run, chaos):
        self.run, self.c = run, chaos
        a = run.a
        tag = "chaos%d" % (a.seed % 1000)
        self.cart_skus = ["%s-k%d" % (tag, i) for i in range(4)]
        self.group_skus = ["%s-g%d" % (tag, i) for i in range(6)]
        self.skus = self.cart_skus + self.group_skus
        self.group = tag + "-style"
        rr = random.Random("%d/cart" % a.seed)
        self.conf = {}
        for i, s in enumerate(self.cart_skus):
            # every cart SKU may be a cart's home, whose rules an extension reads
            self.conf[s] = {"stock": rr.randint(150, 300), "segments": rr.randint(1, 4), "hold_extend_s": 1, "hold_extend_max": 2}
            if i == 3:
                self.conf[s]["reservation_ttl_s"] = HOLD_TTL_S
        for s in self.group_skus:
            self.conf[s] = {"stock": rr.randint(20, 40), "segments": rr.randint(1, 3), "limit_group": self.group}
        self.users = ["c%d-%d" % (a.seed % 1000, i) for i in range(CART_USERS)]
        self.gusers = ["g%d-%d" % (a.seed % 1000, i) for i in range(GROUP_USERS)]
        self.lock = threading.Lock()
        self.orders = []        # (order id, hold) of 201 carts and group orders
        self.replayable = []    # (key, body, order id) of keyed carts answered 201

    # -- clients --
    def put(self, rng):
        lop = self.run.new_lop("cput", self.group, -1, {"limit_per_user": GROUP_LIMIT}, True)
        self.run.execute(rng, lop, "PUT", "/api/v1/groups/" + self.group, lop.args, admin=True)
        if lop.final != "acked":
            raise self.c.Infra("the group's PUT was not answered 2xx: %s" % [x["status"] for x in lop.attempts])
        for s in self.skus:
            lop = self.run.new_lop("cput", s, -1, dict(self.conf[s]), True)
            self.run.execute(rng, lop, "PUT", "/api/v1/skus/" + s, lop.args, admin=True)
            if lop.final != "acked":
                raise self.c.Infra("the PUT of %s was not answered 2xx: %s" % (s, [x["status"] for x in lop.attempts]))

    def send(self, rng, thr, items, user, keyed, kind):
        args = {"items": [{"sku": s, "quantity": q} for s, q in items], "user_id": user, "kind": kind}
        body = {"items": args["items"], "user_id": user}
        if len(items) == 1:
            body = {"sku": items[0][0], "quantity": items[0][1], "user_id": user}
        lop = self.run.new_lop("corder", items[0][0], thr, args, keyed)
        self.run.execute(rng, lop, "POST", "/api/v1/orders", body)
        b = body_of(lop)
        if isinstance(b.get("order_id"), str):
            with self.lock:
                self.orders.append((b["order_id"], b.get("status") == "reserved"))
                if keyed and len(items) > 1:
                    self.replayable.append((lop, body))
        return lop

    def cart(self, rng, thr):
        n = rng.randint(2, 4)
        skus = rng.sample(self.cart_skus, n)
        return self.send(rng, thr, [(s, rng.randint(1, 3)) for s in skus], rng.choice(self.users), rng.random() < 0.5, "cart")

    def group_order(self, rng, thr):
        user = rng.choice(self.gusers)
        x = rng.random()
        if x < 0.4:
            items = [(rng.choice(self.group_skus), 1)]
        elif x < 0.8:
            items = [(s, 1) for s in rng.sample(self.group_skus, rng.randint(2, 3))]
        else:
            items = [(rng.choice(self.group_skus), 1), (rng.choice(self.cart_skus), 1)]
        rng.shuffle(items)
        return self.send(rng, thr, items, user, rng.random() < 0.5, "group")

    def replay(self, rng, thr):
        with self.lock:
            if not self.replayable:
                return None
            first, body = self.replayable[rng.randrange(len(self.replayable))]
        lop = self.c.Lop(0, "corder", first.sku, thr, dict(first.args, kind="replay", of=first.id), first.key)
        with self.run.lock:
            self.run.next_id += 1
            lop.id = self.run.next_id
            self.run.lops.append(lop)
        self.run.execute(rng, lop, "POST", "/api/v1/orders", body)
        return lop

    def pick(self, rng, holds_only=False):
        with self.lock:
            pool = [o for o, h in self.orders[-200:] if h or not holds_only]
        return pool[rng.randrange(len(pool))] if pool else None

    def end(self, rng, thr, op):
        oid = self.pick(rng, holds_only=op != "ccancel")
        if oid is None:
            return None
        sku = (id_parts(oid) or (0, ""))[1]
        lop = self.run.new_lop(op, sku, thr, {"order_id": oid}, False)
        if op == "ccancel":
            return self.run.execute(rng, lop, "DELETE", "/api/v1/orders/" + oid, admin=True)
        if op == "cconfirm":
            return self.run.execute(rng, lop, "POST", "/api/v1/orders/%s/confirm" % oid, admin=True)
        return self.run.execute(rng, lop, "POST", "/api/v1/orders/%s/extend" % oid, {"seconds": 1}, admin=True)

    def restock(self, rng, thr):
        s = rng.choice(self.cart_skus)
        args = {"quantity": rng.randint(5, 20)}
        lop = self.run.new_lop("crestock", s, thr, args, True)
        return self.run.execute(rng, lop, "POST", "/api/v1/skus/%s/restock" % s, args, admin=True)

    def client(self, i):
        run = self.run
        rng = random.Random("%d/cclient/%d" % (run.a.seed, i))
        thr = 3000 + i
        while not run.stop.is_set():
            if run.pause.is_set():
                run.hold_idle()
                continue
            x = rng.random() * 100
            if x < 45:
                done = self.cart(rng, thr)
            elif x < 70:
                done = self.group_order(rng, thr)
            elif x < 75:
                done = self.replay(rng, thr)
            elif x < 83:
                done = self.end(rng, thr, "ccancel")
            elif x < 89:
                done = self.end(rng, thr, "cconfirm")
            elif x < 94:
                done = self.end(rng, thr, "cextend")
            else:
                done = self.restock(rng, thr)
            if done is None:
                time.sleep(0.02)
            elif run.a.think_ms:
                time.sleep(rng.uniform(0, run.a.think_ms / 1000.0))

    # -- checks at a checkpoint --
    def checkpoint(self, cp, final):
        run, ch = self.run, self.run.checks
        t0 = self.c.now()
        try:
            rds = run.redis(10.0)
            try:
                snaps = {s: ch.snapshot(rds, s) for s in self.skus}
                intents = {s: self.c.pairs(rds.cmd("HGETALL", self.c.KEYS.sku(s, "cart"))) for s in self.skus}
            finally:
                rds.close()
        except (OSError, ConnectionError) as e:
            raise self.c.Infra("cannot read the carts at checkpoint %s: %s" % (cp, e))
        with run.lock:
            lops = [l for l in run.lops if l.op in cops()]
        vs = [threading.Thread(target=ch.verify_sh, args=(cp, s), kwargs={"status": not self.holds_in(snaps[s])})
              for s in self.skus if snaps[s]["meta"]]
        for t in vs:
            t.start()
        recs = {}
        for s in self.skus:
            for k, seg in snaps[s]["segs"].items():
                for oid, text in seg["orders"].items():
                    rec = self.c.json.loads(text) if isinstance(text, str) else None
                    if isinstance(rec, dict):
                        recs[oid] = rec
        self.check_whole(cp, recs, intents, final)
        self.check_answers(cp, recs, lops)
        self.check_group(cp, recs)
        for t in vs:
            t.join()
        self.c.log("checkpoint %s: carts and groups checked in %.1f s (%d records)" % (cp, self.c.now() - t0, len(recs)))

    @staticmethod
    def holds_in(snap):
        """Whether a SKU has a hold the sweeper may end while verify.sh reads it: a due entry, or
        a reserved record without one (a cart's part in another SKU than its primary's: the due
        entry is the primary's, and the part follows it)."""
        for x in snap["segs"].values():
            if x.get("due"):
                return True
            for text in x["orders"].values():
                if isinstance(text, str) and '"status":"reserved"' in text.replace(" ", ""):
                    return True
        return False

    def settles(self, oid, pid, tries=15):
        """Whether the part pid and its cart oid agree when read again, the part first: the
        checkpoint's snapshot reads SKU after SKU, and the sweeper, running at a quiet checkpoint
        too, may end a due hold (the primary, then a follow to each part) between two of them.
        A part moves only after its primary, so a part read before its primary that disagrees
        with it for 3 s is a split cart."""
        run, c = self.run, self.c
        ip, io = id_parts(pid), id_parts(oid)
        if not ip or not io:
            return False
        follow = {"created": "created", "reserved": "reserved", "confirmed": "confirmed", "cancelled": "cancelled", "expired": "expired"}
        try:
            rds = run.redis(10.0)
        except (OSError, ConnectionError):
            return False
        try:
            for _ in range(tries):
                part = rds.cmd("HGET", c.KEYS.seg(ip[1], ip[0], "orders"), pid)
                home = rds.cmd("HGET", c.KEYS.seg(io[1], io[0], "orders"), oid)
                try:
                    part, home = c.json.loads(part), c.json.loads(home)
                except (TypeError, ValueError):
                    return False
                if isinstance(part, dict) and isinstance(home, dict) and part.get("status") == follow.get(home.get("status")):
                    c.log("cart-whole: part %s and its cart %s agree (%s) when read again" % (pid, oid, part.get("status")))
                    return True
                time.sleep(0.2)
        except (OSError, ConnectionError):
            return False
        finally:
            rds.close()
        return False

    def check_whole(self, cp, recs, intents, final):
        ch = self.run.checks
        follow = {"created": "created", "reserved": "reserved", "confirmed": "confirmed", "cancelled": "cancelled", "expired": "expired"}
        for oid, rec in recs.items():
            if isinstance(rec.get("items"), list):
                ch.examined["cart-whole"] += 1
                for it in rec["items"]:
                    for p in it.get("parts") or []:
                        pid = "%s-%d-%s" % (oid[:32], int(p["segment"]), it["sku"])
                        if pid == oid:
                            continue
                        part = recs.get(pid)
                        if part is None:
                            ch.fail("cart-whole", (oid, pid), "checkpoint %s: cart %s (status %s) lists part %s of %s, which is not in its segment" % (
                                cp, oid, rec.get("status"), pid, it["sku"]), [])
                        elif part.get("part_of") != oid or int(part.get("quantity") or 0) != int(p["quantity"]):
                            ch.fail("cart-whole", (oid, pid), "checkpoint %s: part %s says part_of %s quantity %s; cart %s says %s" % (
                                cp, pid, part.get("part_of"), part.get("quantity"), oid, p["quantity"]), [])
                        elif part.get("status") != follow.get(rec.get("status")) and not self.settles(oid, pid):
                            ch.fail("cart-whole", (oid, pid), "checkpoint %s: part %s is %s, its cart %s is %s (follows drained at a quiet checkpoint)" % (
                                cp, pid, part.get("status"), oid, rec.get("status")), [])
            elif rec.get("part_of") is not None:
                ch.examined["cart-whole"] += 1
                home = recs.get(rec["part_of"])
                if home is None and id_parts(rec["part_of"]) and id_parts(rec["part_of"])[1] in self.skus:
                    ch.fail("cart-whole", (rec["part_of"], oid), "checkpoint %s: part %s (%s) names order %s, which does not exist: a partial cart" % (
                        cp, oid, rec.get("status"), rec["part_of"]), [])
        if final:
            for s, m in intents.items():
                for hexid, text in m.items():
                    ch.fail("cart-whole", ("intent", s, hexid), "checkpoint %s: the cart intent %s of %s is still there after the sweepers' time: %s" % (
                        cp, hexid, s, text[:200]), [])

    def check_answers(self, cp, recs, lops):
        ch = self.run.checks
        by_key = defaultdict(set)
        for l in lops:
            if l.op != "corder":
                continue
            for a in l.attempts:
                b = a["body"] if isinstance(a["body"], dict) else {}
                if a["status"] in (200, 201) and isinstance(b.get("order_id"), str):
                    ch.examined["cart-answers"] += 1
                    oid = b["order_id"]
                    if l.key:
                        by_key[l.key].add(oid)
                    rec = recs.get(oid)
                    if rec is None:
                        ch.fail("cart-answers", oid, "checkpoint %s: order %s was answered %d but has no record" % (cp, oid, a["status"]), [a["seq"]])
                        continue
                    want = sorted((i["sku"], int(i["quantity"])) for i in l.args["items"])
                    if sorted(items_of(rec)) != want:
                        ch.fail("cart-answers", oid, "checkpoint %s: order %s's record has items %s, the request asked %s" % (
                            cp, oid, sorted(items_of(rec)), want), [a["seq"]])
        for k, oids in by_key.items():
            if len(oids) > 1:
                ch.fail("cart-answers", k, "checkpoint %s: Idempotency-Key %s answered with %d orders: %s" % (cp, k, len(oids), sorted(oids)), [])

    def check_group(self, cp, recs):
        ch = self.run.checks
        held = Counter()
        gs = set(self.group_skus)
        for oid, rec in recs.items():
            if rec.get("part_of") is not None or rec.get("status") not in LIVE or not rec.get("user_id"):
                continue
            n = sum(q for s, q in items_of(rec) if s in gs)
            if n:
                held[rec["user_id"]] += n
        ch.examined["group-limit"] += 1
        for u, n in held.items():
            if n > GROUP_LIMIT:
                ch.fail("group-limit", (u, cp), "checkpoint %s: user %s holds %d live units of the group %s (limit %d)" % (
                    cp, u, n, self.group, GROUP_LIMIT), [])

    def report_lines(self, lops):
        out = []
        st = Counter()
        for l in lops:
            if l.op == "corder":
                last = l.ack["status"] if l.ack else ([a["status"] for a in l.attempts][-1:] or [None])[0]
                st[(l.args.get("kind"), last)] += 1
        out.append("- cart and group orders by kind and last answer: %s" % (
            ", ".join("%s %s ×%d" % (k, s, n) for (k, s), n in sorted(st.items(), key=str)) or "none"))
        ends = Counter((l.op, l.ack["status"] if l.ack else ([a["status"] for a in l.attempts][-1:] or [None])[0])
                       for l in lops if l.op in ("ccancel", "cconfirm", "cextend"))
        out.append("- cancels, confirms and extends by last answer: %s" % (
            ", ".join("%s %s ×%d" % (o, s, n) for (o, s), n in sorted(ends.items(), key=str)) or "none"))
        return out
