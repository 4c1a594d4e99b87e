#!/usr/bin/env bash
# Runs every test of the platform: formatting, lints, Rust unit + integration tests (server with
# fault injection, operator), and the platform-wide tests in e2e/ (Prometheus, promtool, Helm).
# Installs what it needs when missing (scripts/deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh

echo "== cargo fmt"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy --workspace --all-targets --all-features -- -D warnings
echo "== cargo test"
cargo build --workspace --all-features --bins
# The operator's contract test runs this binary instead of building its own copy.
export CONTENT_SERVER_BIN="$PWD/target/debug/content-server"
cargo test --workspace --all-features
echo "== e2e (pytest)"
python3 -m pytest -q e2e
