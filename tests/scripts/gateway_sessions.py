#!/usr/bin/python3
"""gateway_sessions.py — streams sessions through a gateway over several attnd replicas
(docker/nginx.conf) and checks that session routing holds when a replica dies.

  gateway_sessions.py --base URL --sessions 30 --replicas r1,r2,r3 --stop-cmd 'CMD {name}'

1. Creates --sessions self sessions through the gateway; their ids (NAME.<32 hex>) must
   name every replica in --replicas (creation is spread over them).
2. Gives each session its own random sequence of --length rows and asks the gateway for the
   one-shot causal answer (POST /v1/models/MODEL/attention, is_causal) over it.
3. Appends the first half of every sequence, one to three rows at a time, the sessions
   interleaved: every append's output equals its rows of the one-shot answer (and its
   session.length advances), so each call reached the replica holding the session.
4. Runs --stop-cmd with {name} = the victim (default: the replica of the first session),
   then: each of the victim's sessions answers 410 session_replica_gone to an append, GET and
   DELETE; every other session appends the rest of its sequence, still equal to its one-shot
   answer; new sessions and stateless requests still work (on the live replicas).

Standard library only (Debian's /usr/bin/python3). Exits 0 when every check passed, 1
otherwise, printing what differed. Bounded: every HTTP call has a timeout.
"""
import argparse
import http.client
import json
import random
import re
import subprocess
import sys
import time
import urllib.parse

E = 64  # the demo model's width
TOL = 1e-5

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)
    return cond


class Gateway:
    """One keep-alive connection to the gateway (reopened when the server closes it)."""

    def __init__(self, base, timeout):
        u = urllib.parse.urlsplit(base)
        self.host, self.port, self.timeout = u.hostname, u.port or 80, timeout
        self.conn = None

    def call(self, method, path, body=None):
        """Returns (status, parsed JSON or None, headers dict with lowercase names)."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=data, headers=headers)
                r = self.conn.getresponse()
                raw = r.read()
                hdrs = {k.lower(): v for k, v in r.getheaders()}
                if hdrs.get("connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                try:
                    j = json.loads(raw) if raw else None
                except ValueError:
                    j = None
                return r.status, j, hdrs
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")


def rows(rng, n):
    # Multiples of 1/1024 in [-1, 1): exact in JSON and in float32.
    return [[rng.randrange(-1024, 1024) / 1024.0 for _ in range(E)] for _ in range(n)]


def max_diff(got, want):
    if not isinstance(got, list) or len(got) != len(want):
        return float("inf")
    d = 0.0
    for g, w in zip(got, want):
        if not isinstance(g, list) or len(g) != len(w):
            return float("inf")
        d = max(d, max(abs(a - b) for a, b in zip(g, w)))
    return d


class Stream:
    def __init__(self, sid, q, ref):
        self.id, self.q, self.ref, self.pos = sid, q, ref, 0
        self.replica = sid.split(".", 1)[0]
        self.worst = 0.0

    def append(self, gw, t, step):
        t = min(t, len(self.q) - self.pos)
        st, j, _ = gw.call("POST", f"/v1/sessions/{self.id}/append",
                           {"query": self.q[self.pos:self.pos + t]})
        if not check(st == 200 and j, f"{step}: append to {self.id} at {self.pos}: HTTP {st} {j}"):
            return
        d = max_diff(j.get("output"), self.ref[self.pos:self.pos + t])
        self.worst = max(self.worst, d)
        check(d <= TOL, f"{step}: {self.id} rows {self.pos}..{self.pos + t - 1}: |diff| {d:.3g}")
        length = (j.get("session") or {}).get("length")
        check(length == self.pos + t, f"{step}: {self.id} length {length}, want {self.pos + t}")
        self.pos += t


def expect_gone(gw, s):
    for method, path, body in (("POST", f"/v1/sessions/{s.id}/append", {"query": s.q[s.pos:s.pos + 1]}),
                               ("GET", f"/v1/sessions/{s.id}", None),
                               ("DELETE", f"/v1/sessions/{s.id}", None)):
        st, j, h = gw.call(method, path, body)
        code = ((j or {}).get("error") or {}).get("code")
        check(st == 410 and code == "session_replica_gone",
              f"{method} {path} after its replica stopped: HTTP {st} {code} (want 410 session_replica_gone)")
        check(h.get("content-type", "").startswith("application/json"),
              f"{method} {path}: the 410 is not JSON ({h.get('content-type')})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="gateway URL, e.g. http://127.0.0.1:8080")
    ap.add_argument("--sessions", type=int, default=30)
    ap.add_argument("--length", type=int, default=12, help="rows per session's sequence")
    ap.add_argument("--replicas", default="r1,r2,r3", help="the replica names behind the gateway")
    ap.add_argument("--model", default="demo")
    ap.add_argument("--stop-cmd", required=True, help="shell command stopping replica {name}")
    ap.add_argument("--victim", default="", help="replica to stop (default: the first session's)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--timeout", type=float, default=20, help="seconds per HTTP call")
    a = ap.parse_args()
    names = a.replicas.split(",")
    rng = random.Random(a.seed)
    gw = Gateway(a.base, a.timeout)
    t0 = time.monotonic()

    # 1. create, 2. references
    streams = []
    for i in range(a.sessions):
        st, j, _ = gw.call("POST", f"/v1/models/{a.model}/sessions", {})
        sid = (j or {}).get("id", "")
        if not check(st == 201 and re.fullmatch(r"[a-z0-9-]+\.[0-9a-f]{32}", sid or ""),
                     f"create {i}: HTTP {st} id {sid!r} (want 201 NAME.<32 hex>)"):
            continue
        q = rows(rng, a.length)
        st, ref, _ = gw.call("POST", f"/v1/models/{a.model}/attention",
                             {"query": q, "is_causal": True})
        if check(st == 200 and ref and "output" in ref, f"one-shot {i}: HTTP {st}"):
            streams.append(Stream(sid, q, ref["output"]))
    per = {n: sum(s.replica == n for s in streams) for n in names}
    print(f"{len(streams)} sessions over replicas: " +
          ", ".join(f"{n} x{c}" for n, c in per.items()))
    check(len(streams) == a.sessions, f"{len(streams)} of {a.sessions} sessions created")
    check(all(per.values()), f"creation reached every replica: {per}")
    check(all(s.replica in names for s in streams), "every id names one of the replicas")
    if failures:
        return 1

    # 3. the first half, step by step, interleaved
    half = a.length // 2
    while any(s.pos < half for s in streams):
        for s in streams:
            if s.pos < half:
                s.append(gw, min(rng.randint(1, 3), half - s.pos), "before the stop")
    print(f"first {half} rows of each session appended: max |diff| "
          f"{max(s.worst for s in streams):.3g} ({time.monotonic() - t0:.1f}s)")

    # 4. stop a replica
    victim = a.victim or streams[0].replica
    cmd = a.stop_cmd.replace("{name}", victim)
    t = time.monotonic()
    rc = subprocess.run(cmd, shell=True).returncode
    check(rc == 0, f"stop command failed ({rc}): {cmd}")
    print(f"stopped replica {victim} in {time.monotonic() - t:.1f}s: {cmd}")
    lost = [s for s in streams if s.replica == victim]
    alive = [s for s in streams if s.replica != victim]
    for s in lost:
        expect_gone(gw, s)
    while any(s.pos < a.length for s in alive):
        for s in alive:
            if s.pos < a.length:
                s.append(gw, rng.randint(1, 3), "after the stop")
    print(f"{len(lost)} sessions of {victim} answer 410 session_replica_gone; the other "
          f"{len(alive)} finished their {a.length} rows, max |diff| "
          f"{max((s.worst for s in alive), default=0):.3g}")

    # New sessions and stateless calls still work, on the live replicas only.
    for i in range(6):
        st, j, _ = gw.call("POST", f"/v1/models/{a.model}/sessions", {})
        sid = (j or {}).get("id", "")
        check(st == 201 and not sid.startswith(victim + "."),
              f"new session after the stop: HTTP {st} id {sid!r}")
        st, j, _ = gw.call("POST", f"/v1/models/{a.model}/attention", {"query": rows(rng, 2)})
        check(st == 200, f"stateless call after the stop: HTTP {st}")
    print(f"gateway sessions: {'OK' if not failures else 'FAILED'} "
          f"({len(failures)} failures, {time.monotonic() - t0:.1f}s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
