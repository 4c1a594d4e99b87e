#!/usr/bin/env bash
# Reproduces the README's benchmark tables: nginx and content-server in ONE invocation of each
# shared benchmark script (machines are noisy; compare ratios within a run, not across runs).
#
# Usage: bench/run.sh [media|small|c10k|cache|all]   (needs root; installs wrk, nginx-light, apache2-utils, iproute2)
# Env: BENCH_DIR [../shared/bench]  OUT [bench/results/<date>.txt]
#   TCP_CC: the host's TCP congestion control (net.ipv4.tcp_congestion_control) for every target, the
#       clients and the origin during the run, put back after (e.g. TCP_CC=cubic; default: unchanged)
#   OURS_EXTRA: more `serve` arguments for ours only (e.g. "--congestion-control cubic")
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
BENCH_DIR=${BENCH_DIR:-../shared/bench}
what=${1:-all}
mkdir -p bench/results
OUT=${OUT:-bench/results/$(date -u +%Y%m%d-%H%M%S).txt}

need() { command -v "$1" >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2"; }; }
need wrk wrk; need nginx nginx-light; need ab apache2-utils; need ss iproute2

cargo build --release -p content-server
BIN=$PWD/target/release/content-server
# (c10k: nginx is configured with backlog 65535, so ours gets it too.)
# nginx runs one 32-thread pool per worker process (worker_processes = cores), so on N cores it
# has 32*N threads; ours has one pool per volume shared by all workers: give it the same total.
THREADS=${THREADS:-$((32 * $(nproc)))}
ours() { # $1 = offload mode
  echo "cmd:$BIN serve --root \$DOCROOT --listen 127.0.0.1 --port \$PORT --admin-listen 127.0.0.1:0 --threads $THREADS --backlog 65535 --offload $1${OURS_EXTRA:+ $OURS_EXTRA}"
}

media() {
  bash "$BENCH_DIR/seedbench.sh" nginx-blocking nginx-threads "$(ours never)" "$(ours always)" "$(ours auto)"
}
small() {
  DATA_DIR=/var/tmp/smallbench FILES=200000 FILE_KB=16 \
    bash "$BENCH_DIR/seedbench.sh" nginx-threads "$(ours always)" "$(ours auto)"
}
c10k() {
  # Without keep-alive every connection the server closes stays in TIME_WAIT for 60 s on the shared
  # loopback, and c10k.sh runs its targets one after the other on one port, so the second target
  # meets ~60,000 of the first one's sockets (measured: the order moved the ratio from 0.95x to
  # 1.33x). So each table starts with TIME_WAIT drained and is run in both orders.
  local range o
  range=$(sysctl -n net.ipv4.ip_local_port_range)
  o=$(ours auto)
  for ka in 0 1; do
    drain_time_wait && KEEPALIVE=$ka bash "$BENCH_DIR/c10k.sh" nginx "$o"
    drain_time_wait && KEEPALIVE=$ka bash "$BENCH_DIR/c10k.sh" "$o" nginx
  done
  # c10k.sh widens the ephemeral port range to 1024-65000, after which client sockets can take
  # seedbench's fixed server port: put the range back.
  sysctl -qw net.ipv4.ip_local_port_range="$range"
}
drain_time_wait() { # wait (at most 70 s) until fewer than 100 TCP sockets are in TIME_WAIT
  local n
  for _ in $(seq 1 70); do
    n=$(ss -Htan state time-wait | wc -l)
    [ "$n" -lt 100 ] && return 0
    sleep 1
  done
  echo "# $n sockets still in TIME_WAIT"
}

cache() { # the caching node: nginx's proxy_cache (with and without slice) and ours, one cache dir each
  bash "$BENCH_DIR/cachebench.sh" nginx-cache nginx-cache-slice "$(cache_node_cmd "$BIN" "$THREADS" "${OURS_EXTRA:-}")"
}

# The share of CPU time the hypervisor took from this VM ("steal" in /proc/stat) while a table
# ran: on shared machines it moved every target by 2x within an hour (34-51% against 0-1%), so
# each table says it, and tables taken at different steal are not comparable.
cpu_times() { awk '/^cpu / {print $2+$3+$4+$5+$6+$7+$8+$9, $9}' /proc/stat; }
with_steal() { # run "$@", then print the steal share over it
  local t0 s0 t1 s1
  read -r t0 s0 < <(cpu_times)
  "$@"
  read -r t1 s1 < <(cpu_times)
  awk -v t="$((t1 - t0))" -v s="$((s1 - s0))" 'BEGIN { if (t > 0) printf "# steal %.1f%% of CPU time during this table\n", 100 * s / t }'
}

if [ -n "${TCP_CC:-}" ]; then
  OLD_CC=$(sysctl -n net.ipv4.tcp_congestion_control)
  sysctl -qw net.ipv4.tcp_congestion_control="$TCP_CC"
  trap 'sysctl -qw net.ipv4.tcp_congestion_control="$OLD_CC"' EXIT
fi
{
echo "# host TCP congestion control: $(sysctl -n net.ipv4.tcp_congestion_control)${OURS_EXTRA:+; ours also gets: $OURS_EXTRA}"
case "$what" in
  media) with_steal media ;; small) with_steal small ;; c10k) with_steal c10k ;; cache) with_steal cache ;;
  all) with_steal media; with_steal small; with_steal c10k; with_steal cache ;;
  *) echo "usage: bench/run.sh [media|small|c10k|cache|all]" >&2; exit 2 ;;
esac
} 2>&1 | tee "$OUT"
echo "results: $OUT"
