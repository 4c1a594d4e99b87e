#!/usr/bin/env bash
# Memory per connection, nginx and content-server in ONE invocation: for each target and each
# state below, a fresh server gets N connections (default 10,000) on loopback and the growth of
# its processes' memory is divided by N.
#   idle    one keep-alive request answered (1 KiB file), then the connection stays open
#   header  half a request head sent (the connection waits in the header timeout)
#   slow    a GET of an 8 MiB file whose reader stalls after 16 KiB (the response stays in flight)
#
# What is counted: user-space memory of the server processes, Pss from /proc/PID/smaps_rollup
# summed over the process tree (nginx master + workers; ours is one process), Rss shown next to
# it. Pss counts pages shared between nginx's processes once, so the two servers are counted the
# same way. Kernel socket buffers are not process memory and are left out on purpose (they are
# the same kernel for both, and depend on the client's window, not on the server): a cgroup's
# memory.current would include them (and page cache), which would make the per-connection
# figure mostly a measure of TCP buffers. Each state starts a fresh server, since freed memory
# stays in the allocator and would hide the next state's growth.
#
# Usage: bench/connmem.sh [TARGET ...]   TARGET = nginx | ours[:MODE] (MODE = offload mode, default auto)
# Env: N [10000] PORT [18095] BIN [target/release/content-server] STATES ["idle header slow"]
# Needs root for `ulimit -n 20000` (raised here) and nginx (apt-get install nginx-light), python3.
set -euo pipefail
cd "$(dirname "$0")/.."
SERVER_GROUP=1 # each server runs under setsid: stop its whole process tree
. bench/lib.sh
N=${N:-10000}
PORT=${PORT:-18095}
BIN=${BIN:-$PWD/target/release/content-server}
STATES=${STATES:-idle header slow}
[ "$N" -le 10000 ] || { echo "connmem: N is at most 10000" >&2; exit 2; }
[ $# -ge 1 ] || set -- nginx ours
command -v nginx >/dev/null || { echo "connmem: missing nginx (apt-get install nginx-light)" >&2; exit 2; }
ulimit -n 20000
bench_workdir connmem
head -c 1024 /dev/urandom >"$DOCROOT/small.dat"
head -c $((8 << 20)) /dev/urandom >"$DOCROOT/big.dat"
chmod -R a+rX "$WORK"
# Long timeouts on both sides so that nothing closes while it is measured.
cat >"$WORK/nginx.conf" <<NGX
worker_processes $(nproc);
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log warn;
worker_rlimit_nofile 20000;
events { worker_connections 20000; accept_mutex off; }
http {
  default_type application/octet-stream;
  access_log off;
  sendfile on;
  keepalive_timeout 300s;
  keepalive_requests 100000;
  client_header_timeout 300s;
  send_timeout 300s;
  server { listen 127.0.0.1:$PORT reuseport backlog=4096; location / { root $DOCROOT; } }
}
NGX
ours_conf() { # $1 = offload mode
  cat <<TOML
[[listeners]]
address = "127.0.0.1"
port = $PORT
backlog = 4096
[limits]
max_connections = 20000
keepalive_timeout_secs = 300
header_read_timeout_secs = 300
send_timeout_secs = 300
[admin]
listen = ""
[logging]
level = "warn"
[[volumes]]
name = "root"
path = "$DOCROOT"
offload = "$1"
TOML
}

start_server() {
  local cmd
  case "$1" in
    nginx) cmd="exec nginx -c $WORK/nginx.conf -g 'daemon off;'" ;;
    ours*) ours_conf "$( [ "$1" = ours ] && echo auto || echo "${1#ours:}")" >"$WORK/ours.toml"
           cmd="exec $BIN serve --config $WORK/ours.toml" ;;
    *) echo "connmem: unknown target $1" >&2; exit 2 ;;
  esac
  require_free_port "$PORT"
  setsid bash -c "$cmd" >"$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  wait_answer "http://127.0.0.1:$PORT/small.dat" 100 "$1" "$WORK/server.log"
}
# The server's process tree: the session leader's child (nginx master, or ours) and its children.
server_pids() {
  local top
  top=$(pgrep -s "$SERVER_PID" | tr '\n' ' ')
  echo "$top"
}

echo "# connmem N=$N cores=$(nproc) kernel=$(uname -r) (bytes per connection: Pss / Rss growth)"
for t in "$@"; do
  for s in $STATES; do
    start_server "$t"
    # shellcheck disable=SC2046
    printf '%-12s %s\n' "$t" "$(timeout 180 python3 bench/connmem.py "$PORT" "$s" "$N" $(server_pids))"
    stop_server
  done
done
