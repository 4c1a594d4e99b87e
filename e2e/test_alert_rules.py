"""The alert rules in dashboards/alerts.yaml: promtool check rules, promtool unit tests, and
structure (severity, summary, description on every alert; a firing and a silent case for each).

Fails (never skips) when promtool is missing: scripts/deps.sh installs it.
"""

import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from lib import dashboards as D  # noqa: E402

REQUIRED_ALERTS = {
    "ContentServerPoolRejecting",
    "ContentServerPoolSaturated",
    "ContentServerEventLoopStalls",
    "ContentServerLogLinesDropped",
    "ContentServerHigh5xxRatio",
    "ContentServerTargetDown",
    # The caching node (cache volumes and their origins).
    "ContentServerOriginErrors",
    "ContentServerCacheHitRatioCollapsed",
    "ContentServerCacheFull",
    "ContentServerCacheServingStale",
    "ContentServerCacheNotStoring",
    # The operator.
    "ContentOperatorCannotWatch",
}


def promtool():
    exe = shutil.which("promtool")
    assert exe, "promtool is not installed (scripts/deps.sh installs the Debian prometheus package)"
    return exe


def alert_rules():
    doc = yaml.safe_load(D.ALERTS.read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def test_promtool_check_rules():
    r = subprocess.run([promtool(), "check", "rules", str(D.ALERTS)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout + r.stderr


def test_promtool_unit_tests():
    r = subprocess.run([promtool(), "test", "rules", str(D.ALERT_TESTS)],
                       capture_output=True, text=True, cwd=D.DASHBOARDS)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout + r.stderr


def test_promtool_unit_tests_catch_a_broken_rule(tmp_path):
    """The unit tests are not vacuous: with one threshold changed they fail."""
    text = D.ALERTS.read_text()
    broken = text.replace(") > 0.05", ") > 0.5")
    assert broken != text
    (tmp_path / "alerts.yaml").write_text(broken)
    shutil.copy(D.ALERT_TESTS, tmp_path / "alerts.test.yaml")
    r = subprocess.run([promtool(), "test", "rules", "alerts.test.yaml"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode != 0
    assert "ContentServerHigh5xxRatio" in r.stdout + r.stderr


@pytest.mark.parametrize("variant", ["never", "always"])
@pytest.mark.parametrize("name", sorted(REQUIRED_ALERTS))
def test_unit_tests_reject_an_alert_that_never_or_always_fires(tmp_path, name, variant):
    """For each alert, the unit tests fail when its expression is replaced by one that never
    fires (so a firing case is asserted) or one that always fires (so a silent case is)."""
    doc = yaml.safe_load(D.ALERTS.read_text())
    for g in doc["groups"]:
        for r in g["rules"]:
            if r.get("alert") == name:
                r["expr"] = "vector(1) == 0" if variant == "never" else "vector(1)"
    (tmp_path / "alerts.yaml").write_text(yaml.safe_dump(doc))
    shutil.copy(D.ALERT_TESTS, tmp_path / "alerts.test.yaml")
    r = subprocess.run([promtool(), "test", "rules", "alerts.test.yaml"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode != 0, f"{name} {variant}: unit tests still pass"
    assert f"alertname: {name}" in r.stdout + r.stderr


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_alert_has_severity_summary_description(rule):
    assert rule["labels"]["severity"] in {"warning", "critical"}
    assert rule["annotations"]["summary"].strip()
    assert rule["annotations"]["description"].strip()
    assert rule["expr"].strip()


def test_required_alerts_present():
    names = {r["alert"] for r in alert_rules()}
    assert REQUIRED_ALERTS <= names, REQUIRED_ALERTS - names


def test_each_alert_has_firing_and_silent_cases():
    doc = yaml.safe_load(D.ALERT_TESTS.read_text())
    fires, silent = set(), set()
    for t in doc["tests"]:
        for case in t.get("alert_rule_test", []):
            (fires if case.get("exp_alerts") else silent).add(case["alertname"])
            for a in case.get("exp_alerts") or []:
                # Firing cases check the rendered annotations, not only the labels.
                assert a.get("exp_annotations", {}).get("summary"), case["alertname"]
                assert a.get("exp_annotations", {}).get("description"), case["alertname"]
    names = {r["alert"] for r in alert_rules()}
    assert names <= fires, f"alerts never shown to fire: {names - fires}"
    assert names <= silent, f"alerts never shown to stay silent: {names - silent}"
