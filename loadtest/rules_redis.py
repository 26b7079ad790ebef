#!/usr/bin/env python3
"""rules_redis.py: what loadtest/rules.sh reads from Redis about one SKU's holds (Python 3
stdlib + resp.py). Every subcommand prints one line of key=value pairs.

  snap                     INFO commandstats + cpu: evalsha calls/usec, Redis CPU (ms), total
                           commands, zrevrange calls/usec (the watcher's own command), pttl
                           calls (lockcore's acquire finding the lock held)
  holds   SKU SEGMENTS     live holds (Σ ZCARD of the due sets), Σ cnt r (a multi-segment hold's
                           parts included), Σ stock, the first and last due time (Redis ms),
                           users' entries (HLEN), queued give-backs, queued follows of
                           multi-segment orders' parts, intents of multi-segment orders
  sold    SKU SEGMENTS T   waits (≤ T s) until every segment's stock is 0 -> waited_s
  watch   SKU SEGMENTS T   polls every 50 ms until no hold is live (≤ T s): the first and last
                           due time seen, when the last hold left (ms, this machine's clock —
                           the same clock as Redis on one machine), the worst lateness seen
                           (now − the oldest due time still live), polls
  settled SKU SEGMENTS T   waits (≤ T s) until users' entries, give-back and follow queues and
                           multi-segment intents are empty

The watcher reads the oldest hold of each segment with ZREVRANGE key -1 -1 WITHSCORES, a command
no script of the service uses, so its own cost is cmdstat_zrevrange and can be told apart.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import resp  # noqa: E402


def seg_key(sku, k, name):
    return "inv:2:{%s/%d}:%s" % (sku, k, name)


def sku_key(sku, name):
    return "inv:2:{%s}:%s" % (sku, name)


def snap(r):
    out = {}
    for line in r.cmd("INFO", "commandstats").splitlines():
        if not line.startswith("cmdstat_"):
            continue
        name, rest = line[len("cmdstat_"):].split(":", 1)
        f = dict(kv.split("=", 1) for kv in rest.split(","))
        out[name] = (int(f["calls"]), int(f["usec"]))
    cpu = {}
    for line in r.cmd("INFO", "cpu").splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            cpu[k] = v.strip()
    tot = sum(c for c, _ in out.values())
    ev = out.get("evalsha", (0, 0))
    zr = out.get("zrevrange", (0, 0))
    print("evalsha_calls=%d evalsha_usec=%d cpu_ms=%.1f commands=%d zrevrange_calls=%d "
          "zrevrange_usec=%d pttl_calls=%d t=%.3f" % (
              ev[0], ev[1], (float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])) * 1000,
              tot, zr[0], zr[1], out.get("pttl", (0, 0))[0], time.time()))


def holds(r, sku, nseg):
    cmds = []
    for k in range(nseg):
        cmds += [("ZCARD", seg_key(sku, k, "due")), ("HGET", seg_key(sku, k, "cnt"), "r"),
                 ("GET", seg_key(sku, k, "stock")),
                 ("ZREVRANGE", seg_key(sku, k, "due"), -1, -1, "WITHSCORES"),
                 ("ZRANGE", seg_key(sku, k, "due"), -1, -1, "WITHSCORES"),
                 ("ZCARD", seg_key(sku, k, "give")), ("ZCARD", seg_key(sku, k, "follow"))]
    rep = r.pipeline(cmds)
    live = rsum = stock = give = follow = 0
    first = last = 0
    for k in range(nseg):
        zc, rr, st, lo, hi, gv, fw = rep[7 * k:7 * k + 7]
        follow += fw
        live += zc
        rsum += int(rr or 0)
        stock += int(st or 0)
        give += gv
        if lo:
            v = int(float(lo[1]))
            first = v if first == 0 else min(first, v)
        if hi:
            last = max(last, int(float(hi[1])))
    users = r.cmd("HLEN", sku_key(sku, "users"))
    intents = r.cmd("HLEN", sku_key(sku, "multi"))
    t = r.cmd("TIME")
    now = int(t[0]) * 1000 + int(t[1]) // 1000
    print("live=%d r=%d stock=%d first_due=%d last_due=%d users=%d give=%d follow=%d intents=%d "
          "now=%d" % (live, rsum, stock, first, last, users, give, follow, intents, now))


def sold(r, sku, nseg, limit):
    t0 = time.time()
    keys = [seg_key(sku, k, "stock") for k in range(nseg)]
    while time.time() - t0 < limit:
        if all(int(v or 0) == 0 for v in r.pipeline([("GET", k) for k in keys])):
            print("sold=1 waited_s=%.2f" % (time.time() - t0))
            return 0
        time.sleep(0.05)
    print("sold=0 waited_s=%.2f" % (time.time() - t0))
    return 1


def watch(r, sku, nseg, limit):
    keys = [seg_key(sku, k, "due") for k in range(nseg)]
    t0 = time.time()
    first = last = 0
    worst = 0.0
    polls = 0
    emptied = 0.0
    while time.time() - t0 < limit:
        rep = r.pipeline([("ZREVRANGE", k, -1, -1, "WITHSCORES") for k in keys])
        now = time.time() * 1000
        polls += 1
        oldest = None
        for lo in rep:
            if lo:
                v = float(lo[1])
                oldest = v if oldest is None else min(oldest, v)
        if oldest is None:
            emptied = now
            break
        first = oldest if first == 0 else min(first, oldest)
        if now > oldest:
            worst = max(worst, now - oldest)
        time.sleep(0.05)
    print("done=%d first_due_seen=%d emptied=%d worst_late_ms=%.0f polls=%d" % (
        1 if emptied else 0, first, emptied, worst, polls))
    return 0 if emptied else 1


def settled(r, sku, nseg, limit):
    t0 = time.time()
    while time.time() - t0 < limit:
        rep = r.pipeline([("HLEN", sku_key(sku, "users")), ("HLEN", sku_key(sku, "multi"))] +
                         [("ZCARD", seg_key(sku, k, "give")) for k in range(nseg)] +
                         [("ZCARD", seg_key(sku, k, "follow")) for k in range(nseg)])
        give, follow = sum(rep[2:2 + nseg]), sum(rep[2 + nseg:])
        if rep[0] == 0 and rep[1] == 0 and give == 0 and follow == 0:
            print("settled=1 waited_s=%.2f" % (time.time() - t0))
            return 0
        time.sleep(0.05)
    print("settled=0 users=%d give=%d follow=%d intents=%d" % (rep[0], give, follow, rep[1]))
    return 1


def main():
    port = int(os.environ.get("LT_REDIS_PORT", "6379"))
    r = resp.Redis(port)
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "snap":
        snap(r)
        return 0
    sku, nseg = args[0], int(args[1])
    if cmd == "holds":
        holds(r, sku, nseg)
        return 0
    lim = float(args[2])
    return {"sold": sold, "watch": watch, "settled": settled}[cmd](r, sku, nseg, lim)


if __name__ == "__main__":
    sys.exit(main())
