#!/usr/bin/env python3
"""loadtest/resp.py — how the checkers read Redis: a minimal RESP2 client (`Redis`) and the same
face over a Redis Cluster (`Cluster`: every command to the master of its key's slot). Python 3
standard library only. The one place where the Python test tools route by slot:
loadtest/chaos.py imports it (inventory-check, what loadtest/verify.sh runs, asks the cluster
for each key's slot instead).

The checkers only read (GET, HGETALL, HMGET, HLEN, HVALS, EXISTS, PTTL, SCAN, MULTI/EXEC of
those); the one writer, chaos.py's counter damage and its repair, is an EVAL whose every run is
safe to repeat (routed by its first key). So a command that meets a redirection or a cluster in
transition is simply sent again:
`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`, `LOADING`, `MASTERDOWN` and a node that does not answer
make the client ask for the slot map again (`CLUSTER SLOTS`, from any node it knows) and retry,
for at most `retry_s` seconds; then it gives up with ConnectionError. The slot map is asked for
again on every such event, so a failover (a replica promoted, the old master back as a
replica) is followed without any help. MULTI … EXEC travels as one unit, to the master of the
first key inside it (the commands of one unit must share a slot, as in Redis Cluster itself).

As a command (a `redis-cli --raw` for a cluster, by hand):
    loadtest/resp.py --cluster redis-cluster://127.0.0.1:7000[,127.0.0.1:7001…] <commands
reads one command a line (split like a shell would), sends them pipelined to their masters and
prints the replies in order exactly as `redis-cli --raw` prints them: a string or a number on
its line, nil and an empty array as an empty line, an array's elements one a line (nested arrays
flattened). Exit status 0; 3 when the cluster could not be read (message on stderr); an error
reply other than the transient ones above is printed as redis-cli prints it (its text).
"""

import argparse
import bisect
import shlex
import socket
import sys
import time
from collections import defaultdict


class RedisError(str):
    """An error reply (returned, not raised, so a pipeline reads every reply)."""


class Redis:
    """A minimal RESP2 client: one socket, pipelined commands, replies as Python values."""

    def __init__(self, port, host="127.0.0.1", timeout=5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.rf = self.sock.makefile("rb")

    def close(self):
        try:
            self.rf.close()
            self.sock.close()
        except OSError:
            pass

    def cmd(self, *args):
        return self.pipeline([args])[0]

    def pipeline(self, cmds):
        out = bytearray()
        for args in cmds:
            out += b"*%d\r\n" % len(args)
            for a in args:
                b = a if isinstance(a, bytes) else str(a).encode()
                out += b"$%d\r\n%s\r\n" % (len(b), b)
        self.sock.sendall(out)
        return [self._read() for _ in cmds]

    def _read(self):
        line = self.rf.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("Redis closed the connection")
        t, rest = line[:1], line[1:-2]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return RedisError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.rf.read(n + 2)
            return data[:-2].decode("utf-8", "replace")
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise ConnectionError("unexpected reply %r" % line)

    def scan(self, pattern, limit=10000):
        """Every key matching pattern (bounded: at most `limit` SCAN calls)."""
        keys, cursor = set(), "0"
        for _ in range(limit):
            r = self.cmd("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
            if isinstance(r, RedisError) or not isinstance(r, list):
                raise ConnectionError("SCAN failed: %r" % (r,))
            cursor = r[0]
            keys.update(r[1])
            if cursor == "0":
                return keys
        raise ConnectionError("SCAN did not finish")


# --- Redis Cluster -------------------------------------------------------------------------------

def crc16(data):
    """CRC16-CCITT (XMODEM), the checksum Redis Cluster maps keys with."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def key_slot(key):
    """The slot of a key: CRC16 of its hash tag (the first non-empty {…}) or of the whole key."""
    k = key if isinstance(key, bytes) else str(key).encode()
    s = k.find(b"{")
    if s >= 0:
        e = k.find(b"}", s + 1)
        if e > s + 1:
            k = k[s + 1:e]
    return crc16(k) % 16384


# Commands without a key: sent to any master. Every other command's key is its first argument.
KEYLESS = {"PING", "ECHO", "MULTI", "EXEC", "DISCARD", "INFO", "CLUSTER", "TIME", "DBSIZE", "SCAN"}
# Error replies of a cluster in transition or of a stale slot map: refresh the map and resend.
TRANSIENT = ("MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN", "EXECABORT")


def parse_seeds(url):
    """"redis-cluster://h:p,h:p" (the form inventoryd takes) or "h:p,h:p" → [(host, port)]."""
    if url.startswith("redis-cluster://"):
        url = url[len("redis-cluster://"):]
    seeds = []
    for hp in url.split(","):
        host, _, port = hp.strip().rpartition(":")
        seeds.append((host or "127.0.0.1", int(port)))
    return seeds


def flatten(reply):
    if isinstance(reply, list):
        for x in reply:
            yield from flatten(x)
    else:
        yield reply


class Cluster:
    """The face of Redis (cmd, pipeline, scan, close) over a Redis Cluster: each command goes
    to the master of its key's slot, one pipeline per master."""

    def __init__(self, seeds, timeout=5.0, retry_s=15.0):
        self.seeds = parse_seeds(seeds) if isinstance(seeds, str) else list(seeds)
        self.timeout, self.retry_s = timeout, retry_s
        self.conns = {}
        self.los, self.ranges = [], []   # slot map: sorted range starts; (lo, hi, (host, port))
        self._refresh(time.monotonic() + retry_s)

    def close(self):
        for c in self.conns.values():
            c.close()
        self.conns = {}

    def _conn(self, addr):
        c = self.conns.get(addr)
        if c is None:
            c = self.conns[addr] = Redis(addr[1], addr[0], self.timeout)
        return c

    def _drop(self, addr):
        c = self.conns.pop(addr, None)
        if c:
            c.close()

    def masters(self):
        """The masters of the current slot map, (host, port) each, in slot order."""
        out = []
        for _, _, a in self.ranges:
            if a not in out:
                out.append(a)
        return out

    def _refresh(self, deadline):
        """The slot map from the first node that gives a whole one (every slot covered)."""
        last = "no node known"
        while True:
            for addr in self.masters() + [s for s in self.seeds if s not in self.masters()]:
                try:
                    r = self._conn(addr).cmd("CLUSTER", "SLOTS")
                except (OSError, ConnectionError) as e:
                    self._drop(addr)
                    last = "%s:%d: %s" % (addr[0], addr[1], e)
                    continue
                if not isinstance(r, list) or not r:
                    last = "%s:%d: CLUSTER SLOTS said %r" % (addr[0], addr[1], r)
                    continue
                ranges = sorted((int(x[0]), int(x[1]), (x[2][0] or addr[0], int(x[2][1]))) for x in r)
                if sum(hi - lo + 1 for lo, hi, _ in ranges) != 16384:
                    last = "%s:%d: the slot map does not cover every slot" % addr
                    continue
                self.ranges, self.los = ranges, [x[0] for x in ranges]
                return
            if time.monotonic() >= deadline:
                raise ConnectionError("no whole slot map: %s" % last)
            time.sleep(0.2)

    def _node(self, unit):
        for args in unit:
            name = str(args[0]).upper()
            # EVAL script numkeys key…: the first key routes it (a script's keys share a slot).
            key = args[3] if name in ("EVAL", "EVALSHA") and len(args) > 3 else (args[1] if len(args) > 1 else None)
            if name not in KEYLESS and key is not None:
                i = bisect.bisect_right(self.los, key_slot(key)) - 1
                return self.ranges[i][2]
        return self.ranges[0][2]

    @staticmethod
    def _units(cmds):
        """(index of the first command, [commands]): single commands, or MULTI … EXEC."""
        units, i = [], 0
        while i < len(cmds):
            j = i + 1
            if str(cmds[i][0]).upper() == "MULTI":
                while j < len(cmds) and str(cmds[j - 1][0]).upper() != "EXEC":
                    j += 1
            units.append((i, cmds[i:j]))
            i = j
        return units

    def cmd(self, *args):
        return self.pipeline([args])[0]

    def pipeline(self, cmds):
        replies = [None] * len(cmds)
        pending = self._units(cmds)
        deadline = time.monotonic() + self.retry_s
        while pending:
            by_node = defaultdict(list)
            for u in pending:
                by_node[self._node(u[1])].append(u)
            again, last = [], None
            for addr, units in by_node.items():
                try:
                    rep = self._conn(addr).pipeline([c for u in units for c in u[1]])
                except (OSError, ConnectionError) as e:
                    self._drop(addr)
                    again += units
                    last = "%s:%d: %s" % (addr[0], addr[1], e)
                    continue
                n = 0
                for first, unit in units:
                    r = rep[n:n + len(unit)]
                    n += len(unit)
                    bad = [x for x in flatten(r) if isinstance(x, RedisError) and x.startswith(TRANSIENT)]
                    if bad:
                        again.append((first, unit))
                        last = "%s:%d: %s" % (addr[0], addr[1], bad[0])
                    else:
                        replies[first:first + len(unit)] = r
            if again:
                if time.monotonic() >= deadline:
                    raise ConnectionError("cluster unreadable for %.0f s: %s" % (self.retry_s, last))
                time.sleep(0.05)
                self._refresh(deadline)
            pending = again
        return replies

    def scan(self, pattern, limit=10000):
        """Every key matching pattern, on every master."""
        keys = set()
        for addr in self.masters():
            try:
                keys |= self._conn(addr).scan(pattern, limit)
            except (OSError, ConnectionError) as e:
                self._drop(addr)
                raise ConnectionError("SCAN on %s:%d: %s" % (addr[0], addr[1], e))
        return keys


def raw(reply):
    """A reply as `redis-cli --raw` prints it."""
    if reply is None:
        return ""
    if isinstance(reply, list):
        return "\n".join(raw(x) for x in reply)
    return str(reply)


def main():
    ap = argparse.ArgumentParser(description="commands from stdin to a Redis Cluster, replies as redis-cli --raw prints them")
    ap.add_argument("--cluster", required=True, help="redis-cluster://host:port[,host:port…] (any of its nodes)")
    ap.add_argument("--timeout", type=float, default=15.0, help="longest wait for a cluster in transition, s")
    a = ap.parse_args()
    cmds = [shlex.split(line) for line in sys.stdin if line.strip()]
    try:
        c = Cluster(a.cluster, retry_s=a.timeout)
        try:
            replies = c.pipeline(cmds) if cmds else []
        finally:
            c.close()
    except (OSError, ConnectionError, ValueError) as e:
        print("resp.py: cannot read the cluster at %s: %s" % (a.cluster, e), file=sys.stderr)
        return 3
    for r in replies:
        sys.stdout.write(raw(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
