#!/usr/bin/env bash
# User-space instructions per keep-alive request (KEEPALIVE=0: per connection that carries one
# request and closes), nginx and content-server in ONE invocation,
# counted by `valgrind --tool=callgrind` (instruction counts do not depend on the machine's load).
# Each server runs with one worker (nginx: master_process off, worker_processes 1; ours:
# --workers 1, admin off) and serves `ab -k -c 1` GETs of one 10 KiB file. Each target runs twice,
# with N1 and N2 requests; per request = (Ir(N2) - Ir(N1)) / (N2 - N1), which subtracts start-up,
# warm-up and shutdown. All threads of the process are counted (ours' pool threads too). The
# kernel's share (sendfile, epoll) is not in this count.
# Ours opens every file with openat2, which valgrind handles from 3.20 on (Debian 12 ships 3.19:
# take a newer one, e.g. Debian 13's package unpacked with `dpkg -x`, and point VALGRIND at it, with
# VALGRIND_LIB at its libexec/valgrind). Under valgrind RESOLVE_CACHED and RWF_NOWAIT are
# refused, so ours' `auto` runs as `always` there (opens and sendfile on the pool).
#
# Usage: bench/callgrind.sh [TARGET ...]   TARGET = nginx | ours[:MODE] (default: nginx ours)
# Env: N1 [2000] N2 [12000] KEEPALIVE [1: ab -k; 0: one request per connection] PORT [18096] BIN [target/release/content-server] VALGRIND [valgrind]
#      ANNOTATE [0: 1 prints the top functions of each target's N2 run] KEEP [dir to copy the profiles to]
# Needs valgrind, nginx, ab (apt-get install valgrind nginx-light apache2-utils).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
N1=${N1:-2000}
N2=${N2:-12000}
KEEPALIVE=${KEEPALIVE:-1}
PORT=${PORT:-18096}
BIN=${BIN:-$PWD/target/release/content-server}
ANNOTATE=${ANNOTATE:-0}
VALGRIND=${VALGRIND:-valgrind}
[ $# -ge 1 ] || set -- nginx ours
for c in "$VALGRIND" nginx ab curl; do
  command -v "$c" >/dev/null || { echo "callgrind: missing $c (apt-get install valgrind nginx-light apache2-utils curl)" >&2; exit 2; }
done
vg_version=$("$VALGRIND" --version | sed 's/^valgrind-//')
case "$vg_version" in
  3.1[0-9]*|3.[0-9].*|[0-2].*) echo "callgrind: $VALGRIND is $vg_version; ours needs openat2 support (valgrind >= 3.20)" >&2; exit 2 ;;
esac
ANNOTATE_BIN=$(dirname "$(command -v "$VALGRIND")")/callgrind_annotate
[ -x "$ANNOTATE_BIN" ] || ANNOTATE_BIN=callgrind_annotate
bench_workdir callgrind
head -c 10240 /dev/urandom >"$DOCROOT/10k.dat"
chmod -R a+rX "$WORK"
cat >"$WORK/nginx.conf" <<NGX
master_process off;
daemon off;
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log warn;
events { worker_connections 1024; }
http {
  default_type application/octet-stream;
  access_log off;
  sendfile on;
  keepalive_requests 1000000;
  server { listen 127.0.0.1:$PORT; location / { root $DOCROOT; } }
}
NGX

# run_one TARGET REQUESTS OUTFILE: runs it (in this shell, so that the EXIT trap can stop it).
run_one() {
  local cmd
  case "$1" in
    nginx) cmd=(nginx -c "$WORK/nginx.conf") ;;
    ours*) local mode=auto; [ "$1" != ours ] && mode=${1#ours:}
           cmd=("$BIN" serve --root "$DOCROOT" --listen 127.0.0.1 --port "$PORT" --workers 1
                --admin-listen "" --offload "$mode") ;;
    *) echo "callgrind: unknown target $1" >&2; exit 2 ;;
  esac
  require_free_port "$PORT"
  "$VALGRIND" --tool=callgrind --callgrind-out-file="$3" "${cmd[@]}" >"$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  wait_answer "http://127.0.0.1:$PORT/10k.dat" 300 "$1" "$WORK/server.log"
  local k=-k
  [ "$KEEPALIVE" = 1 ] || k=
  ab $k -c 1 -n "$2" "http://127.0.0.1:$PORT/10k.dat" >"$WORK/ab.out" 2>&1
  grep -q "^Failed requests: *0" "$WORK/ab.out" || { echo "callgrind: ab failed:" >&2; cat "$WORK/ab.out" >&2; exit 1; }
  if [ "$KEEPALIVE" = 1 ]; then
    grep -q "^Keep-Alive requests: *$2" "$WORK/ab.out" || { echo "callgrind: not all requests were keep-alive:" >&2; grep Keep "$WORK/ab.out" >&2; exit 1; }
  fi
  stop_server
}
total_ir() { awk '/^(summary|totals):/ {print $2; exit}' "$1"; }

if [ "$KEEPALIVE" = 1 ]; then
  echo "# callgrind: user-space instructions per keep-alive GET of a 10 KiB file (ab -k -c 1), N1=$N1 N2=$N2"
else
  echo "# callgrind: user-space instructions per connection carrying one GET of a 10 KiB file (ab -c 1, no keep-alive), N1=$N1 N2=$N2"
fi
for t in "$@"; do
  run_one "$t" "$N1" "$WORK/$t.1.out"
  run_one "$t" "$N2" "$WORK/$t.2.out"
  a=$(total_ir "$WORK/$t.1.out")
  b=$(total_ir "$WORK/$t.2.out")
  printf '%-12s instructions_per_request=%d  (Ir %d at %d requests, %d at %d)\n' \
    "$t" $(( (b - a) / (N2 - N1) )) "$a" "$N1" "$b" "$N2"
  [ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$WORK/$t.1.out" "$WORK/$t.2.out" "$KEEP/"
  if [ "$ANNOTATE" = 1 ]; then
    "$ANNOTATE_BIN" --inclusive=no "$WORK/$t.2.out" 2>/dev/null | sed -n '1,60p' | grep -v '^--' | head -45
  fi
done
