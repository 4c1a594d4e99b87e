#!/usr/bin/env bash
# Who has the CPUs in the first seconds of the caching bench's mixed phase, where the hot clients'
# slow answers are (bench/hottimeline.sh). Runs ../shared/bench/cachebench.sh on ours alone with
# the README's command (plus OURS_EXTRA), records the scheduler (`perf sched record -a`) for
# SECONDS from the start of the mixed phase, and prints per WINDOW the CPU time of the hot wrk,
# the random wrk, the node, the origin, the idle task and the rest, and whether the hot wrk's
# time off a CPU was spent runnable (preempted: it wanted a CPU) or waiting for bytes
# (bench/mixedcpu.py). Session 31 used it to find that the hot wrk is runnable, not waiting, for
# most of its first second, sharing about one CPU with the random wrk (both run in the benchmark
# shell's session, which the kernel's autogroup schedules as one group).
#
# Usage: bench/mixedcpu.sh [SECONDS]    (default 2; needs root, perf (linux-perf) and what
#   cachebench.sh needs)
# Env: BIN [target/release/content-server] THREADS [64] OURS_EXTRA [] WINDOW [0.25]
#   KEEP [a directory to keep sched.data and the timehist in]; cachebench's knobs pass through.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
SECONDS_REC=${1:-2}
BIN=${BIN:-$PWD/target/release/content-server}
THREADS=${THREADS:-64}
WINDOW=${WINDOW:-0.25}
BENCH=../shared/bench/cachebench.sh
command -v perf >/dev/null || { echo "mixedcpu: missing perf (apt-get install linux-perf)" >&2; exit 2; }
[ -x "$BIN" ] || { echo "mixedcpu: no $BIN (cargo build --release -p content-server)" >&2; exit 2; }
[ -f "$BENCH" ] || { echo "mixedcpu: no $BENCH" >&2; exit 2; }
OUTDIR=${KEEP:-$(mktemp -d /tmp/mixedcpu.XXXXXX)}
mkdir -p "$OUTDIR"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$OUTDIR"' EXIT

record() { # in the background: wait for both wrk of the mixed phase, note the pids, record
  local rnd="" hot="" i
  for i in $(seq 1 6000); do
    rnd=$(pgrep -f 'wrk .*zipf\.lua' | head -1 || true)
    hot=$(pgrep -f 'wrk .*--latency http://.*/hot\.bin' | head -1 || true)
    [ -n "$rnd" ] && [ -n "$hot" ] && break
    sleep 0.01
  done
  [ -n "$rnd" ] && [ -n "$hot" ] || { echo "mixedcpu: the mixed phase's wrk never appeared" >&2; return 1; }
  local node origin
  node=$(pgrep -n -x content-server || true)
  origin=$(pgrep -f 'origin/nginx\.conf' | head -1 || true)
  [ -n "$origin" ] && origin="$origin,$(pgrep -P "$origin" | paste -sd, -)"
  echo "$hot $rnd ${node:-0} ${origin:-0}" >"$OUTDIR/pids"
  perf sched record -a -o "$OUTDIR/sched.data" -- sleep "$SECONDS_REC" >/dev/null 2>&1
}
record &
REC=$!
bash "$BENCH" "$(cache_node_cmd "$BIN" "$THREADS" "${OURS_EXTRA:-}")"
wait "$REC"
read -r HOT RND NODE ORIGIN <"$OUTDIR/pids"
perf sched timehist -i "$OUTDIR/sched.data" --state >"$OUTDIR/timehist.txt" 2>/dev/null
echo "# first ${SECONDS_REC} s of the mixed phase, CPU ms per ${WINDOW} s (2 CPUs = $(awk -v w="$WINDOW" 'BEGIN{print 2000*w}') ms per window)"
python3 bench/mixedcpu.py "$OUTDIR/timehist.txt" "$HOT" "$RND" "$NODE" "$ORIGIN" "$WINDOW"
