#!/usr/bin/env python3
"""Who had the CPUs while the caching bench's mixed phase ran: read `perf sched timehist --state`
output and print, per WINDOW seconds, the run time (ms) of each group of threads: the hot wrk, the
random wrk, the node under test, the origin, the idle task and the rest; and how much of the hot
wrk's time off a CPU it was still runnable (preempted) rather than waiting for bytes.

Usage: mixedcpu.py TIMEHIST HOT_PID RANDOM_PID NODE_PID ORIGIN_PIDS [WINDOW]
  ORIGIN_PIDS: comma-separated (nginx's master and worker)."""
import re
import sys
from collections import Counter, defaultdict

# "  5468.419221 [0000]  wrk[20166/20165]   0.000   0.000   0.421   R   stack..."
LINE = re.compile(r"^\s*(\d+\.\d+)\s+\[\d+\]\s+(<idle>|\S+?\[(\d+)(?:/(\d+))?\])\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)(?:\s+(\S+))?")
GROUPS = ("hot wrk", "random wrk", "node", "origin", "idle", "other")


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    path, hot, rnd, node = sys.argv[1:5]
    origin = set(sys.argv[5].split(","))
    window = float(sys.argv[6]) if len(sys.argv) > 6 else 0.25

    def group(comm, pid):
        if pid == hot:
            return "hot wrk"
        if pid == rnd:
            return "random wrk"
        if pid == node:
            return "node"
        if pid in origin:
            return "origin"
        if comm == "<idle>":
            return "idle"
        return "other"

    run = defaultdict(Counter)
    hot_off = defaultdict(Counter)  # hot wrk's off-CPU time by the state it left in
    last_state = None
    t0 = None
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            t, comm = float(m.group(1)), m.group(2).split("[", 1)[0]
            pid = m.group(4) or m.group(3) or "0"
            wait, run_ms, state = float(m.group(5)), float(m.group(7)), m.group(8)
            t0 = t if t0 is None else t0
            k = int((t - t0) / window)
            g = group(comm, pid)
            run[k][g] += run_ms
            if g == "hot wrk":
                if last_state is not None:
                    hot_off[k]["runnable" if last_state == "R" else "waiting"] += wait
                last_state = state
    if not run:
        sys.exit(f"mixedcpu: no sched lines in {path}")
    print("%-6s %s %s" % ("from_s", " ".join("%10s" % g.replace(" ", "_") for g in GROUPS), " hot_wrk_off:runnable/waiting"))
    total = Counter()
    for k in sorted(run):
        total.update(run[k])
        print("%-6.2f %s  %6.1f / %6.1f" % (
            k * window,
            " ".join("%10.1f" % run[k][g] for g in GROUPS),
            hot_off[k]["runnable"], hot_off[k]["waiting"]))
    print("%-6s %s" % ("total", " ".join("%10.1f" % total[g] for g in GROUPS)))


if __name__ == "__main__":
    main()
