#!/usr/bin/env bash
# Measurement for offload=auto (not part of the test suite): sending a page-cache-resident body
# chunk by copy (preadv2 RWF_NOWAIT + write on the loop), sendfile on the loop (after cachestat),
# or sendfile on a pool thread. Prints a Markdown table.
# Usage: bash scripts/measure-copy-vs-sendfile.sh [DIR-on-a-disk-filesystem]
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-$PWD/target}"
cargo build --release -q -p content-server --example copy_vs_sendfile
exec ./target/release/examples/copy_vs_sendfile "$dir"
