#!/usr/bin/env bash
# The ceiling of cachebench.sh's hot column on this machine: its hot load alone (HOT_CONNS wrk
# clients on one 4 MiB object, keep-alive) against a server with nothing else to do (the object
# a static file, in the page cache, no cache misses, no origin, no random clients), nginx and
# content-server in ONE invocation, under each congestion control in CCS (the host's sysctl is
# switched for each and put back at exit, so nginx and the client get it too).
#
# In cachebench's mixed phase the hot clients share the machine with 48 random clients, the
# fills and the origin, so its hot p99 cannot be lower than what this prints for the same
# server. On loopback the hot throughput is set by the client and the kernel (wrk reads 8 KiB
# per read(2) and ioctl(FIONREAD) after each), not by the server's disk path.
#
# Usage: bench/hotceiling.sh [TARGET ...]   TARGET = nginx | ours   (default: both)
# Env: HOT_CONNS [16] DURATION [10] RUNS [2] CCS ["<host's> cubic"] PORT [18097]
#   FILE [/var/tmp/seedbench/hot.bin, else 4 MiB of random bytes] BIN [target/release/content-server]
# Needs root (sysctl), wrk and nginx (apt-get install wrk nginx-light).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
HOT_CONNS=${HOT_CONNS:-16}
DURATION=${DURATION:-10}
RUNS=${RUNS:-2}
PORT=${PORT:-18097}
BIN=${BIN:-$PWD/target/release/content-server}
FILE=${FILE:-/var/tmp/seedbench/hot.bin}
HOST_CC=$(sysctl -n net.ipv4.tcp_congestion_control)
CCS=${CCS:-$HOST_CC cubic}
[ $# -ge 1 ] || set -- nginx ours
command -v wrk >/dev/null || { echo "hotceiling: missing wrk (apt-get install wrk)" >&2; exit 2; }
command -v nginx >/dev/null || { echo "hotceiling: missing nginx (apt-get install nginx-light)" >&2; exit 2; }
[ -x "$BIN" ] || { echo "hotceiling: no $BIN (cargo build --release -p content-server)" >&2; exit 2; }
require_free_port "$PORT"

bench_workdir hotceiling
trap 'stop_server; sysctl -qw net.ipv4.tcp_congestion_control="$HOST_CC"; rm -rf "$WORK"' EXIT
if [ -f "$FILE" ]; then
  cp "$FILE" "$DOCROOT/hot.bin"
else
  head -c $((4 << 20)) /dev/urandom >"$DOCROOT/hot.bin"
fi
cat "$DOCROOT/hot.bin" >/dev/null # in the page cache before the first run
chmod -R a+rX "$WORK"             # nginx's workers run as nobody

start() { # $1 = target
  case "$1" in
    nginx)
      cat >"$WORK/nginx.conf" <<EOF
worker_processes $(nproc); pid $WORK/nginx.pid; error_log $WORK/nginx.err; daemon off;
events { worker_connections 4096; }
http { access_log off; sendfile on; tcp_nopush on; keepalive_requests 1000000;
  server { listen 127.0.0.1:$PORT; root $DOCROOT; } }
EOF
      nginx -c "$WORK/nginx.conf" >"$WORK/server.log" 2>&1 &
      ;;
    ours)
      "$BIN" serve --root "$DOCROOT" --listen 127.0.0.1 --port "$PORT" --admin-listen "" >"$WORK/server.log" 2>&1 &
      ;;
    *) echo "hotceiling: unknown target $1 (nginx | ours)" >&2; exit 2 ;;
  esac
  SERVER_PID=$!
  wait_answer "http://127.0.0.1:$PORT/hot.bin" 50 "$1" "$WORK/server.log"
}

to_ms() { awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /[0-9]s$/ && v !~ /ms$/) n *= 1000; printf "%.2f", n }'; }

echo "# hotceiling hot_conns=$HOT_CONNS duration=${DURATION}s runs=$RUNS cores=$(nproc) object=$(stat -c %s "$DOCROOT/hot.bin")B"
for cc in $CCS; do
  sysctl -qw net.ipv4.tcp_congestion_control="$cc"
  for run in $(seq 1 "$RUNS"); do
    for t in "$@"; do
      start "$t"
      wrk -t1 -c"$HOT_CONNS" -d"${DURATION}s" --latency "http://127.0.0.1:$PORT/hot.bin" >"$WORK/wrk.out" 2>&1
      stop_server
      rps=$(awk '/^Requests\/sec:/ {print $2}' "$WORK/wrk.out")
      p50=$(to_ms "$(awk '$1 == "50%" {print $2}' "$WORK/wrk.out")")
      p99=$(to_ms "$(awk '$1 == "99%" {print $2}' "$WORK/wrk.out")")
      errs=$(awk '/Socket errors|Non-2xx/' "$WORK/wrk.out" | tr '\n' ' ')
      printf 'cc=%-6s run=%s %-6s hot_rps=%s hot_p50_ms=%s hot_p99_ms=%s %s\n' "$cc" "$run" "$t" "$rps" "$p50" "$p99" "${errs:-errors=0}"
    done
  done
done
