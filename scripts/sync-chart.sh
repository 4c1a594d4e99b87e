#!/usr/bin/env bash
# Refreshes the Helm chart's copies of files that live outside it (Helm cannot read outside the
# chart directory): crds/*.yaml -> charts/contentserver-operator/crds/,
# dashboards/*.json -> charts/contentserver-operator/files/dashboards/,
# dashboards/alerts.yaml -> charts/contentserver-operator/files/alerts.yaml,
# dashboards/prometheus-adapter.yaml -> charts/contentserver-operator/files/prometheus-adapter.yaml.
# e2e/test_packaging.py fails when a copy differs from its source. Idempotent.
#   bash scripts/sync-chart.sh          # copy
#   bash scripts/sync-chart.sh --check  # only report differences (exit 1 if any)
set -euo pipefail
cd "$(dirname "$0")/.."

chart=charts/contentserver-operator
mode=${1:-copy}
status=0

sync_dir() { # sync_dir SRC_DIR GLOB DEST_DIR: DEST_DIR/GLOB becomes exactly SRC_DIR/GLOB
  local src=$1 glob=$2 dest=$3 f name
  if ! compgen -G "$src/$glob" >/dev/null; then
    echo "sync-chart: no $src/$glob (source missing)" >&2
    status=1
    return
  fi
  mkdir -p "$dest"
  for f in "$src"/$glob; do
    name=$(basename "$f")
    if ! cmp -s "$f" "$dest/$name"; then
      if [ "$mode" = --check ]; then
        echo "sync-chart: $dest/$name differs from $f" >&2
        status=1
      else
        cp "$f" "$dest/$name"
        echo "sync-chart: $f -> $dest/$name"
      fi
    fi
  done
  for f in "$dest"/$glob; do
    [ -e "$f" ] || continue
    name=$(basename "$f")
    if [ ! -e "$src/$name" ]; then
      if [ "$mode" = --check ]; then
        echo "sync-chart: $f has no source $src/$name" >&2
        status=1
      else
        rm "$f"
        echo "sync-chart: removed stale $f"
      fi
    fi
  done
}

sync_file() { # sync_file SRC DEST
  local src=$1 dest=$2
  if [ ! -f "$src" ]; then
    echo "sync-chart: no $src (source missing)" >&2
    status=1
    return
  fi
  if ! cmp -s "$src" "$dest"; then
    if [ "$mode" = --check ]; then
      echo "sync-chart: $dest differs from $src" >&2
      status=1
    else
      mkdir -p "$(dirname "$dest")"
      cp "$src" "$dest"
      echo "sync-chart: $src -> $dest"
    fi
  fi
}

sync_dir crds '*.yaml' "$chart/crds"
sync_dir dashboards '*.json' "$chart/files/dashboards"
sync_file dashboards/alerts.yaml "$chart/files/alerts.yaml"
sync_file dashboards/prometheus-adapter.yaml "$chart/files/prometheus-adapter.yaml"
exit "$status"
