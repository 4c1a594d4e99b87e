"""Real `helm lint` of charts/contentserver-operator (Helm's Go code via e2e/helm_native.py).

Lints with default values and with every optional part enabled, and proves the lint can fail:
a typo key, a wrong type, a broken template and a template `fail` are all reported.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest
import yaml

import helm_native

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "contentserver-operator"
ALL_ENABLED = CHART / "ci" / "all-enabled-values.yaml"


@pytest.fixture(scope="module", autouse=True)
def helm_library() -> None:
    # Downloads the pinned wheel on a fresh machine (scripts/deps.sh does it too).
    helm_native.ensure()
    assert helm_native.version().startswith("helm-sdkpy-")


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def describe(res: helm_native.LintResult) -> str:
    msgs = ", ".join(f"{m.severity}:{m.path}" for m in res.messages)
    return f"messages=[{msgs}] errors={res.error_count} log={res.log}"


def test_lint_default_values() -> None:
    res = helm_native.lint(CHART)
    assert res.charts_linted == 1
    assert res.ok, describe(res)


def test_lint_every_optional_part_enabled() -> None:
    values = load(ALL_ENABLED)
    # The file really switches every optional part on.
    assert values["serviceMonitor"]["enabled"] is True
    assert values["serviceMonitor"]["labels"].get("release")
    assert values["prometheusRule"]["enabled"] is True
    assert values["dashboards"]["enabled"] is True
    assert values["networkPolicy"]["enabled"] is True
    assert values["networkPolicy"]["egress"]["enabled"] is True
    assert values["networkPolicy"]["metricsFrom"]
    assert values["metrics"]["service"]["enabled"] is True
    assert values["watchNamespaces"], "namespaced RBAC (Role per namespace) must be linted too"
    res = helm_native.lint_with_values(CHART, values)
    assert res.ok, describe(res)


def test_lint_cluster_wide_with_optional_parts() -> None:
    values = load(ALL_ENABLED)
    values["watchNamespaces"] = []
    res = helm_native.lint_with_values(CHART, values)
    assert res.ok, describe(res)


@pytest.mark.parametrize(
    "broken",
    [
        {"serviceMonitr": {"enabled": True}},  # typo at the top level
        {"serviceMonitor": {"enabled": True, "lables": {"release": "x"}}},  # nested typo
        {"dashboards": {"label": {"grafana_dashboard": "1"}}},
        {"replicaCount": "two"},  # wrong type
        {"logFormat": "xml"},  # not in the enum
        {"watchNamespaces": ["Not_A_Namespace"]},
    ],
    ids=["top-level-typo", "nested-typo", "dashboards-typo", "wrong-type", "bad-enum", "bad-ns"],
)
def test_lint_rejects_values_the_schema_forbids(broken: dict) -> None:
    res = helm_native.lint_with_values(CHART, broken)
    assert not res.ok
    assert res.error_count >= 1, describe(res)
    assert any(m.severity == "ERROR" and m.path == "values.yaml" for m in res.messages), describe(res)


def test_lint_reports_template_fail() -> None:
    # A ServiceMonitor without the Service it selects is refused by the template itself.
    res = helm_native.lint_with_values(
        CHART, {"serviceMonitor": {"enabled": True}, "metrics": {"service": {"enabled": False}}}
    )
    assert not res.ok
    assert any("serviceMonitor.enabled needs metrics.service.enabled" in line for line in res.template_failures)


def test_lint_fails_on_a_broken_template(tmp_path: Path) -> None:
    copy = tmp_path / CHART.name
    shutil.copytree(CHART, copy)
    dep = copy / "templates" / "deployment.yaml"
    dep.write_text(dep.read_text().replace("{{ include \"cso.fullname\" . }}", "{{ include \"cso.fullname\" . ", 1))
    res = helm_native.lint(copy)
    assert not res.ok
    assert any(m.severity == "ERROR" and m.path.startswith("templates") for m in res.messages), describe(res)


def test_lint_fails_when_a_dashboard_copy_is_missing(tmp_path: Path) -> None:
    copy = tmp_path / CHART.name
    shutil.copytree(CHART, copy)
    shutil.rmtree(copy / "files" / "dashboards")
    res = helm_native.lint(copy)
    assert not res.ok
    assert any("run scripts/sync-chart.sh" in line for line in res.template_failures), describe(res)


def schema_paths(schema: dict, prefix: str = "") -> set[str]:
    """Dotted paths of every fixed-key object property of the values schema."""
    out: set[str] = set()
    for key, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}{key}"
        out.add(path)
        if sub.get("type") == "object" and sub.get("additionalProperties") is False:
            out |= schema_paths(sub, path + ".")
    return out


def value_paths(values: dict, schema: dict, prefix: str = "") -> set[str]:
    out: set[str] = set()
    for key, v in values.items():
        path = f"{prefix}{key}"
        out.add(path)
        sub = (schema.get("properties") or {}).get(key, {})
        if isinstance(v, dict) and sub.get("additionalProperties") is False:
            out |= value_paths(v, sub, path + ".")
    return out


def test_values_schema_is_strict_and_matches_values_yaml() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    defaults = load(CHART / "values.yaml")
    jsonschema.validate(defaults, schema)
    jsonschema.validate(load(ALL_ENABLED), schema)

    # Every fixed-key object forbids unknown keys, so a typo anywhere is an error.
    def walk(s: dict, where: str) -> None:
        if "properties" in s:
            assert s.get("additionalProperties") is False, f"{where} accepts unknown keys"
            for k, sub in s["properties"].items():
                walk(sub, f"{where}.{k}")

    walk(schema, "values")
    # values.yaml documents a default for every key the schema knows, and nothing else.
    assert schema_paths(schema) == value_paths(defaults, schema)


def test_readme_values_reference_lists_every_top_level_value() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "<!-- packaging:helm -->" not in readme, "README Helm section not written"
    section = readme.split("## Install with Helm", 1)[1].split("\n## ", 1)[0]
    for key in load(CHART / "values.yaml"):
        assert f"`{key}" in section, f"README values reference misses {key}"
    assert "kubectl apply --server-side -f crds/" in section
