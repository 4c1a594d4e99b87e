"""Real `helm lint` without a helm binary: Helm's Go code from the PyPI wheel `helm-sdkpy`.

Owns fetching the wheel into e2e/.cache (pip download; the wheel asks for Python >= 3.12, which
this machine does not have, so it is unpacked, not installed), loading `libhelm_sdkpy.so`
through cffi, and calling its `helm_sdkpy_lint`. It must not talk to a cluster.

    python3 e2e/lib/helm_native.py ensure                # download + unpack (idempotent)
    python3 e2e/lib/helm_native.py lint CHART [VALUES...] # lint, values files merged over values.yaml

The C signatures are those declared in the wheel's helm_sdkpy/_ffi.py (version pinned below).
"""

from __future__ import annotations

import copy
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

VERSION = "0.1.32"
CACHE = Path(__file__).resolve().parent.parent / ".cache" / f"helm-sdkpy-{VERSION}"

CDEF = """
typedef unsigned long long helm_sdkpy_handle;
int helm_sdkpy_config_create(const char *namespace, const char *kubeconfig,
    const char *kubecontext, const char *options_json, helm_sdkpy_handle *handle_out);
void helm_sdkpy_config_destroy(helm_sdkpy_handle handle);
int helm_sdkpy_lint(helm_sdkpy_handle handle, const char *chart_path, char **result_json);
int helm_sdkpy_install(helm_sdkpy_handle handle, const char *release_name, const char *chart_path,
    const char *values_json, const char *version, const char *options_json, char **result_json);
const char *helm_sdkpy_last_error(void);
void helm_sdkpy_free(void *ptr);
const char *helm_sdkpy_version_string(void);
"""

# helm.sh/helm/pkg/lint/support severities.
SEVERITY = {0: "UNKNOWN", 1: "INFO", 2: "WARNING", 3: "ERROR"}


class HelmNativeError(RuntimeError):
    """The library could not be fetched, loaded, or returned an error code."""


def _platform_dir() -> str:
    machine = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    return f"linux-{machine}"


def library_path() -> Path:
    return CACHE / "helm_sdkpy" / "_lib" / _platform_dir() / "libhelm_sdkpy.so"


def ensure() -> Path:
    """Download and unpack the pinned wheel into the cache unless already there."""
    lib = library_path()
    if lib.is_file():
        return lib
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE.parent) as tmp:
        cmd = [
            sys.executable, "-m", "pip", "download", "-q", "--no-deps",
            "--only-binary=:all:", "--python-version", "3.12",
            "-d", tmp, f"helm-sdkpy=={VERSION}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise HelmNativeError(f"pip download helm-sdkpy=={VERSION} failed:\n{proc.stderr}")
        wheels = list(Path(tmp).glob("helm_sdkpy-*.whl"))
        if len(wheels) != 1:
            raise HelmNativeError(f"expected one helm-sdkpy wheel in {tmp}, found {wheels}")
        unpack = Path(tmp) / "unpacked"
        with zipfile.ZipFile(wheels[0]) as zf:
            zf.extractall(unpack)
        if CACHE.exists():
            shutil.rmtree(CACHE)
        unpack.rename(CACHE)
    if not lib.is_file():
        raise HelmNativeError(f"wheel helm-sdkpy=={VERSION} has no {lib.relative_to(CACHE)}")
    lib.chmod(0o755)
    return lib


_LIB: Any = None
_FFI: Any = None


def _load() -> tuple[Any, Any]:
    global _LIB, _FFI
    if _LIB is None:
        from cffi import FFI

        ffi = FFI()
        ffi.cdef(CDEF)
        _LIB = ffi.dlopen(str(ensure()))
        _FFI = ffi
    return _FFI, _LIB


def version() -> str:
    ffi, lib = _load()
    return ffi.string(lib.helm_sdkpy_version_string()).decode()


@dataclass
class LintMessage:
    severity: str
    path: str


# Helm's lint mode downgrades template `fail` and `required` to log lines on stderr instead of
# errors; these markers turn them back into failures here (stricter than `helm lint`).
TEMPLATE_FAILURE_MARKERS = ("funcMap fail", "missing required values")


@dataclass
class LintResult:
    charts_linted: int
    messages: list[LintMessage]
    error_count: int
    raw: dict[str, Any]
    log: list[str]

    @property
    def template_failures(self) -> list[str]:
        """`fail`/`required` hits that Helm's lint mode only logged."""
        return [line for line in self.log if any(m in line for m in TEMPLATE_FAILURE_MARKERS)]

    def at_least(self, severity: str) -> list[LintMessage]:
        order = ["UNKNOWN", "INFO", "WARNING", "ERROR"]
        return [m for m in self.messages if order.index(m.severity) >= order.index(severity)]

    @property
    def ok(self) -> bool:
        """`helm lint --strict`: no warning and no error."""
        return (
            self.charts_linted == 1
            and self.error_count == 0
            and not self.at_least("WARNING")
            and not self.template_failures
        )


def lint(chart_dir: Path | str) -> LintResult:
    """Run Helm's lint action on a chart directory with the chart's own values.yaml."""
    ffi, lib = _load()
    handle = ffi.new("helm_sdkpy_handle *")
    rc = lib.helm_sdkpy_config_create(b"default", ffi.NULL, ffi.NULL, b"{}", handle)
    if rc != 0:
        raise HelmNativeError(f"helm_sdkpy_config_create: rc={rc}: {_last_error(ffi, lib)}")
    try:
        out = ffi.new("char **")
        with _captured_stderr() as log:
            rc = lib.helm_sdkpy_lint(handle[0], str(chart_dir).encode(), out)
        if rc != 0:
            raise HelmNativeError(f"helm_sdkpy_lint: rc={rc}: {_last_error(ffi, lib)}")
        if out[0] == ffi.NULL:
            raise HelmNativeError("helm_sdkpy_lint returned no result")
        try:
            raw = json.loads(ffi.string(out[0]).decode())
        finally:
            lib.helm_sdkpy_free(out[0])
    finally:
        lib.helm_sdkpy_config_destroy(handle[0])
    messages = [
        LintMessage(SEVERITY.get(m.get("Severity"), "UNKNOWN"), m.get("Path", ""))
        for m in raw.get("Messages") or []
    ]
    return LintResult(
        charts_linted=raw.get("TotalChartsLinted", 0),
        messages=messages,
        error_count=len(raw.get("Errors") or []),
        raw=raw,
        log=log,
    )


class _captured_stderr:
    """Captures file descriptor 2 (where the Go runtime's logger writes) into a list of lines."""

    def __enter__(self) -> list[str]:
        sys.stderr.flush()
        self._file = tempfile.TemporaryFile()
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        self.lines: list[str] = []
        return self.lines

    def __exit__(self, *exc: object) -> None:
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        text = self._file.read().decode(errors="replace")
        self._file.close()
        self.lines.extend(line for line in text.splitlines() if line.strip())


def install(
    kubeconfig: Path | str, namespace: str, release: str, chart_dir: Path | str, values: dict[str, Any]
) -> dict[str, Any]:
    """Helm's install action (client-side apply, no wait) against the cluster of `kubeconfig`."""
    ffi, lib = _load()
    handle = ffi.new("helm_sdkpy_handle *")
    rc = lib.helm_sdkpy_config_create(
        namespace.encode(), str(kubeconfig).encode(), ffi.NULL, b"{}", handle
    )
    if rc != 0:
        raise HelmNativeError(f"helm_sdkpy_config_create: rc={rc}: {_last_error(ffi, lib)}")
    options = {
        "create_namespace": False,
        "wait": False,
        "timeout_seconds": 60,
        "server_side_apply": "false",
        "disable_openapi_validation": True,
        "skip_schema_validation": False,
    }
    try:
        out = ffi.new("char **")
        with _captured_stderr() as log:
            rc = lib.helm_sdkpy_install(
                handle[0], release.encode(), str(chart_dir).encode(),
                json.dumps(values).encode(), b"", json.dumps(options).encode(), out,
            )
        if rc != 0:
            raise HelmNativeError(f"helm_sdkpy_install: rc={rc}: {_last_error(ffi, lib)}\n{log}")
        try:
            return json.loads(ffi.string(out[0]).decode()) if out[0] != ffi.NULL else {}
        finally:
            if out[0] != ffi.NULL:
                lib.helm_sdkpy_free(out[0])
    finally:
        lib.helm_sdkpy_config_destroy(handle[0])


def render(
    chart_dir: Path | str, values: dict[str, Any], namespace: str = "contentserver-system",
    release: str = "csop",
) -> list[dict[str, Any]]:
    """The manifests `helm install` sends to a cluster, in order: Helm's real install against the
    in-memory API of fake_kube.py, minus Helm's own release-record Secrets (the chart's crds/
    are left out: Helm installs them before rendering and they are checked against crds/
    directly). The CRDs of the kinds the chart may render are installed in the fake."""
    from lib.fake_kube import FakeKube  # imported here: `ensure` and `lint` run without it

    chart_dir = Path(chart_dir)
    with tempfile.TemporaryDirectory() as tmp:
        copy_dir = Path(tmp) / chart_dir.name
        shutil.copytree(chart_dir, copy_dir, ignore=shutil.ignore_patterns("crds"))
        crds = ["servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com"]
        with FakeKube(crds=crds) as api:
            install(api.kubeconfig(Path(tmp) / "kubeconfig"), namespace, release, copy_dir, values)
            return [o for o in api.created
                    if not (o.get("kind") == "Secret"
                            and (o["metadata"].get("labels") or {}).get("owner") == "helm")]


def _last_error(ffi: Any, lib: Any) -> str:
    ptr = lib.helm_sdkpy_last_error()
    return ffi.string(ptr).decode() if ptr != ffi.NULL else "unknown error"


def merge(base: Any, over: Any) -> Any:
    """Helm's values coalescing: maps merge recursively, anything else is replaced."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = copy.deepcopy(base)
        for k, v in over.items():
            out[k] = merge(out[k], v) if k in out else copy.deepcopy(v)
        return out
    return copy.deepcopy(over)


def lint_with_values(chart_dir: Path | str, *overrides: dict[str, Any]) -> LintResult:
    """Lint a copy of the chart whose values.yaml is the chart's merged with `overrides`.

    helm_sdkpy_lint takes no values argument, so this is how `helm lint -f FILE` is done.
    """
    chart_dir = Path(chart_dir)
    values = yaml.safe_load((chart_dir / "values.yaml").read_text()) or {}
    for o in overrides:
        values = merge(values, o)
    with tempfile.TemporaryDirectory() as tmp:
        copy_dir = Path(tmp) / chart_dir.name
        shutil.copytree(chart_dir, copy_dir)
        (copy_dir / "values.yaml").write_text(yaml.safe_dump(values, sort_keys=False))
        return lint(copy_dir)


def main(argv: list[str]) -> int:
    if argv[:1] == ["ensure"]:
        print(ensure())
        return 0
    if len(argv) >= 2 and argv[0] == "lint":
        overrides = [yaml.safe_load(Path(f).read_text()) or {} for f in argv[2:]]
        res = lint_with_values(argv[1], *overrides)
        for m in res.messages:
            print(f"[{m.severity}] {m.path}")
        for line in res.log:
            print(f"[LOG] {line}")
        print(f"{res.charts_linted} chart(s) linted, {res.error_count} error(s)")
        return 0 if res.ok else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
