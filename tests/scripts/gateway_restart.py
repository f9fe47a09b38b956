#!/usr/bin/python3
"""gateway_restart.py — streams sequences through a gateway over attnd replicas run with
--session-dir, restarts one replica in the middle (SIGTERM: it drains and writes its sessions;
then the same replica name comes back on the same volume) and checks that every sequence,
the restarted replica's included, continues after the restart equal to its one-shot answer.

  gateway_restart.py --base URL --replicas r1,r2,r3 --sequences 10 \
      --model demo --group llama --group-sequences 4 \
      --stop-cmd 'CMD {name}' --start-cmd 'CMD {name}' [--summary FILE]

1. Creates --sequences sessions through the gateway, --group-sequences of them on the model
   group --group (a sequence session: one id, a cache on every layer; appended per layer over
   /v1/sessions/{id}/layers/{l}/append), the rest on the single-layer --model. They are made
   in runs of as many of one kind as there are replicas, so that creation, spread over the
   replicas, leaves both kinds on each. Every sequence gets its own random rows (per layer for
   a group) and its one-shot causal answer (POST /v1/models/{model or layer model}/attention,
   is_causal) through the gateway.
2. Appends the first third of every sequence, one to three rows at a time, interleaved (a
   group sequence: layer 0, then 1, ...): each append's output equals its rows of the one-shot
   answer and its length advances.
3. Restarts the victim (--victim, or the replica holding the most sequences of both kinds):
   runs --stop-cmd while the sequences of the other replicas go on streaming (a row each
   every --pace seconds); checks that the victim's sequences then answer 410
   session_replica_gone; runs --start-cmd, still streaming the others, and polls the victim's
   first sequence until it answers 200 (time to ready).
4. Every sequence of the victim answers GET with the length (per layer) it had before the
   stop; then every sequence appends the rest of its rows, each append equal to its one-shot
   answer: the restored caches are the caches that were saved.

--summary FILE gets the figures as JSON (victim, its sequences, stop/start/ready seconds,
appends during the restart). Standard library only (Debian's /usr/bin/python3). Exits 0 when
every check passed, 1 otherwise, printing what differed. Bounded: every HTTP call has a
timeout and the wait for the restarted replica --ready-timeout.
"""
import argparse
import json
import random
import re
import subprocess
import sys
import time

from gateway_sessions import Gateway, max_diff

TOL = 1e-5

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)
    return cond


def rows(rng, n, width):
    # Multiples of 1/1024 in [-1, 1): exact in JSON and in float32.
    return [[rng.randrange(-1024, 1024) / 1024.0 for _ in range(width)] for _ in range(n)]


class Sequence:
    """One session: q[l] / ref[l] per layer (one layer for a single-layer model)."""

    def __init__(self, sid, model, layer_models, q, ref):
        self.id, self.model, self.layer_models, self.q, self.ref = sid, model, layer_models, q, ref
        self.group = len(layer_models) > 1 or layer_models[0] != model
        self.replica = sid.split(".", 1)[0]
        self.pos, self.n, self.worst, self.appends = 0, len(q[0]), 0.0, 0

    def kind(self):
        return f"{self.model} ({len(self.layer_models)} layers)" if self.group else self.model

    def step(self, gw, t, phase):
        """Appends the next t rows to every layer in order; False on a failed call."""
        t = min(t, self.n - self.pos)
        for l in range(len(self.q)):
            path = (f"/v1/sessions/{self.id}/layers/{l}/append" if self.group
                    else f"/v1/sessions/{self.id}/append")
            st, j, _ = gw.call("POST", path, {"query": self.q[l][self.pos:self.pos + t]})
            if not check(st == 200 and j, f"{phase}: append to {self.id} layer {l} at {self.pos}: "
                         f"HTTP {st} {json.dumps(j)[:300]}"):
                return False
            d = max_diff(j.get("output"), self.ref[l][self.pos:self.pos + t])
            self.worst = max(self.worst, d)
            check(d <= TOL, f"{phase}: {self.id} layer {l} rows {self.pos}..{self.pos + t - 1}: "
                  f"|diff| {d:.3g} from the one-shot answer")
            sess = j.get("session") or {}
            check(sess.get("length") == self.pos + t,
                  f"{phase}: {self.id} layer {l} length {sess.get('length')}, want {self.pos + t}")
        self.pos += t
        self.appends += 1
        return True

    def check_state(self, gw, phase):
        st, j, _ = gw.call("GET", f"/v1/sessions/{self.id}")
        if not check(st == 200 and j, f"{phase}: GET {self.id}: HTTP {st} {json.dumps(j)[:300]}"):
            return
        check(j.get("model") == self.model, f"{phase}: {self.id} model {j.get('model')}, want {self.model}")
        check(j.get("length") == self.pos, f"{phase}: {self.id} length {j.get('length')}, want {self.pos}")
        if self.group:
            lens = [x.get("length") for x in j.get("layers") or []]
            check(lens == [self.pos] * len(self.q), f"{phase}: {self.id} layer lengths {lens}, "
                  f"want {[self.pos] * len(self.q)}")


def layer_models(gw, model):
    """The models behind MODEL: its layers' models for a group, [MODEL] otherwise; widths."""
    st, j, _ = gw.call("GET", f"/v1/models/{model}")
    if not check(st == 200 and j, f"GET /v1/models/{model}: HTTP {st}"):
        return None, None
    if j.get("kind") == "group":
        ls = j.get("layers") or []
        check(len(ls) == j.get("num_layers") and len(ls) >= 2, f"{model}: a group of {len(ls)} layers")
        return [x["model"] for x in ls], [x["embed_q"] for x in ls]
    return [model], [j.get("embed_q") or (j.get("shapes") or {}).get("embed_q") or 64]


class Pacer:
    """Streams the other replicas' sequences while the victim restarts: a row per sequence
    every --pace seconds (as a decode loop would), up to CAP rows each."""

    def __init__(self, gw, streams, cap, pace):
        self.gw, self.streams, self.cap, self.pace = gw, streams, cap, pace
        self.appends, self.next = 0, 0.0

    def tick(self, phase):
        if time.monotonic() < self.next:
            time.sleep(min(0.02, self.next - time.monotonic()))
            return
        self.next = time.monotonic() + self.pace
        for s in self.streams:
            if s.pos < self.cap:
                s.step(self.gw, 1, phase)
                self.appends += 1

    def wait(self, proc, phase):
        """Ticks until PROC exits; returns its seconds."""
        t = time.monotonic()
        while proc.poll() is None:
            self.tick(phase)
        return time.monotonic() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="gateway URL, e.g. http://127.0.0.1:8080")
    ap.add_argument("--replicas", default="r1,r2,r3", help="the replica names behind the gateway")
    ap.add_argument("--sequences", type=int, default=10)
    ap.add_argument("--model", default="demo", help="single-layer model")
    ap.add_argument("--group", default="", help="model group (NAME=DIR,layers=all); '' = none")
    ap.add_argument("--group-sequences", type=int, default=4, help="how many of --sequences")
    ap.add_argument("--length", type=int, default=60, help="rows per sequence (per layer)")
    ap.add_argument("--pace", type=float, default=0.05,
                    help="seconds between the others' rows while the victim restarts")
    ap.add_argument("--stop-cmd", required=True, help="shell command stopping replica {name}")
    ap.add_argument("--start-cmd", required=True, help="shell command starting replica {name}")
    ap.add_argument("--victim", default="", help="replica to restart (default: see above)")
    ap.add_argument("--ready-timeout", type=float, default=60)
    ap.add_argument("--summary", default="", help="write the figures to this JSON file")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--timeout", type=float, default=20, help="seconds per HTTP call")
    a = ap.parse_args()
    names = a.replicas.split(",")
    rng = random.Random(a.seed)
    gw = Gateway(a.base, a.timeout)
    t0 = time.monotonic()

    # 1. create, references
    kinds = {a.model: layer_models(gw, a.model)}
    if a.group:
        kinds[a.group] = layer_models(gw, a.group)
    if failures:
        return 1
    n_group = a.group_sequences if a.group else 0
    order, left = [], {a.model: a.sequences - n_group, a.group: n_group}
    while len(order) < a.sequences:  # runs of len(names) of one kind, alternating
        for k in ([a.model, a.group] if a.group else [a.model]):
            take = min(len(names), left.get(k, 0))
            order += [k] * take
            left[k] -= take
    # All created first, back to back: any other call in between would shift the spread.
    made = []
    for i, model in enumerate(order):
        st, j, _ = gw.call("POST", f"/v1/models/{model}/sessions", {})
        sid = (j or {}).get("id", "")
        if check(st == 201 and re.fullmatch(r"[a-z0-9-]+\.[0-9a-f]{32}", sid or ""),
                 f"create {i} on {model}: HTTP {st} id {sid!r} (want 201 NAME.<32 hex>)"):
            made.append((i, model, sid))
    seqs = []
    for i, model, sid in made:
        lms, widths = kinds[model]
        q = [rows(rng, a.length, w) for w in widths]
        ref = []
        for lm, ql in zip(lms, q):
            st, r, _ = gw.call("POST", f"/v1/models/{lm}/attention", {"query": ql, "is_causal": True})
            if check(st == 200 and r and "output" in r, f"one-shot {i} on {lm}: HTTP {st}"):
                ref.append(r["output"])
        if len(ref) == len(lms):
            seqs.append(Sequence(sid, model, lms, q, ref))
    check(len(seqs) == a.sequences, f"{len(seqs)} of {a.sequences} sequences created")
    check(all(s.replica in names for s in seqs), "every id names one of the replicas")
    per = {n: [s for s in seqs if s.replica == n] for n in names}
    print(f"{len(seqs)} sequences over replicas: " + ", ".join(
        f"{n} x{len(v)} ({sum(s.group for s in v)} on {a.group or '-'})" for n, v in per.items()))
    if failures:
        return 1

    # 2. the first third
    third = a.length // 3
    while any(s.pos < third for s in seqs):
        for s in seqs:
            if s.pos < third:
                s.step(gw, min(rng.randint(1, 3), third - s.pos), "before the restart")
    print(f"first {third} rows of every sequence appended ({time.monotonic() - t0:.1f}s)")

    # 3. restart the victim while the others stream
    victim = a.victim
    if not victim:
        both = [n for n in names if any(s.group for s in per[n]) and any(not s.group for s in per[n])]
        victim = max(both or names, key=lambda n: len(per[n]))
    lost = per.get(victim, [])
    alive = [s for s in seqs if s.replica != victim]
    check(lost, f"the victim {victim} holds some of the sequences")
    if a.group:
        check(any(s.group for s in lost) and any(not s.group for s in lost),
              f"the victim {victim} holds sequences of both {a.model} and {a.group}")
    print(f"restarting {victim}, which holds {len(lost)} sequences "
          f"({', '.join(sorted(set(s.kind() for s in lost)))}); {len(alive)} stream on")
    before = {s.id: s.pos for s in lost}
    pacer = Pacer(gw, alive, a.length - 4, a.pace)
    cmd = a.stop_cmd.replace("{name}", victim)
    proc = subprocess.Popen(cmd, shell=True)
    stop_s = pacer.wait(proc, "while stopping")
    check(proc.returncode == 0, f"stop command failed ({proc.returncode}): {cmd}")
    n_stop = pacer.appends
    print(f"stopped {victim} in {stop_s:.1f}s ({n_stop} appends to the others meanwhile)")
    for s in lost[:2]:
        st, j, _ = gw.call("GET", f"/v1/sessions/{s.id}")
        code = ((j or {}).get("error") or {}).get("code")
        check(st == 410 and code == "session_replica_gone",
              f"GET {s.id} while {victim} is down: HTTP {st} {code} (want 410 session_replica_gone)")
    cmd = a.start_cmd.replace("{name}", victim)
    t_start = time.monotonic()
    proc = subprocess.Popen(cmd, shell=True)
    start_s = pacer.wait(proc, "while starting")
    check(proc.returncode == 0, f"start command failed ({proc.returncode}): {cmd}")
    if gw.conn is not None:  # a new connection from here on: see the poll below
        gw.conn.close()
        gw.conn = None
    ready_s, polls, seen = None, 0, {}
    while time.monotonic() - t_start < a.ready_timeout:
        # A new connection per poll: a kept-alive one may still be held by a gateway worker
        # that the start command's reload is retiring, with the replica's old address.
        pg = Gateway(a.base, a.timeout)
        st, j, _ = pg.call("GET", f"/v1/sessions/{lost[0].id}") if lost else (200, None, None)
        if pg.conn is not None:
            pg.conn.close()
        polls += 1
        if st == 200:
            ready_s = time.monotonic() - t_start
            break
        code = ((j or {}).get("error") or {}).get("code", "")
        seen[f"{st} {code}"] = seen.get(f"{st} {code}", 0) + 1
        if st == 404:  # up, but without its sessions: waiting longer will not help
            break
        t_poll = time.monotonic() + 0.1
        while time.monotonic() < t_poll:
            pacer.tick("while starting")
    if not check(ready_s is not None, f"{victim} did not answer for {lost[0].id if lost else '-'} "
                 f"within {a.ready_timeout:.0f}s of its start: {seen}"):
        return 1
    n_start = pacer.appends - n_stop
    print(f"started {victim} in {start_s:.1f}s; its sequences answer {ready_s:.2f}s after the "
          f"start ({n_start} appends to the others meanwhile; before that: {seen or 'none'})")
    check(n_stop + n_start > 0, "the other replicas' sequences streamed during the restart")

    # 4. every sequence continues
    for s in lost:
        s.check_state(gw, "after the restart")
        check(s.pos == before[s.id], f"{s.id} moved while its replica was down")
    while any(s.pos < s.n for s in seqs):
        for s in seqs:
            if s.pos < s.n:
                s.step(gw, rng.randint(1, 3), "after the restart")
    for s in seqs:
        s.check_state(gw, "at the end")
        st, _, _ = gw.call("DELETE", f"/v1/sessions/{s.id}")
        check(st in (200, 204), f"DELETE {s.id}: HTTP {st}")
    worst = max(s.worst for s in seqs)
    print(f"all {len(seqs)} sequences finished their {a.length} rows equal to their one-shot "
          f"answers (max |diff| {worst:.3g}; {len(lost)} across {victim}'s restart)")
    summary = {"victim": victim, "victim_sequences": len(lost),
               "victim_group_sequences": sum(s.group for s in lost), "sequences": len(seqs),
               "group_sequences": sum(s.group for s in seqs), "stop_s": round(stop_s, 2),
               "start_s": round(start_s, 2), "ready_after_start_s": round(ready_s, 2),
               "appends_during_restart": n_stop + n_start, "max_diff": worst,
               "failures": len(failures), "seconds": round(time.monotonic() - t0, 1)}
    if a.summary:
        with open(a.summary, "w") as f:
            json.dump(summary, f)
    print(f"gateway restart: {'OK' if not failures else 'FAILED'} "
          f"({len(failures)} failures, {time.monotonic() - t0:.1f}s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
