"""loadtest/chaos_queue.py — the waiting room (SPEC §16, issue 32) in chaos.py's history: its
SKUs, its clients and its checks. Imported by chaos.py (Python 3 standard library only); the
nemesis (chaos.sh) knows nothing of it: its faults hit these SKUs as any other (an instance
killed -9 or stopped, Redis killed -9 and restarted from its AOF, on a cluster the master of a
SKU's own keys, which is where the gate lives).

Two SKUs with a waiting room, names of their own (`chaos<seed>-qf`, `chaos<seed>-qs`): qf FIFO
(queue_fifo 1, queue_max_active QF_MAX_ACTIVE), qs shuffled with its sale_start SALE_START_S
after its PUT, so the fair start's shuffle happens under traffic and faults; both with stock
small enough to sell out, tickets that live TICKET_TTL_S, qs with holds of 2 s that expire or
are confirmed; restocks and cancels give units back. The verified user is the X-User header
(the instances run with --user-header X-User --trusted-proxies 127.0.0.1/32).

The queue clients (--queue-clients threads beside chaos.py's) join (new users; a second join of
a user now and then), poll places (the next poll loosely after retry_after_s), order with the
tickets their polls got (with and without Idempotency-Key, a replay with the same key, the same
ticket from two threads at once, a used ticket again, another user's or SKU's ticket, a forged
one, none, one sent after its expiry), pause and resume admission (PATCH queue_paused 1, then 0
0.2-0.8 s later by the same client), change queue_rate, restock and cancel. Every attempt is a
line of history.jsonl (ops q*), as chaos.py's.

The checks (QCHECKS; docs/reliability.md "The waiting room in the history") are made at every
checkpoint from Redis's gate keys, the segments' order records and the history, and at the end
from the history alone.
"""

import bisect
import hashlib
import random
import threading
import time
from collections import Counter, defaultdict

QUEUE_USERS = 400       # users per SKU, at least: more than the stock and the rate serve in a run
USERS_PER_S = 7         # and this many per second of traffic (--long: 4,200)
CROWD = 250             # of whom join at the opening, at once
TICKET_TTL_S = 5        # short, so that tickets expire during a run and give their budget back
QF_MAX_ACTIVE = 8
SALE_START_S = 4.0      # qs's sale_start after its PUT's answer
RATES = (20, 30, 40, 50)
TWO52 = 2 ** 52
# Redis's TIME and time.time() are this machine's clock: admission times (exp - ttl) are compared
# with answer times allowing this much (ms rounding, scheduling).
CLOCK_SLACK_S = 0.02
# The order modes of a ticketed order and their weights (module comment).
MODES = (("keyed", 30), ("keyless", 15), ("double", 10), ("replay", 6), ("reuse", 5), ("other_user", 6),
         ("other_sku", 6), ("forged", 6), ("none", 6), ("late", 4))
# Modes whose order must never be 201/200 (the ticket is not the caller's, not the SKU's, not a
# ticket at all, or expired on Redis's clock when sent).
REFUSED = {"other_user": (403,), "other_sku": (403,), "forged": (403,), "none": (403,), "late": (403,)}

QCHECKS = [
    ("queue-places", "waiting room (SPEC §16): every acknowledged join's place is in Redis's line (inv:2:{S}:q:line) exactly once and is the place answered (the position of every join and poll answer = ZRANK + 1, after the start for shuffled places); no member without a join; seq = the line's length; shuffled SKU: every pre-start member's score is the published formula of the seed (sha1(seed .. user), 52 bits), a join answered before the start is among them, one begun after it behind all of them"),
    ("queue-fifo", "admission follows the places: each admission entry's number is its user's rank, exactly the ranks below `served` are admitted, issued = the entries; on the FIFO SKU a join answered 201 before another began has the smaller rank, and the admission times (exp - ttl) never decrease with the rank"),
    ("queue-tickets", "at most one order per ticket (the 201/200 answers carrying one ticket name one order id, across instances, retries, replays and two clients at once); no 201/200 for another user's or SKU's ticket, a forged one, none, or one sent after its expiry; in Redis every order record of a gated SKU is a user's who was admitted, at most as many per user as tickets that user got"),
    ("queue-budget", "tickets issued - tickets expired unused ≤ k × (units ever available: the PUT's stock + restocks (unknown ones too) + units returned by cancels and expired holds) / 100 + the admissions observed lost to a failover; at every admission, the tickets certainly live then (admitted, not expired, not yet sent in an order answered 201) ≤ queue_max_active"),
    ("queue-sold-out", "at a quiet checkpoint whose exact status says remaining + reserved = 0, one second later every place not admitted answers sold_out, on any instance"),
    ("queue-pause", "no admission (an admission entry or a polled ticket whose exp - ttl is on Redis's clock) after a PATCH queue_paused 1 was answered and before its resume was sent"),
]

# Reads a SKU's gate at one moment. KEYS: q, q:line, q:adm, q:live, meta (one slot, {S}).
GATE_LUA = """
local t = redis.call('TIME')
return {redis.call('HGETALL', KEYS[1]), redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES'),
        redis.call('HGETALL', KEYS[3]), redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES'),
        redis.call('HGETALL', KEYS[5]), t[1], t[2]}
"""


def answer(lop):
    """The body of a logical operation's 2xx answer (a read's too, whose effect is none), or {}."""
    for a in reversed(lop.attempts):
        if a["status"] is not None and 200 <= a["status"] < 300 and isinstance(a["body"], dict):
            return a["body"]
    return {}


def qops():
    return ("qput", "qjoin", "qpoll", "qorder", "qpatch", "qrestock", "qcancel", "qconfirm", "qstatus")


def shuffle_key(seed, user):
    """The fair start's score of a pre-start place (docs/design.md "The fair start")."""
    return int(hashlib.sha1((seed + user).encode()).hexdigest()[:13], 16)


def ticket_parts(t):
    """(n, exp_ms) of a ticket's text t1.<sku>.<user>.<n>.<exp>.<mac>, or None."""
    p = t.split(".") if isinstance(t, str) else []
    if len(p) != 6 or p[0] != "t1":
        return None
    try:
        return int(p[3]), int(p[4])
    except ValueError:
        return None


def forge(t):
    """t with one character of its MAC changed."""
    head, mac = t.rsplit(".", 1)
    c = "A" if mac[0] != "A" else "B"
    return head + "." + c + mac[1:]


class QueueRoom:
    def __init__(self, run, chaos):
        self.run, self.c = run, chaos
        a = run.a
        tag = "chaos%d" % (a.seed % 1000)
        self.skus = [tag + "-qf", tag + "-qs"]
        rr = random.Random("%d/queue" % a.seed)
        self.conf = {
            # qf's stock by the run's length (its give-backs stop halfway: it sells out)
            self.skus[0]: {"stock": rr.randint(max(8, a.duration // 4), max(12, a.duration // 3)), "segments": 2, "queue_rate": rr.choice(RATES), "queue_fifo": 1,
                           "queue_max_active": QF_MAX_ACTIVE, "queue_ticket_ttl_s": TICKET_TTL_S},
            self.skus[1]: {"stock": rr.randint(25, 35), "segments": 3, "queue_rate": rr.choice(RATES), "queue_fifo": 0,
                           "queue_admit_pct": 100, "queue_ticket_ttl_s": TICKET_TTL_S, "reservation_ttl_s": 2},
        }
        self.users = {s: ["q%d-%s-%d" % (a.seed % 1000, s[-2:], i) for i in range(max(QUEUE_USERS, USERS_PER_S * a.duration))] for s in self.skus}
        self.lock = threading.Lock()
        self.joined = {s: set() for s in self.skus}
        self.next_poll = {s: {} for s in self.skus}     # user -> when to poll again (now())
        self.pos = {s: {} for s in self.skus}           # user -> the last position answered
        self.final = {s: set() for s in self.skus}      # users whose place is used/expired/sold out
        self.tickets = {s: {} for s in self.skus}       # user -> (ticket, exp wall s) not yet used
        self.used = {s: {} for s in self.skus}          # user -> ticket used (201)
        self.orders = []                                # (order id, sku, hold) of 201 ticketed orders
        self.pausing = {s: threading.Lock() for s in self.skus}
        self.sale_start = {}                            # sku -> wall s
        self.put_stock = {}
        self.sold_out_checked = 0
        self.pause_excused = set()      # (sku, pause lop) a resume of unknown outcome may have ended

    # -- clients --
    def headers(self, user):
        return {"X-User": user}

    def put(self, rng):
        for s in self.skus:
            args = dict(self.conf[s])
            if not args["queue_fifo"]:
                st = time.time() + SALE_START_S
                self.sale_start[s] = st
                args["sale_start"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(st)) + ".%03dZ" % (int(st * 1000) % 1000)
            lop = self.run.new_lop("qput", s, -1, args, True)
            self.run.execute(rng, lop, "PUT", "/api/v1/skus/" + s, args, admin=True)
            if lop.final != "acked":
                raise self.c.Infra("the waiting room's PUT of %s was not answered 2xx: %s" % (s, [x["status"] for x in lop.attempts]))
            self.put_stock[s] = args["stock"]
        self.crowd()

    def crowd(self):
        """The crowd at the opening: CROWD users of each SKU join at once (8 threads), before
        qs's sale_start (its fair start shuffles them) and far more than the stock and the rate
        serve, so that the line is long, the budget binds and places wait."""
        def joiner(j):
            r = random.Random("%d/crowd/%d" % (self.run.a.seed, j))
            for s in self.skus:
                for u in self.users[s][j:CROWD:8]:
                    with self.lock:
                        self.joined[s].add(u)
                    lop = self.run.new_lop("qjoin", s, -2, {"user": u}, False)
                    self.run.execute(r, lop, "POST", "/api/v1/skus/%s/queue" % s, None, headers=self.headers(u))
                    with self.lock:
                        self.next_poll[s].setdefault(u, self.c.now() + r.uniform(0.2, 2.0))
        th = [threading.Thread(target=joiner, args=(j,)) for j in range(8)]
        for t in th:
            t.start()
        for t in th:
            t.join()

    def join(self, rng, thr, s):
        with self.lock:
            js = self.joined[s]
            fresh = [u for u in self.users[s] if u not in js]
            again = rng.random() < 0.1 and js
            if not fresh and not again:
                return None
            u = rng.choice(sorted(js)) if again or not fresh else rng.choice(fresh)
            js.add(u)
        lop = self.run.new_lop("qjoin", s, thr, {"user": u}, False)
        self.run.execute(rng, lop, "POST", "/api/v1/skus/%s/queue" % s, None, headers=self.headers(u))
        with self.lock:
            self.next_poll[s].setdefault(u, self.c.now() + 0.2)
        return lop

    def poll(self, rng, thr, s, u=None):
        with self.lock:
            t = self.c.now()
            if u is None:
                due = sorted(x for x, w in self.next_poll[s].items() if w <= t and x not in self.final[s])
                if not due:
                    return None
                # of 4 due places, the one nearest the front (it was told to come back soonest)
                u = min(rng.sample(due, min(4, len(due))), key=lambda x: self.pos[s].get(x, 0))
        lop = self.run.new_lop("qpoll", s, thr, {"user": u}, False)
        self.run.execute(rng, lop, "GET", "/api/v1/skus/%s/queue" % s, headers=self.headers(u))
        b = answer(lop)
        st = b.get("state")
        with self.lock:
            if isinstance(b.get("position"), int):
                self.pos[s][u] = b["position"]
            ra = b.get("retry_after_s")
            # loosely: a fraction of what the place was told (the run is short)
            self.next_poll[s][u] = self.c.now() + (min(3.0, ra * rng.uniform(0.2, 0.6)) if isinstance(ra, int) else rng.uniform(0.3, 1.0))
            if st == "admitted" and isinstance(b.get("ticket"), str):
                tp = ticket_parts(b["ticket"])
                if tp and u not in self.used[s]:
                    self.tickets[s][u] = (b["ticket"], tp[1] / 1000.0)
            elif st in ("used", "expired"):
                self.final[s].add(u)
                self.tickets[s].pop(u, None)
            fresh = st == "admitted" and u in self.tickets[s]
        # most admitted buyers buy at once (the others later, or never: their tickets expire)
        if fresh and thr >= 0 and rng.random() < 0.6:
            self.order(rng, thr, s, who=u)
        return lop

    def send_order(self, rng, thr, s, user, ticket, mode, key):
        args = {"sku": s, "quantity": 1, "mode": mode, "as_user": user}
        body = {"sku": s, "quantity": 1}
        if ticket is not None:
            args["ticket"] = ticket
            body["ticket"] = ticket
        lop = self.run.new_lop("qorder", s, thr, args, key)
        self.run.execute(rng, lop, "POST", "/api/v1/orders", body, headers=self.headers(user))
        b = lop.ack["body"] if lop.ack and isinstance(lop.ack["body"], dict) else {}
        if isinstance(b.get("order_id"), str) and lop.ack["status"] == 201:
            with self.lock:
                self.orders.append((b["order_id"], s, b.get("status") == "reserved"))
                if mode in ("keyed", "keyless", "double", "replay"):
                    self.used[s][user] = ticket
                    self.tickets[s].pop(user, None)
        return lop

    def order(self, rng, thr, s, who=None):
        """A ticketed order in a mode of MODES; who: the user a poll just admitted, who buys at
        once (a legitimate mode)."""
        if who:
            mode = rng.choice(("keyed", "keyed", "keyless", "double", "replay"))
        else:
            mode = rng.choices([m for m, _ in MODES], [w for _, w in MODES])[0]
        wall = time.time()
        with self.lock:
            if mode == "reuse":
                cands = sorted(self.used[s].items())
            else:
                cands = sorted((u, t) for u, (t, e) in self.tickets[s].items() if (e > wall + 0.1) != (mode == "late"))
            if who:
                cands = [c for c in cands if c[0] == who]
            if not cands:
                return None
            u, t = cands[rng.randrange(len(cands))]
            others = [x for x in self.users[s] if x != u]
            osku = [x for x in self.skus if x != s and self.tickets[x]]
            ot = sorted(self.tickets[osku[0]].items())[0] if osku else None
        if mode == "late":
            exp = ticket_parts(t)[1] / 1000.0
            if exp + 0.1 > wall and not self.run.nap(exp + 0.1 - wall):
                return None
        if mode == "double":
            lops = []
            # two clients, each its own random stream (drawn here, so the seed's sequence stays)
            two = [(rng.random() < 0.5, random.Random(rng.random())) for _ in range(2)]
            th = [threading.Thread(target=lambda k=k, r=r: lops.append(self.send_order(r, thr, s, u, t, mode, k)))
                  for k, r in two]
            for x in th:
                x.start()
            for x in th:
                x.join()
            return lops[0] if lops else None
        if mode == "other_user":
            return self.send_order(rng, thr, s, rng.choice(others), t, mode, rng.random() < 0.5)
        if mode == "other_sku":
            if ot is None:
                return None
            return self.send_order(rng, thr, s, ot[0], ot[1][0], mode, rng.random() < 0.5)
        if mode == "forged":
            return self.send_order(rng, thr, s, u, forge(t), mode, rng.random() < 0.5)
        if mode == "none":
            return self.send_order(rng, thr, s, u, None, mode, rng.random() < 0.5)
        if mode == "replay":
            lop = self.send_order(rng, thr, s, u, t, mode, True)
            # the same key again: the same order (a new lop sharing the key)
            again = self.run.new_lop("qorder", s, thr, dict(lop.args, replay_of=lop.id), False)
            again.key = lop.key
            self.run.execute(rng, again, "POST", "/api/v1/orders", {"sku": s, "quantity": 1, "ticket": t}, headers=self.headers(u))
            return again
        return self.send_order(rng, thr, s, u, t, mode, mode != "keyless" and not (mode == "reuse" and rng.random() < 0.5))

    def pause_resume(self, rng, thr, s):
        """PATCH queue_paused 1, 0.2-0.8 s, then 0, tried until answered (≤ 10 times, also while a
        checkpoint waits: a room left paused would stop the sale)."""
        with self.pausing[s]:
            lop = self.run.new_lop("qpatch", s, thr, {"queue_paused": 1}, False)
            self.run.execute(rng, lop, "PATCH", "/api/v1/skus/" + s, {"queue_paused": 1}, admin=True)
            time.sleep(rng.uniform(0.2, 0.8))
            for _ in range(10):
                r = self.run.new_lop("qpatch", s, thr, {"queue_paused": 0}, False)
                self.run.execute(rng, r, "PATCH", "/api/v1/skus/" + s, {"queue_paused": 0}, admin=True)
                if r.final == "acked":
                    return r
                time.sleep(0.2)
            return None

    def rate(self, rng, thr, s):
        args = {"queue_rate": rng.choice(RATES)}
        lop = self.run.new_lop("qpatch", s, thr, args, False)
        return self.run.execute(rng, lop, "PATCH", "/api/v1/skus/" + s, args, admin=True)

    def giving_back(self, s):
        """Restocks and cancels of qf stop halfway through the traffic, so that it sells out and
        the checkpoints after find its places sold_out (qs's holds still give units back)."""
        return s != self.skus[0] or self.run.traffic_now() < self.run.a.duration / 2.0

    def restock(self, rng, thr, s):
        if not self.giving_back(s):
            return None
        args = {"quantity": rng.randint(1, 2)}
        lop = self.run.new_lop("qrestock", s, thr, args, True)
        return self.run.execute(rng, lop, "POST", "/api/v1/skus/%s/restock" % s, args, admin=True)

    def cancel(self, rng, thr):
        with self.lock:
            if not self.orders:
                return None
            oid, s, _ = self.orders[rng.randrange(len(self.orders))]
        if not self.giving_back(s):
            return None
        lop = self.run.new_lop("qcancel", s, thr, {"order_id": oid}, False)
        return self.run.execute(rng, lop, "DELETE", "/api/v1/orders/" + oid, admin=True)

    def confirm(self, rng, thr):
        with self.lock:
            holds = [(o, s) for o, s, h in self.orders[-50:] if h]
            if not holds:
                return None
            oid, s = holds[rng.randrange(len(holds))]
        lop = self.run.new_lop("qconfirm", s, thr, {"order_id": oid}, False)
        return self.run.execute(rng, lop, "POST", "/api/v1/orders/%s/confirm" % oid, admin=True)

    def client(self, i):
        run = self.run
        rng = random.Random("%d/qclient/%d" % (run.a.seed, i))
        thr = 2000 + i
        while not run.stop.is_set():
            if run.pause.is_set():
                run.hold_idle()
                continue
            s = rng.choice(self.skus)
            x = rng.random() * 100
            if x < 25:
                done = self.join(rng, thr, s)
            elif x < 60:
                done = self.poll(rng, thr, s)
            elif x < 90.5:
                done = self.order(rng, thr, s)
            elif x < 90.7:
                # 0.2 %: with six clients a pause of 0.2-0.8 s every ~4 s per SKU, the room
                # paused ~10 % of the time
                done = self.pause_resume(rng, thr, s)
            elif x < 91:
                done = self.rate(rng, thr, s)
            elif x < 92:
                done = self.restock(rng, thr, s)
            elif x < 95:
                done = self.cancel(rng, thr)
            else:
                done = self.confirm(rng, thr)
            if done is None:
                time.sleep(0.02)
            elif run.a.think_ms:
                time.sleep(rng.uniform(0, run.a.think_ms / 1000.0))

    # -- checks at a checkpoint --
    def read(self, rds, s):
        """The gate of s at one moment (one script on its slot): its counters, the line in rank
        order with the scores, the admission entries, the live tickets, the meta, Redis's now."""
        keys = [self.c.KEYS.sku(s, x) for x in ("q", "q:line", "q:adm", "q:live", "meta")]
        r = rds.cmd("EVAL", GATE_LUA, len(keys), *keys)
        if not isinstance(r, list) or len(r) != 7:
            raise self.c.Infra("cannot read the gate of %s: %s" % (s, r))
        line = r[1]
        return {"q": self.c.pairs(r[0]), "line": self.c.pairs(line), "order": line[0::2], "adm": self.c.pairs(r[2]),
                "live": self.c.pairs(r[3]), "meta": self.c.pairs(r[4]), "now_ms": int(r[5]) * 1000 + int(r[6]) // 1000}

    def checkpoint(self, cp, final):
        run, ch = self.run, self.run.checks
        t0 = self.c.now()
        try:
            rds = run.redis(10.0)
            try:
                gates = {s: self.read(rds, s) for s in self.skus}
                snaps = {s: ch.snapshot(rds, s) for s in self.skus}
            finally:
                rds.close()
        except (OSError, ConnectionError) as e:
            raise self.c.Infra("cannot read the waiting room at checkpoint %s: %s" % (cp, e))
        with run.lock:
            lops = [l for l in run.lops if l.sku in self.skus]
        # SPEC §8 of the gated SKUs (verify.sh, as for chaos.py's SKUs), both at once and beside
        # the checks below: a checkpoint of --short costs ~0.5 s more, not ~1.5 s
        vs = [threading.Thread(target=ch.verify_sh, args=(cp, s), kwargs={"status": sum(len(x.get("due", {})) for x in snaps[s]["segs"].values()) == 0})
              for s in self.skus if snaps[s]["meta"]]
        for t in vs:
            t.start()
        for s in self.skus:
            g, snap = gates[s], snaps[s]
            ops = defaultdict(list)
            for l in lops:
                if l.sku == s:
                    ops[l.op].append(l)
            self.check_places(cp, s, g, ops)
            lost = self.check_admissions(cp, s, g, ops)
            self.check_orders(cp, s, g, snap, ops)
            self.check_budget(cp, s, g, snap, ops, lost)
            self.check_pause(cp, s, g, ops)
        t1 = self.c.now()
        self.check_sold_out(cp, gates)
        t2 = self.c.now()
        for t in vs:
            t.join()
        self.c.log("checkpoint %s: the waiting room checked in %.1f s (Redis and history %.1f s, sold-out polls %.1f s, verify.sh %.1f s more)" % (
            cp, self.c.now() - t0, t1 - t0, t2 - t1, self.c.now() - t2))

    @staticmethod
    def answers(lops):
        """(lop, attempt, body) of every 200/201 answer."""
        for l in lops:
            for a in l.attempts:
                if a["status"] in (200, 201) and isinstance(a["body"], dict):
                    yield l, a, a["body"]

    def check_places(self, cp, s, g, ops):
        ch = self.run.checks
        line, order = g["line"], g["order"]
        rank = {u: i for i, u in enumerate(order)}
        seq = self.c.as_int(g["q"].get("seq")) or 0
        ch.examined["queue-places"] += 1
        if seq != len(order):
            ch.fail("queue-places", (s, "seq"), "checkpoint %s, %s: seq %d but the line holds %d places" % (cp, s, seq, len(order)), [])
        sent = {l.args["user"] for l in ops["qjoin"] if any(a["sent"] for a in l.attempts)}
        for u in order:
            if u not in sent:
                ch.fail("queue-places", (s, "phantom", u), "checkpoint %s, %s: user %s has a place but no join was sent for it" % (cp, s, u), [])
        shuffled = g["q"].get("shuffled") == "1" or bool(self.conf[s]["queue_fifo"])
        for l, a, b in self.answers(ops["qjoin"] + ops["qpoll"]):
            u = l.args["user"]
            ch.examined["queue-places"] += 1
            if u not in rank:
                ch.fail("queue-places", (s, "lost", u), "checkpoint %s, %s: %s answered %d for %s's place (%s) but the line does not hold it" % (
                    cp, s, l.op, a["status"], u, b.get("state")), l.seqs())
                continue
            pos = b.get("position")
            if pos is None:
                if self.conf[s]["queue_fifo"] or b.get("state") != "waiting_for_start":
                    ch.fail("queue-places", (s, "nopos", u), "checkpoint %s, %s: %s's place answered without a position in state %r" % (
                        cp, s, u, b.get("state")), [a["seq"]])
                continue
            if shuffled and pos != rank[u] + 1:
                ch.fail("queue-places", (s, "pos", u), "checkpoint %s, %s: %s's place answered position %s, the line's rank is %d (+1)" % (
                    cp, s, u, pos, rank[u]), [a["seq"]])
        if not self.conf[s]["queue_fifo"] and g["q"].get("shuffled") == "1":
            seed = g["q"].get("seed") or ""
            st = self.sale_start[s]
            for u, sc in line.items():
                sc = float(sc)
                if sc < TWO52 and sc != shuffle_key(seed, u):
                    ch.fail("queue-places", (s, "perm", u), "checkpoint %s, %s: pre-start place of %s scored %r, the seed's formula gives %d" % (
                        cp, s, u, sc, shuffle_key(seed, u)), [])
            for l, a, b in self.answers(ops["qjoin"]):
                u = l.args["user"]
                if u not in line:
                    continue
                pre = float(line[u]) < TWO52
                if a["w1"] < st - CLOCK_SLACK_S and a["status"] == 201 and not pre:
                    ch.fail("queue-places", (s, "prestart", u), "checkpoint %s, %s: %s joined (201) before the start but is not among the shuffled places" % (
                        cp, s, u), [a["seq"]])
                if l.attempts[0]["w0"] > st + CLOCK_SLACK_S and a["status"] == 201 and pre:
                    ch.fail("queue-places", (s, "poststart", u), "checkpoint %s, %s: %s joined after the start but got a pre-start place" % (
                        cp, s, u), [a["seq"]])

    def check_admissions(self, cp, s, g, ops):
        """queue-fifo; returns the tickets polls saw that Redis no longer has (admissions lost)."""
        ch = self.run.checks
        order, adm = g["order"], g["adm"]
        rank = {u: i for i, u in enumerate(order)}
        served = self.c.as_int(g["q"].get("served")) or 0
        issued = self.c.as_int(g["q"].get("issued")) or 0
        ch.examined["queue-fifo"] += 1 + len(adm)
        if issued != len(adm):
            ch.fail("queue-fifo", (s, "issued"), "checkpoint %s, %s: issued %d but %d admission entries" % (cp, s, issued, len(adm)), [])
        for u, v in adm.items():
            if u not in rank:
                ch.fail("queue-fifo", (s, "admnoplace", u), "checkpoint %s, %s: %s is admitted (%s) without a place" % (cp, s, u, v), [])
                continue
            if rank[u] >= served and not v.startswith("used:"):
                ch.fail("queue-fifo", (s, "beyond", u), "checkpoint %s, %s: %s admitted (%s) at rank %d, served is %d" % (cp, s, u, v, rank[u], served), [])
            if not v.startswith("used:") and self.c.as_int(v.split(":")[0]) != rank[u]:
                ch.fail("queue-fifo", (s, "n", u), "checkpoint %s, %s: %s's admission number %s is not its rank %d" % (cp, s, u, v, rank[u]), [])
        for u in order[:served]:
            if u not in adm:
                ch.fail("queue-fifo", (s, "missing", u), "checkpoint %s, %s: rank %d (%s) is below served %d but has no admission entry" % (
                    cp, s, rank[u], u, served), [])
        # admission times along the ranks (FIFO and shuffled alike: the step admits in rank order)
        ttl = (self.c.as_int(g["meta"].get("q_ttl")) or 120) * 1000
        times = sorted((int(v.split(":")[0]), int(v.split(":")[1]) - ttl) for v in adm.values() if not v.startswith("used:"))
        for (n1, t1), (n2, t2) in zip(times, times[1:]):
            if t2 < t1:
                ch.fail("queue-fifo", (s, "inv", n1), "checkpoint %s, %s: rank %d admitted at %d ms, rank %d earlier at %d ms" % (cp, s, n1, t1, n2, t2), [])
        if self.conf[s]["queue_fifo"]:
            # each 201 join against the smallest rank among the joins begun after its answer
            # (by first attempt; a suffix minimum over them sorted by that time: n log n)
            js = sorted((l.attempts[0]["w0"], a["w1"], l.args["user"], a["seq"]) for l, a, b in self.answers(ops["qjoin"])
                        if a["status"] == 201 and l.args["user"] in rank)
            w0s = [x[0] for x in js]
            suf, best = [None] * len(js), (float("inf"), -1)
            for i in range(len(js) - 1, -1, -1):
                if rank[js[i][2]] < best[0]:
                    best = (rank[js[i][2]], i)
                suf[i] = best
            for w0, w1, u, sq in js:
                k = bisect.bisect_right(w0s, w1)
                if k < len(js) and suf[k][0] < rank[u]:
                    ub, sqb = js[suf[k][1]][2], js[suf[k][1]][3]
                    ch.fail("queue-fifo", (s, "joinorder", u, ub), "checkpoint %s, %s: %s joined (answered 201) before %s's join began, yet has rank %d > %d" % (
                        cp, s, u, ub, rank[u], rank[ub]), [sq, sqb])
        # tickets the polls got that the gate no longer names (an admission lost in a failover)
        lost = set()
        for l, a, b in self.answers(ops["qpoll"]):
            tp = ticket_parts(b.get("ticket"))
            u = l.args["user"]
            if tp and adm.get(u) != "%d:%d" % tp and not (adm.get(u) or "").startswith("used:"):
                lost.add((u, tp))
        return lost

    def tickets_seen(self, ops):
        """ticket text -> (user, n, exp_ms, first seq) of every ticket an admitted poll answered."""
        seen = {}
        for l, a, b in self.answers(ops["qpoll"]):
            tp = ticket_parts(b.get("ticket"))
            if tp and b["ticket"] not in seen:
                seen[b["ticket"]] = (l.args["user"], tp[0], tp[1], a["seq"])
        return seen

    def check_orders(self, cp, s, g, snap, ops):
        ch = self.run.checks
        by_ticket = defaultdict(set)
        for l, a, b in self.answers(ops["qorder"]):
            ch.examined["queue-tickets"] += 1
            mode = l.args["mode"]
            if mode in REFUSED:
                late = mode == "late" and l.attempts[0]["w0"] < ticket_parts(l.args["ticket"])[1] / 1000.0 + CLOCK_SLACK_S
                if not late:
                    ch.fail("queue-tickets", (s, "refused", l.id), "checkpoint %s, %s: an order with %s was answered %d (order %s)" % (
                        cp, s, {"other_user": "another user's ticket", "other_sku": "another SKU's ticket", "forged": "a forged ticket",
                                "none": "no ticket", "late": "a ticket past its expiry"}[mode], a["status"], b.get("order_id")), [a["seq"]])
            if isinstance(b.get("order_id"), str) and l.args.get("ticket"):
                by_ticket[l.args["ticket"]].add((b["order_id"], a["seq"]))
        for t, oids in by_ticket.items():
            if len({o for o, _ in oids}) > 1:
                ch.fail("queue-tickets", (s, "twice", t), "checkpoint %s, %s: one ticket made %d orders: %s" % (
                    cp, s, len({o for o, _ in oids}), ", ".join(sorted({o for o, _ in oids}))), sorted(q for _, q in oids))
        # Redis: every order record is an admitted user's, at most one per ticket the user got
        got = Counter(u for u, n, e, _ in self.tickets_seen(ops).values())
        for u, v in g["adm"].items():
            got[u] = max(got[u], 1)
        n = self.c.as_int(snap["meta"].get("segments")) or 0
        per_user = Counter()
        for oid, (k, rec) in ch.records_of(snap, n).items():
            if not isinstance(rec, dict):
                continue
            u = rec.get("user_id")
            per_user[u] += 1
            ch.examined["queue-tickets"] += 1
            if not got[u]:
                ch.fail("queue-tickets", (s, "noticket", oid), "checkpoint %s, %s: order %s of user %r, who was never admitted" % (cp, s, oid, u), [])
        for u, c in per_user.items():
            if got[u] and c > got[u]:
                ch.fail("queue-tickets", (s, "peruser", u), "checkpoint %s, %s: user %s has %d orders in Redis, %d ticket(s)" % (cp, s, u, c, got[u]), [])

    def check_budget(self, cp, s, g, snap, ops, lost):
        ch = self.run.checks
        k = self.c.as_int(g["meta"].get("q_pct")) or 150
        n = self.c.as_int(snap["meta"].get("segments")) or 0
        returned = sum(self.c.units(rec) for _, (kk, rec) in ch.records_of(snap, n).items()
                       if isinstance(rec, dict) and rec.get("status") in ("cancelled", "expired"))
        restocks = sum(l.args["quantity"] for l in ops["qrestock"] if l.final in ("acked", "unknown"))
        avail = self.put_stock[s] + restocks + returned
        issued = self.c.as_int(g["q"].get("issued")) or 0
        expired = sum(1 for v in g["adm"].values() if not v.startswith("used:") and int(v.split(":")[1]) < g["now_ms"])
        bound = k * avail // 100 + len(lost)
        ch.examined["queue-budget"] += 1
        ch.budget_notes = getattr(ch, "budget_notes", [])
        ch.budget_notes.append("%s %s: issued %d, expired unused %d, units available %d (stock %d + restocks %d + returned %d), k %d %%, lost admissions %d: %d ≤ %d" % (
            cp, s, issued, expired, avail, self.put_stock[s], restocks, returned, k, len(lost), issued - expired, bound))
        if issued - expired > bound:
            ch.fail("queue-budget", (s, "issued", cp), "checkpoint %s, %s: tickets issued %d - expired unused %d > k %d %% × %d units available (stock %d + restocks %d + returned %d) + %d lost = %d" % (
                cp, s, issued, expired, k, avail, self.put_stock[s], restocks, returned, len(lost), bound), [])
        # k = 100 %: every unit is sold by a ticket that was live at the step that admitted it
        # (or counted in fin - fin_seen there), so at a quiet checkpoint the live tickets not
        # (maybe) used — no order with them answered 201 or of unknown outcome — are at most the
        # units remaining: L + n ≤ R at each step, and each later sale takes one from both.
        # (With k > 100 % a sale takes one unit from R but k/100 from the budget: no such bound.)
        # The gate was read before the segments, and during the quiet R only grows (holds expire).
        if k == 100:
            maybe_used = set()
            for l in ops["qorder"]:
                tp = ticket_parts(l.args.get("ticket"))
                if tp and any(a["eff"] in (self.c.YES, self.c.MAYBE) for a in l.attempts):
                    maybe_used.add((l.args["as_user"], tp[1]))
            live = sorted(u for u, v in g["adm"].items() if not v.startswith("used:") and int(v.split(":")[1]) > g["now_ms"]
                          and (u, int(v.split(":")[1])) not in maybe_used)
            rem = sum(x["stock"] or 0 for x in snap["segs"].values())
            ch.examined["queue-budget"] += 1
            ch.budget_notes.append("%s %s: %d live tickets not used, %d units remaining, k 100 %%" % (cp, s, len(live), rem))
            if len(live) > rem + len(lost):
                ch.fail("queue-budget", (s, "live", cp), "checkpoint %s, %s: %d live tickets not used (%s) for %d units remaining (k 100 %%)%s" % (
                    cp, s, len(live), ", ".join(live)[:200], rem, " + %d lost admissions" % len(lost) if lost else ""), [])
        cap = self.conf[s].get("queue_max_active")
        if not cap:
            return
        ttl = (self.c.as_int(g["meta"].get("q_ttl")) or 120) * 1000
        tix = {}        # (user, exp) -> admission ms
        for u, v in g["adm"].items():
            if not v.startswith("used:"):
                tix[(u, int(v.split(":")[1]))] = int(v.split(":")[1]) - ttl
        for t, (u, n_, e, _) in self.tickets_seen(ops).items():
            tix[(u, e)] = e - ttl
        # A ticket stops being certainly live when an order that may have used it is sent: one
        # answered 201, and one of unknown outcome (no answer, a 5xx that may have changed
        # something: the gate marks the ticket used once the order is made, answer or not).
        first_use = {}
        for l in ops["qorder"]:
            tp = ticket_parts(l.args.get("ticket"))
            if tp and l.args["mode"] not in REFUSED and l.attempts and any(a["eff"] in (self.c.YES, self.c.MAYBE) for a in l.attempts):
                key = (l.args["as_user"], tp[1])
                first_use[key] = min(first_use.get(key, 1e18), l.attempts[0]["w0"] * 1000)
        # live at t: admitted at or before t, t before min(expiry, first use): a sweep, n log n
        spans = [(at, min(x[1], first_use.get(x, 1e18)), x) for x, at in tix.items()]
        starts = sorted(a_ for a_, e_, _ in spans)
        ends = sorted(e_ for a_, e_, _ in spans if e_ > a_)
        starts_kept = sorted(a_ for a_, e_, _ in spans if e_ > a_)
        for t_a in sorted(set(starts)):
            ch.examined["queue-budget"] += 1
            n_live = bisect.bisect_right(starts_kept, t_a) - bisect.bisect_right(ends, t_a)
            if n_live > cap:
                live = [x for a_, e_, x in spans if a_ <= t_a < e_]
                ch.fail("queue-budget", (s, "active", t_a), "checkpoint %s, %s: at the admission at %d ms, %d tickets were live (queue_max_active %d): %s" % (
                    cp, s, t_a, len(live), cap, ", ".join(sorted(u for u, _ in live))[:300]), [])
                break

    def pause_windows(self, ops):
        """(answer wall s of a PATCH queue_paused 1, first attempt of the next resume, the pause's
        lop, the resume attempt that may land inside it or None) per SKU. A resume attempt
        without an answer (a timeout, an instance stopped or killed) may still be applied up to
        STALE_RULE_S after it was given up (chaos.py's rules-in-force has the same allowance):
        after the pause, it unpauses the room, rightly."""
        pats = sorted(ops["qpatch"], key=lambda l: l.t0)
        ev = self.run.checks.nemesis_events() or []
        stale = [(a, self.landed_by(a, ev)) for r in pats if r.args.get("queue_paused") == 0 for a in r.attempts
                 if a["sent"] and (a["status"] is None or a["status"] >= 500)]
        out = []
        for i, l in enumerate(pats):
            if l.args.get("queue_paused") != 1 or not l.ack:
                continue
            nxt = next((r for r in pats[i + 1:] if r.args.get("queue_paused") == 0 and r.t0 > l.ack["t1"]), None)
            end = nxt.attempts[0]["w0"] if nxt else float("inf")
            late = next((a for a, by in stale if a["w0"] < end and by > l.ack["w1"]), None)
            out.append((l.ack["w1"], end, l, late))
        return out

    def landed_by(self, a, ev):
        """The wall time by which an attempt without an answer has been applied or never will:
        its instance killed (kill9, flag-restart, crash: the request died with it), or let go
        after a SIGSTOP (back: + 2 s to run it; the nemesis's faults do not overlap, so Redis
        answers then), whichever comes first after it was sent; else
        STALE_RULE_S after it was given up (a request waiting on a slow Redis: its deadline)."""
        if a["status"] is not None:
            return a["w1"]      # answered (a 5xx): whatever it wrote, it wrote before its answer
        name = "inventoryd%d" % a["inst"]
        stopped = False
        for e in ev:
            t = e["t_ms"] / 1000.0
            if e.get("target") != name or t < a["w0"] - 10.0:
                continue
            if e["ev"] == "sigstop" and t < a["w1"]:
                stopped = True
            elif t >= a["w0"] and e["ev"] in ("kill9", "flag-restart", "crash"):
                return t
            elif e["ev"] == "back" and stopped and t >= a["w0"]:
                return t + 2.0
        return a["w1"] + self.c.STALE_RULE_S

    def check_pause(self, cp, s, g, ops):
        ch = self.run.checks
        ttl = (self.c.as_int(g["meta"].get("q_ttl")) or 120)
        at = {}
        for u, v in g["adm"].items():
            if not v.startswith("used:"):
                at[(u, int(v.split(":")[1]))] = int(v.split(":")[1]) / 1000.0 - ttl
        for t, (u, n_, e, sq) in self.tickets_seen(ops).items():
            at[(u, e)] = e / 1000.0 - ttl
        times = sorted((t, u) for (u, e), t in at.items())
        keys = [t for t, _ in times]
        for w1, end, l, late in self.pause_windows(ops):
            if late is not None:
                self.pause_excused.add((s, l.id))
                continue
            ch.examined["queue-pause"] += 1
            bad = [x for x in times[bisect.bisect_right(keys, w1 + CLOCK_SLACK_S):bisect.bisect_left(keys, end)]]
            if bad:
                ch.fail("queue-pause", (s, "admitted", l.id), "checkpoint %s, %s: %d admission(s) while paused (PATCH answered at %.3f, resume sent at %.3f): first %s at %.3f" % (
                    cp, s, len(bad), w1, end, bad[0][1], bad[0][0]), l.seqs())

    def check_sold_out(self, cp, gates):
        run, ch = self.run, self.run.checks
        rng = random.Random("%d/qsold/%s" % (run.a.seed, cp))
        due = []
        for s in self.skus:
            lop = run.new_lop("qstatus", s, -1, {}, False)
            run.execute(rng, lop, "GET", "/api/v1/skus/%s?consistent=1" % s, admin=True)
            b = answer(lop)
            if b.get("remaining") == 0 and b.get("reserved") == 0:
                served = self.c.as_int(gates[s]["q"].get("served")) or 0
                due.append((s, gates[s]["order"][served:]))
        if not due:
            return
        time.sleep(1.0)
        polls = []          # (sku, user, lop): 8 threads poll the places at once

        def poller(j, work):
            r = random.Random("%d/qsold/%s/%d" % (run.a.seed, cp, j))
            for s, u in work:
                polls.append((s, u, self.poll(r, -1, s, u)))
        work = [(s, u) for s, waiting in due for u in waiting[:40]]
        self.sold_out_checked += len(due)
        th = [threading.Thread(target=poller, args=(j, work[j::8])) for j in range(8)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        for s, u, lop in polls:
            ch.examined["queue-sold-out"] += 1
            b = answer(lop)
            if b.get("state") != "sold_out":
                ch.fail("queue-sold-out", (s, cp, u), "checkpoint %s, %s: nothing left (remaining 0, reserved 0) for over a second, yet %s's place answered %s" % (
                    cp, s, u, b.get("state") if b else [a["status"] for a in lop.attempts]), lop.seqs())

    # -- SUMMARY.md --
    def report_lines(self, lops):
        out = []
        modes = Counter()
        for l in lops:
            if l.op == "qorder":
                modes[(l.args["mode"], l.ack["status"] if l.ack else ([a["status"] for a in l.attempts][-1:] or [None])[0])] += 1
        out.append("- ticketed orders by mode and last answer: %s" % (", ".join("%s %s ×%d" % (m, st, n) for (m, st), n in sorted(modes.items(), key=str)) or "none"))
        states = Counter(answer(l).get("state") for l in lops if l.op == "qpoll" and answer(l))
        out.append("- place answers by state: %s" % ", ".join("%s ×%d" % kv for kv in sorted(states.items(), key=str)))
        out.append("- pauses not judged (a resume attempt without an answer may have landed in them): %d" % len(self.pause_excused))
        out.append("- quiet checkpoints that found a SKU sold out and polled its waiting places: %d" % self.sold_out_checked)
        for line in getattr(self.run.checks, "budget_notes", []):
            out.append("- budget at checkpoint " + line)
        kinds = Counter((name, subj[1]) for name, _ in QCHECKS for subj in self.run.checks.viol[name] if isinstance(subj, tuple) and len(subj) > 1)
        if kinds:
            out.append("- violations by kind: %s" % ", ".join("%s/%s ×%d" % (n, k, c) for (n, k), c in sorted(kinds.items(), key=str)))
        return out
