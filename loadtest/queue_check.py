#!/usr/bin/env python3
"""loadtest/queue_check.py — the waiting room's checks of loadtest/queue.sh (issue 32, SPEC §16),
from loadtest/qclient's files and the gate's state read from Redis (loadtest/resp.py: one
redis-server or a Redis Cluster). Python 3 standard library only. Each subcommand prints one
`NAME key=value …` line and exits 0 when its check holds, 1 when it does not, 3 when Redis could
not be read.

  joins    FIFO across instances: every join answered 201/200; its place is the user's rank + 1
           in inv:2:{S}:q:line (no place lost or moved), the line holds exactly the joined users
           and seq = ZCARD (no place doubled); inversions: pairs (i, j) where i was answered
           before j was first sent, yet i's place is behind j's (must be 0)
  admits   the admission entries inv:2:{S}:q:adm ("n:exp"; admitted at exp - ttl, Redis's
           clock): n is the user's rank; admission order = rank order (inversions: a higher
           rank admitted strictly earlier than a lower one); the admissions in every whole
           --window-s window from the first one to the last are within ±--tolerance % of --rate
  buys     qclient buy's file: orders created, refused by code, the last 201's answer time
  soldout  qclient watch's file against the last 201's answer time: how long after it each
           sampled place first answered sold_out (all within --limit-ms)
  used     how many admission entries say "used:<order>" (tickets an order consumed)
  selftest the arithmetic of joins and admits on made-up data (queue.sh runs it first)
  dump     the gate's hash and its admission entries in rank order (a record of the run)
  holds    after holds expired: ranks [0, --first) admitted before the first hold expired
           (--earliest-ms), ranks [--first, --first + --next) after it and within --limit-ms of
           the last one's expiry (--expiry-ms), nobody behind them by then
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import resp  # noqa: E402


def redis_of(args):
    if args.redis_cluster:
        return resp.Cluster(resp.parse_seeds(args.redis_cluster))
    return resp.Redis(args.redis_port)


def key(sku, suffix):
    return "inv:2:{%s}:%s" % (sku, suffix)


def text(v):
    return v.decode() if isinstance(v, bytes) else v


def line_ranks(r, sku):
    members = [text(m) for m in r.cmd("ZRANGE", key(sku, "q:line"), 0, -1)]
    return {u: i for i, u in enumerate(members)}, len(members)


def gate_field(r, sku, field):
    v = r.cmd("HGET", key(sku, "q"), field)
    return int(text(v)) if v is not None else 0


class Fenwick:
    """Counts of places seen so far, to count those greater than a given one."""

    def __init__(self, n):
        self.t = [0] * (n + 2)
        self.total = 0

    def add(self, i):
        self.total += 1
        i += 1
        while i < len(self.t):
            self.t[i] += 1
            i += i & -i

    def upto(self, i):
        s, i = 0, i + 1
        while i > 0:
            s += self.t[i]
            i -= i & -i
        return s


def fifo_inversions(joins):
    """joins: (send, answer, place) each. The pairs (i, j) with i answered before j was sent
    and i's place behind j's: answers sorted by time, joins by send, a Fenwick tree of the
    places of the joins answered before each send."""
    by_answer = sorted(joins, key=lambda x: x[1])
    fw = Fenwick(max([x[2] for x in joins] + [1]) + 1)
    inv = k = 0
    for x in sorted(joins, key=lambda x: x[0]):
        while k < len(by_answer) and by_answer[k][1] < x[0]:
            fw.add(by_answer[k][2])
            k += 1
        inv += fw.total - fw.upto(x[2])
    return inv


def order_inversions(adm):
    """adm: (rank, time) each. The pairs admitted out of rank order (rank a < b, time a > b)."""
    times = sorted({t for _, t in adm})
    idx = {t: i for i, t in enumerate(times)}
    fw = Fenwick(len(times) + 1)
    inv = 0
    for _, t in sorted(adm):
        inv += fw.total - fw.upto(idx[t])
        fw.add(idx[t])
    return inv


def window_rates(times, window_s):
    """Admissions per second in each whole window from the first admission to the last."""
    if not times:
        return []
    at = sorted(times)
    w, rates, k, i = window_s * 1000, [], 0, 0
    while at[0] + (k + 1) * w <= at[-1]:
        lo, hi = at[0] + k * w, at[0] + (k + 1) * w
        c = 0
        while i < len(at) and at[i] < hi:
            c += at[i] >= lo
            i += 1
        rates.append(c / window_s)
        k += 1
    return rates


def cmd_selftest(args):
    """The checks' arithmetic on made-up data: each must see what it is there to see."""
    fails = []
    ok = [(0, 10, 1), (20, 30, 2), (25, 40, 3), (35, 50, 4)]  # concurrent 2 and 3: any order
    if fifo_inversions(ok) or fifo_inversions([(0, 10, 1), (20, 30, 3), (25, 40, 2)]):
        fails.append("fifo: concurrent joins counted")
    if fifo_inversions([(0, 10, 2), (20, 30, 1)]) != 1:
        fails.append("fifo: a join answered before another was sent, behind it, not counted")
    if fifo_inversions([(0, 10, 3), (11, 12, 2), (13, 14, 1)]) != 3:
        fails.append("fifo: three reversed joins are not 3 inversions")
    if order_inversions([(0, 5), (1, 5), (2, 6)]) or order_inversions([(0, 6), (1, 5)]) != 1:
        fails.append("admission order")
    r = window_rates([i * 1000 // 2000 for i in range(40000)], 10)  # 2,000/s for 20 s
    if r != [2000.0]:
        fails.append("windows: %s for 2,000/s" % r)
    r = window_rates([i * 1000 // 1880 for i in range(40000)], 10)
    if not r or abs(r[0] - 2000) / 2000 * 100 <= 5:
        fails.append("windows: 1,880/s not 6 % off: %s" % r)
    print("SELFTEST %s" % ("; ".join(fails) if fails else "verdict=ok"))
    return 1 if fails else 0


def cmd_joins(args):
    rows = []
    with open(args.joins) as f:
        for ln in f:
            u, first, ans, st, pos, att = ln.rstrip("\n").split("\t")
            rows.append((u, int(first), int(ans), int(st), int(pos), int(att)))
    r = redis_of(args)
    ranks, zcard = line_ranks(r, args.sku)
    seq = gate_field(r, args.sku, "seq")
    ok = [x for x in rows if x[3] in (200, 201)]
    s201 = sum(1 for x in ok if x[3] == 201)
    unanswered = len(rows) - len(ok)
    moved = sum(1 for x in ok if ranks.get(x[0], -2) + 1 != x[4])
    missing = sum(1 for x in rows if x[0] not in ranks)
    joined = {x[0] for x in rows}
    extra = sum(1 for u in ranks if u not in joined) if args.exclusive else 0
    retried = sum(1 for x in rows if x[5] > 1)
    # inversions: answers sorted by time; joins by first send; a Fenwick tree of the places of
    # the joins answered before each send
    inv = fifo_inversions([(x[1], x[2], x[4]) for x in ok])
    span = (max(x[2] for x in ok) - min(x[1] for x in ok)) / 1e9 if ok else 0
    good = unanswered == 0 and moved == 0 and missing == 0 and extra == 0 and inv == 0
    good = good and (not args.exclusive or seq == zcard == len(rows))
    print("JOINS users=%d s201=%d s200=%d unanswered=%d retried=%d moved=%d missing=%d extra=%d "
          "seq=%d zcard=%d inversions=%d span_s=%.2f rate=%.0f verdict=%s"
          % (len(rows), s201, len(ok) - s201, unanswered, retried, moved, missing, extra, seq,
             zcard, inv, span, len(ok) / span if span else 0, "ok" if good else "VIOLATED"))
    return 0 if good else 1


def admissions(r, sku, ttl_ms):
    flat = [text(v) for v in r.cmd("HGETALL", key(sku, "q:adm"))]
    out = []
    for i in range(0, len(flat), 2):
        v = flat[i + 1]
        if v.startswith("used:"):
            continue
        n, exp = v.split(":")
        out.append((flat[i], int(n), int(exp) - ttl_ms))
    return out


def cmd_admits(args):
    r = redis_of(args)
    ranks, zcard = line_ranks(r, args.sku)
    adm = admissions(r, args.sku, args.ttl_s * 1000)
    wrong_n = sum(1 for u, n, _ in adm if ranks.get(u) != n)
    adm.sort(key=lambda a: a[1])
    ns = [a[1] for a in adm]
    gaps = sum(1 for i, n in enumerate(ns) if n != i)
    inv = order_inversions([(a[1], a[2]) for a in adm])
    rates = window_rates([a[2] for a in adm], args.window_s)
    worst = max([abs(x - args.rate) / args.rate * 100 for x in rates] + [0.0])
    good = wrong_n == 0 and gaps == 0 and inv == 0 and len(rates) >= args.min_windows
    good = good and worst <= args.tolerance
    print("ADMITS admitted=%d line=%d wrong_rank=%d gaps=%d order_inversions=%d windows=%d "
          "rates=%s worst_off_pct=%.2f verdict=%s"
          % (len(adm), zcard, wrong_n, gaps, inv, len(rates),
             ",".join("%.1f" % x for x in rates) or "-", worst, "ok" if good else "VIOLATED"))
    return 0 if good else 1


def cmd_buys(args):
    created, t_last, codes, states = 0, 0, {}, {}
    with open(args.buy) as f:
        for ln in f:
            u, state, st, ans, err, retries, why, polls, osend = ln.rstrip("\n").split("\t")
            st, ans = int(st), int(ans)
            if int(retries):
                k = "retried_" + why
                codes[k] = codes.get(k, 0) + int(retries)
            states[state] = states.get(state, 0) + 1
            if st == 201:
                created += 1
                t_last = max(t_last, ans)
            elif st:
                codes["%d_%s" % (st, err)] = codes.get("%d_%s" % (st, err), 0) + 1
    print("BUYS created=%d t_last_ns=%d refused=%s states=%s"
          % (created, t_last, ",".join("%s:%d" % kv for kv in sorted(codes.items())) or "-",
             ",".join("%s:%d" % kv for kv in sorted(states.items()))))
    return 0


def cmd_soldout(args):
    lat, never = [], 0
    with open(args.watch) as f:
        for ln in f:
            u, sold, other, polls, state = ln.rstrip("\n").split("\t")
            if int(sold) == 0:
                never += 1
            else:
                lat.append((int(sold) - args.t_last_ns) / 1e6)
    lat.sort()
    worst = lat[-1] if lat else float("nan")
    good = never == 0 and lat and worst <= args.limit_ms
    print("SOLDOUT places=%d never=%d after_last_sale_ms_p50=%.0f max=%.0f limit_ms=%d verdict=%s"
          % (len(lat) + never, never, lat[len(lat) // 2] if lat else float("nan"), worst,
             args.limit_ms, "ok" if good else "VIOLATED"))
    return 0 if good else 1


def cmd_holds(args):
    r = redis_of(args)
    adm = admissions(r, args.sku, args.ttl_s * 1000)
    until = args.expiry_ms + args.limit_ms
    first = [a for a in adm if a[1] < args.first and a[2] < args.earliest_ms]
    nxt = [a for a in adm if args.first <= a[1] < args.first + args.next and a[2] <= until]
    behind = [a for a in adm if a[1] >= args.first + args.next and a[2] <= until]
    used = sum(1 for v in r.cmd("HVALS", key(args.sku, "q:adm")) if text(v).startswith("used:"))
    late = max((a[2] - args.expiry_ms for a in nxt), default=float("nan"))
    early = min((a[2] - args.earliest_ms for a in nxt), default=float("nan"))
    good = len(first) == args.first and len(nxt) == args.next and not behind
    good = good and late <= args.limit_ms and early >= 0
    print("HOLDS first=%d next=%d behind=%d used=%d next_admitted_after_last_expiry_ms=%.0f "
          "next_admitted_after_first_expiry_ms=%.0f limit_ms=%d verdict=%s"
          % (len(first), len(nxt), len(behind), used, late, early, args.limit_ms,
             "ok" if good else "VIOLATED"))
    return 0 if good else 1


def cmd_used(args):
    r = redis_of(args)
    print(sum(1 for v in r.cmd("HVALS", key(args.sku, "q:adm")) if text(v).startswith("used:")))
    return 0


def cmd_dump(args):
    """The gate's hash and the admission entries in rank order with their times (a record)."""
    r = redis_of(args)
    flat = [text(v) for v in r.cmd("HGETALL", key(args.sku, "q"))]
    print("gate " + " ".join("%s=%s" % (flat[i], flat[i + 1]) for i in range(0, len(flat), 2)))
    flat = [text(v) for v in r.cmd("HGETALL", key(args.sku, "q:adm"))]
    rows = sorted((flat[i + 1], flat[i]) for i in range(0, len(flat), 2))
    rows.sort(key=lambda x: int(x[0].split(":")[0]) if not x[0].startswith("used:") else -1)
    for v, u in rows:
        print("adm %s %s" % (u, v))
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--redis-port", type=int, default=6379)
    p.add_argument("--redis-cluster", default="")
    sub = p.add_subparsers(dest="cmd", required=True)
    j = sub.add_parser("joins")
    j.add_argument("--joins", required=True)
    j.add_argument("--sku", required=True)
    j.add_argument("--exclusive", action="store_true", help="the file holds every join of the SKU")
    a = sub.add_parser("admits")
    a.add_argument("--sku", required=True)
    a.add_argument("--rate", type=float, required=True)
    a.add_argument("--ttl-s", type=int, required=True)
    a.add_argument("--window-s", type=int, default=10)
    a.add_argument("--tolerance", type=float, default=5.0)
    a.add_argument("--min-windows", type=int, default=1)
    b = sub.add_parser("buys")
    b.add_argument("--buy", required=True)
    s = sub.add_parser("soldout")
    s.add_argument("--watch", required=True)
    s.add_argument("--t-last-ns", type=int, required=True)
    s.add_argument("--limit-ms", type=int, default=1000)
    h = sub.add_parser("holds")
    h.add_argument("--sku", required=True)
    h.add_argument("--ttl-s", type=int, required=True)
    h.add_argument("--first", type=int, required=True)
    h.add_argument("--next", type=int, required=True)
    h.add_argument("--expiry-ms", type=int, required=True)
    h.add_argument("--earliest-ms", type=int, required=True)
    h.add_argument("--limit-ms", type=int, default=2000)
    u = sub.add_parser("used")
    u.add_argument("--sku", required=True)
    sub.add_parser("selftest")
    d = sub.add_parser("dump")
    d.add_argument("--sku", required=True)
    args = p.parse_args()
    try:
        return {"joins": cmd_joins, "admits": cmd_admits, "buys": cmd_buys,
                "soldout": cmd_soldout, "holds": cmd_holds, "dump": cmd_dump,
                "used": cmd_used, "selftest": cmd_selftest}[args.cmd](args)
    except (ConnectionError, OSError) as e:
        print("queue_check: Redis could not be read: %s" % e, file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
