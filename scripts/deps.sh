#!/usr/bin/env bash
# Installs what the test suite needs when it is missing (a fresh Debian machine passes).
# Idempotent; each block checks before it installs. Sourced by scripts/test.sh.
set -euo pipefail

apt_updated=0
apt_install() { # apt_install PACKAGE... (only when missing)
  if [ "$apt_updated" = 0 ]; then
    apt-get update -qq >/dev/null
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# curl: tests and scripts fetch from the server over HTTP.
command -v curl >/dev/null || apt_install curl
# ss (iproute2): server/tests/accept.rs reads the server socket's unsent bytes.
command -v ss >/dev/null || apt_install iproute2
# nginx: a real origin for the caching node's tests (server/tests/cache_origin.rs).
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null || apt_install nginx-light
# promtool + prometheus: metrics exposition check, alert rule unit tests, dashboard e2e.
command -v promtool >/dev/null || apt_install prometheus
command -v prometheus >/dev/null || apt_install prometheus
# Python test runner for the platform-wide tests in e2e/.
python3 -m pytest --version >/dev/null 2>&1 || python3 -m pip install -q pytest
# Packaging tests (e2e/test_helm.py, e2e/test_packaging.py): cffi loads Helm's Go code, jsonschema
# validates examples/ against the CRD and values against values.schema.json, PyYAML reads both.
python3 -c 'import cffi' 2>/dev/null || python3 -m pip install -q cffi
python3 -c 'import jsonschema' 2>/dev/null || python3 -m pip install -q jsonschema
python3 -c 'import yaml' 2>/dev/null || python3 -m pip install -q pyyaml
# Real `helm lint`: the helm-sdkpy wheel (libhelm_sdkpy.so) unpacked into e2e/.cache (idempotent).
python3 e2e/lib/helm_native.py ensure >/dev/null
# shellcheck: e2e/test_packaging.py lints e2e/kind/run.sh and scripts/sync-chart.sh.
command -v shellcheck >/dev/null || apt_install shellcheck
# CEL runtime for the CRD's x-kubernetes-validations rules (e2e/lib/crd_schema.py).
python3 -c 'import cel' 2>/dev/null || python3 -m pip install -q common-expression-language
# Upstream schemas of the built-in Kubernetes kinds (e2e/lib/upstream_schemas.py).
python3 -c 'import kubernetes_validate' 2>/dev/null || python3 -m pip install -q kubernetes-validate
