#!/usr/bin/env bash
# A soak of the caching node: many concurrent clients against three cache volumes, each answer
# checked byte for byte (bench/cachesoak.py), in these scenarios, one line each:
#   plain     whole and single-range GETs (some past the end) and HEADs, nothing evicted: besides
#             no bad answer, no slice is fetched from the origin twice (extra_fetches=0: collapsed)
#   evict     max_size far under the object set (eviction all the time), and the node killed
#             (-9) and started again halfway: nothing served truncated or corrupt
#   versions  the origin publishes new versions of random objects 20 times a second, entries are
#             fresh for 1 s: never two versions in one body, the newest served after it
#   faults    one origin answer in six is wrong (503, a longer Content-Length, a reset, a stall
#             past read_timeout_ms, a truncation): answers are correct or cut (`cut`, never
#             wrong), and once the faults stop every object is served whole; `resumes` counts
#             broken bodies continued with a Range request
#   purge     random objects purged (POST /cache/purge, 20/s) while clients read them
#   noval     the versions scenario against an origin that sends no validators, every version of
#             an object the same size: only the bytes tell versions apart (slices may not be
#             combined then: multi-slice objects pass through, so never two versions in a body)
# The origin is bench/cachesoak.py's (Range, strong ETags, Last-Modified). Needs no root.
# Usage: bench/cachesoak.sh [SCENARIO ...]   (default: all of them)
# Env: SECS [20] THREADS [24] OBJECTS [200] PORT [18290] BIN [target/release/content-server]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
SECS=${SECS:-20}
THREADS=${THREADS:-24}
OBJECTS=${OBJECTS:-200}
PORT=${PORT:-18290}
OPORT=$((PORT + 1))
APORT=$((PORT + 2))
BIN=${BIN:-$PWD/target/release/content-server}
[ -x "$BIN" ] || { echo "cachesoak: no $BIN (cargo build --release -p content-server)" >&2; exit 2; }
[ $# -ge 1 ] || set -- plain evict versions faults purge noval
for p in "$PORT" "$OPORT" "$APORT"; do require_free_port "$p"; done
SOAK="python3 bench/cachesoak.py"

bench_workdir cachesoak
head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/token"
ORIGIN_PID=
trap 'stop_server; [ -z "$ORIGIN_PID" ] || kill "$ORIGIN_PID" 2>/dev/null; rm -rf "$WORK"' EXIT

node_config() { # MAX_SIZE VALID_SECS
  {
    printf '[[listeners]]\naddress = "127.0.0.1"\nport = %s\n[admin]\nlisten = "127.0.0.1:%s"\npurge_token_file = "%s"\n' "$PORT" "$APORT" "$WORK/token"
    printf '[[origins]]\nname = "origin"\nservers = ["http://127.0.0.1:%s"]\nread_timeout_ms = 500\n' "$OPORT"
    for v in c1 c2 c3; do
      printf '[[volumes]]\nname = "%s"\npath = "%s"\n[volumes.cache]\n' "$v" "$WORK/$v"
      [ "$1" = - ] || printf 'max_size = "%s"\n' "$1"
    done
    printf '[[routes]]\nprefix = "/"\norigin = "origin"\nsplit = [{ volume = "c1", percent = 33.3 }, { volume = "c2", percent = 33.3 }, { volume = "c3" }]\n'
    printf '[routes.cache]\nvalid = [{ status = [200, 206], secs = %s }]\nstale_while_revalidate_secs = 0\n' "$2"
  } >"$WORK/node.toml"
}

start_node() {
  "$BIN" serve --config "$WORK/node.toml" >>"$WORK/node.log" 2>&1 &
  SERVER_PID=$!
  wait_answer "http://127.0.0.1:$PORT/o0.bin" 100 node "$WORK/node.log"
}

metric_sum() { curl -s "http://127.0.0.1:$APORT/metrics" | awk -v m="$1" '$1 ~ "^"m"[{]" { s += $2 } END { print s + 0 }'; }

for scenario in "$@"; do
  rm -rf "$WORK/objects" "$WORK"/c? "$WORK/origin.log" "$WORK/node.log"
  if [ "$scenario" = noval ]; then export SOAK_NOVAL=1; else unset SOAK_NOVAL; fi
  mkdir -p "$WORK/c1" "$WORK/c2" "$WORK/c3"
  $SOAK objects "$WORK/objects" "$OBJECTS"
  $SOAK origin "$OPORT" "$WORK/objects" "$WORK/origin.log" 2>/dev/null &
  ORIGIN_PID=$!
  case $scenario in
    plain) node_config - 3600 ;;
    evict) node_config 40M 3600 ;;
    versions | noval) node_config 40M 1 ;;
    faults) node_config 80M 3600; touch "$WORK/objects/.faults" ;;
    purge) node_config 80M 3600 ;;
    *) echo "cachesoak: unknown scenario $scenario (plain | evict | versions | faults | purge | noval)" >&2; exit 2 ;;
  esac
  start_node
  args=()
  [ "$scenario" = versions ] || [ "$scenario" = noval ] && args=(change)
  [ "$scenario" = purge ] && args=(purge "$APORT" "$(cat "$WORK/token")")
  if [ "$scenario" = evict ]; then
    $SOAK clients "$PORT" "$WORK/objects" "$SECS" "$THREADS" >"$WORK/clients.out" &
    CLIENTS=$!
    sleep "$((SECS / 2))"
    kill -9 "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
    start_node
    wait "$CLIENTS"
  else
    $SOAK clients "$PORT" "$WORK/objects" "$SECS" "$THREADS" "${args[@]}" >"$WORK/clients.out"
  fi
  rm -f "$WORK/objects/.faults"
  sleep 1.2 # past the versions scenario's freshness
  bad=$($SOAK verify "$PORT" "$WORK/objects" 200)
  extra=-
  [ "$scenario" = plain ] && extra=$($SOAK dups "$WORK/origin.log" "$WORK/objects" 1048576)
  printf '%-9s clients=%s verify_bad=%s extra_fetches=%s resumes=%s evictions=%s disk=%s\n' "$scenario" \
    "$(cat "$WORK/clients.out")" "$bad" "$extra" "$(metric_sum contentserver_cache_fill_resumes_total)" \
    "$(metric_sum contentserver_cache_evictions_total)" "$(du -sh "$WORK"/c? | awk '{printf "%s%s", s, $1; s = "/"}')"
  stop_server
  kill "$ORIGIN_PID" 2>/dev/null; wait "$ORIGIN_PID" 2>/dev/null || true
  ORIGIN_PID=
done
