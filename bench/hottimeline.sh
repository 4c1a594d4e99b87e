#!/usr/bin/env bash
# When in the caching bench's mixed phase the slow hot responses happen: runs
# ../shared/bench/cachebench.sh on ours alone with the README's command plus --access-log (stderr
# to a file), then bench/hottimeline.py on it: hot answers per second, where the slowest 1% fall,
# the server-side p99 of the whole phase and from SKIP s on. Session 28 used it to find that the
# 20 s hot p99 is mostly the first two seconds (random clients pulling the first fills as hits).
#
# Usage: bench/hottimeline.sh            (needs root, like cachebench.sh)
# Env: BIN [target/release/content-server] THREADS [64] SKIP [3] KEEP [the log's path; default:
#   a temporary file, removed]; cachebench's own knobs (DURATION, PORT, ...) pass through.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
BIN=${BIN:-$PWD/target/release/content-server}
THREADS=${THREADS:-64}
SKIP=${SKIP:-3}
BENCH=../shared/bench/cachebench.sh
[ -x "$BIN" ] || { echo "hottimeline: no $BIN (cargo build --release -p content-server)" >&2; exit 2; }
[ -f "$BENCH" ] || { echo "hottimeline: no $BENCH" >&2; exit 2; }
LOG=${KEEP:-$(mktemp /tmp/hottimeline.XXXXXX.log)}
[ -n "${KEEP:-}" ] || trap 'rm -f "$LOG"' EXIT
: >"$LOG"
bash "$BENCH" "$(cache_node_cmd "$BIN" "$THREADS" --access-log) 2>>$LOG"
python3 bench/hottimeline.py "$LOG" /hot.bin "$SKIP"
