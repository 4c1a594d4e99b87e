#!/usr/bin/env bash
# Memory per entry of the cache index (issue 11's budget: at most 200 bytes per cached object,
# map overhead included): inserts ENTRIES entries [1000000] into one volume's index and prints
# the resident-set growth per entry (server/examples/cache_index_memory.rs).
# Usage: bench/cache-index-memory.sh [ENTRIES]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p content-server --example cache_index_memory
exec target/release/examples/cache_index_memory "${1:-1000000}"
