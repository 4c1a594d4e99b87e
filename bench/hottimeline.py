#!/usr/bin/env python3
"""When the caching bench's slow hot responses happen: read content-server access lines (stderr
of `serve --access-log`), take the mixed phase (the 21 s window with the most /hot.bin answers
of the full object), and print hot responses per second, how many of the slowest 1% finish in
each second, other responses per second, and the server-side percentiles (whole window and from
SKIP s on). Server-side durations end when the last byte is handed to the kernel, so they are a
floor under what the client measures. Usage: hottimeline.py LOG [HOT_PATH] [SKIP]"""
import datetime
import re
import sys
from collections import Counter

LINE = re.compile(r'^(\S+?)Z? .*path="([^"]+)" status=(\d+) bytes=(\d+) duration_ms=([\d.]+)')


def pct(sorted_ms, q):
    return sorted_ms[min(len(sorted_ms) - 1, int(len(sorted_ms) * q))]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    log, hot_path = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "/hot.bin"
    skip = float(sys.argv[3]) if len(sys.argv) > 3 else 3.0
    rows = []
    with open(log, errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if m:
                t = datetime.datetime.fromisoformat(m.group(1)).timestamp()
                rows.append((t, m.group(2), int(m.group(3)), int(m.group(4)), float(m.group(5))))
    full = [r for r in rows if r[1] == hot_path and r[2] == 200]
    if not full:
        sys.exit(f"hottimeline: no 200 answers for {hot_path} in {log}")
    size = max(r[3] for r in full)
    # The whole object (head lengths differ by a few bytes: Age, Date).
    hot = sorted(r for r in full if r[3] >= size - 1024)
    # The mixed phase: the 21 s window holding the most full hot answers.
    most, t0, j = 0, hot[0][0], 0
    for i, r in enumerate(hot):
        while j < len(hot) and hot[j][0] < r[0] + 21:
            j += 1
        if j - i > most:
            most, t0 = j - i, r[0]
    win = [r for r in hot if t0 <= r[0] < t0 + 21]
    ms = sorted(r[4] for r in win)
    slow = pct(ms, 0.99)
    per_s, slow_s = Counter(), Counter()
    for r in win:
        per_s[int(r[0] - t0)] += 1
        slow_s[int(r[0] - t0)] += r[4] >= slow
    other = Counter(int(r[0] - t0) for r in rows if r[1] != hot_path and t0 <= r[0] < t0 + 21)
    print(f"# {len(win)} hot answers of {size} B in the mixed phase; server-side ms:")
    print(f"all      p50={pct(ms, .5):.1f} p90={pct(ms, .9):.1f} p99={slow:.1f} max={ms[-1]:.1f}")
    late = sorted(r[4] for r in win if r[0] >= t0 + skip)
    if late:
        print(f"from {skip:g}s  p50={pct(late, .5):.1f} p90={pct(late, .9):.1f} "
              f"p99={pct(late, .99):.1f} max={late[-1]:.1f}")
    print("second hot_answers of_them_slowest_1% other_answers")
    for s in sorted(per_s):
        print(f"{s:6d} {per_s[s]:11d} {slow_s[s]:19d} {other[s]:13d}")


if __name__ == "__main__":
    main()
