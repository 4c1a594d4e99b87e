# Helpers shared by the benchmark scripts that start one server at a time (sourced, not run):
#   bench_workdir NAME   WORK = a fresh /tmp/NAME.XXXXXX (removed at exit), DOCROOT = $WORK/root
#   SERVER_PID           the server started in the background (set it after `cmd &`); with
#                        SERVER_GROUP=1 it leads its own process group (setsid), stopped whole
#   stop_server          SIGTERM to it and wait; also run at exit
#   require_free_port P  exit 1 when something listens on port P
#   wait_answer URL TRIES WHAT LOG   poll URL every 0.1 s; after TRIES, print LOG and exit 1
#   cache_node_cmd BIN THREADS [EXTRA]   cachebench.sh's `cmd:` target for ours: the README's
#                        caching-node command (one --cache-dir per $CACHE_DIRS), EXTRA more `serve` args
# shellcheck shell=bash

SERVER_PID=
SERVER_GROUP=${SERVER_GROUP:-0}

stop_server() {
  if [ -n "$SERVER_PID" ]; then
    if [ "$SERVER_GROUP" = 1 ]; then
      kill -TERM -- -"$SERVER_PID" 2>/dev/null || true
    else
      kill -TERM "$SERVER_PID" 2>/dev/null || true
    fi
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=
}

bench_workdir() {
  WORK=$(mktemp -d "/tmp/$1.XXXXXX")
  DOCROOT=$WORK/root
  mkdir -p "$DOCROOT"
  trap 'stop_server; rm -rf "$WORK"' EXIT
}

require_free_port() {
  if ss -Hltn "sport = :$1" | grep -q .; then
    echo "$(basename "$0"): port $1 is already in use" >&2
    exit 1
  fi
}

wait_answer() {
  local _
  for _ in $(seq 1 "$2"); do
    curl -sf -o /dev/null "$1" && return 0
    sleep 0.1
  done
  echo "$(basename "$0"): $3 did not answer; its log:" >&2
  cat "$4" >&2
  exit 1
}

cache_node_cmd() {
  echo "cmd:$1 serve --origin \$ORIGIN --listen 127.0.0.1 --port \$PORT --admin-listen 127.0.0.1:0 --threads $2${3:+ $3} \$(for d in \$CACHE_DIRS; do printf -- '--cache-dir %s ' \"\$d\"; done)"
}
