"""Lint of the Grafana dashboards in dashboards/ against the real metrics.

Checks every panel has a unit and a description, every query and variable uses the datasource
variable, every content-server query is narrowed by the dashboard variables and uses
$__rate_interval, every query parses (promtool), and every metric a query names exists: server
metrics in the real content-server's /metrics, operator metrics in the real content-operator's
/metrics.
"""

import pathlib
import re
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from lib import dashboards as D  # noqa: E402
from lib import stack  # noqa: E402

EXPECTED_UIDS = {"contentserver.json": "contentserver-overview",
                 "operator.json": "contentoperator-overview"}
EXPECTED_VARS = {
    "contentserver.json": ["datasource", "namespace", "contentserver", "pod", "volume"],
    "operator.json": ["datasource", "namespace", "pod"],
}
SERVER_SELECTOR_LABELS = ["namespace", "contentserver", "pod"]
# Series that exist once per volume: their selectors must also narrow by $volume.
PER_VOLUME_PREFIXES = ("contentserver_pool_", "contentserver_page_cache_")


@pytest.fixture(scope="module", params=D.DASHBOARD_FILES)
def dash(request):
    return request.param, D.load(request.param)


def test_generated_json_is_up_to_date():
    r = subprocess.run([sys.executable, str(D.DASHBOARDS / "build.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_identity_and_variables(dash):
    name, d = dash
    assert d["uid"] == EXPECTED_UIDS[name]
    assert d["title"]
    names = [v["name"] for v in D.variables(d)]
    assert names == EXPECTED_VARS[name]
    ds = D.variables(d)[0]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    for v in D.variables(d)[1:]:
        assert v["type"] == "query"
        assert v["datasource"]["uid"] == "${datasource}", v["name"]
        D.label_values_query(D.variable_query(v))  # parses
    # Each variable only depends on variables defined before it (Grafana refreshes in order).
    for i, v in enumerate(D.variables(d)):
        used = D.variables_used(D.variable_query(v))
        assert used <= set(names[:i]), f"{v['name']} uses {used - set(names[:i])}"


def test_every_panel_has_unit_and_description(dash):
    name, d = dash
    panels = D.content_panels(d)
    assert len(panels) >= 4
    for p in panels:
        title = p.get("title")
        assert title, f"{name}: panel {p.get('id')} has no title"
        assert p.get("description", "").strip(), f"{name}: {title!r} has no description"
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        assert unit.strip(), f"{name}: {title!r} has no unit"
        assert p.get("targets"), f"{name}: {title!r} has no query"
    ids = [p["id"] for p in D.all_panels(d)]
    assert len(ids) == len(set(ids)), f"{name}: duplicate panel ids"


def test_every_query_uses_the_datasource_variable(dash):
    name, d = dash
    for p in D.content_panels(d):
        assert p.get("datasource", {}).get("uid") == "${datasource}", p["title"]
        for t in p["targets"]:
            assert t.get("datasource", {}).get("uid") == "${datasource}", (p["title"], t)
            assert t.get("expr", "").strip(), (p["title"], t)


def test_queries_use_variables_and_rate_interval(dash):
    name, d = dash
    for p, t in D.queries(d):
        expr = t["expr"]
        for dur in D.range_durations(expr):
            assert dur == "$__rate_interval", f"{p['title']}: range [{dur}] in {expr}"
        assert not D.bare_identifiers(expr), (
            f"{p['title']}: metric named without a selector: {D.bare_identifiers(expr)}")
        for metric in D.metric_names(expr):
            sel = re.findall(re.escape(metric) + r"\{([^}]*)\}", D.strip_strings_keep_vars(expr))
            labels = ["namespace", "pod"]
            if metric.startswith("contentserver_"):
                labels = SERVER_SELECTOR_LABELS + (
                    ["volume"] if metric.startswith(PER_VOLUME_PREFIXES) else [])
            for s in sel:
                for lbl in labels:
                    assert f'{lbl}=~"${lbl}"' in s, f"{p['title']}: {metric}{{{s}}} lacks ${lbl}"


def test_pool_row_repeats_per_volume():
    d = D.load("contentserver.json")
    rows = [p for p in d["panels"] if p["type"] == "row"]
    pool_rows = [r for r in rows if r.get("repeat") == "volume"]
    assert len(pool_rows) == 1
    vol = next(v for v in D.variables(d) if v["name"] == "volume")
    assert vol["multi"] and vol["includeAll"], "a repeated row needs a multi-value variable"
    pool_panels = D.repeated_panels(d, "volume")
    titles = {p["title"] for p in pool_panels}
    for want in ["Pool utilisation", "Queue depth vs capacity", "Overflow rejects/s",
                 "p99 queue wait", "Task duration by operation"]:
        assert want in titles
    for p in pool_panels:
        for t in p["targets"]:
            assert 'volume=~"$volume"' in t["expr"]


def test_every_query_parses(tmp_path):
    """promtool parses each query (variables substituted) as a recording rule."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed (scripts/deps.sh installs it)"
    rules = []
    for f in D.DASHBOARD_FILES:
        d = D.load(f)
        exprs = [t["expr"] for _, t in D.queries(d)]
        exprs += [D.label_values_query(D.variable_query(v))[0] for v in D.variables(d)[1:]]
        for i, e in enumerate(exprs):
            vals = {n: "x" for n in ["namespace", "contentserver", "pod", "volume"]}
            rules.append((f"lint:{f.split('.')[0]}:{i}", D.substitute(e, vals)))
    body = "groups:\n  - name: lint\n    rules:\n" + "".join(
        f"      - record: {r}\n        expr: '{e.replace(chr(39), chr(39) * 2)}'\n"
        for r, e in rules)
    path = tmp_path / "queries.yaml"
    path.write_text(body)
    r = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{len(rules)} rules found" in r.stdout


@pytest.fixture(scope="module")
def server_metrics(tmp_path_factory):
    """The /metrics text of a real content-server with two volumes and two workers."""
    stack.build_bins()
    tmp = tmp_path_factory.mktemp("lint-server")
    for v in ("disk1", "disk2"):
        (tmp / v).mkdir()
    srv = stack.ContentServer(tmp, [("disk1", tmp / "disk1", "always", 2, 4),
                                    ("disk2", tmp / "disk2", "auto", 2, 4)])
    try:
        # One request so lazily created series (by status code) exist too.
        stack.http_get(srv.url("/disk1/missing"))
        yield srv.metrics_text()
    finally:
        srv.stop()


def test_server_metrics_exist(server_metrics):
    exposed = D.exposition_sample_names(server_metrics)
    assert "contentserver_build_info" in exposed
    missing = []
    d = D.load("contentserver.json")
    names = set()
    for _, t in D.queries(d):
        names |= D.metric_names(t["expr"])
    for v in D.variables(d)[1:]:
        names |= D.metric_names(D.label_values_query(D.variable_query(v))[0])
    assert names, "no metric names found in contentserver.json"
    for n in sorted(names):
        if n not in exposed:
            missing.append(n)
    assert not missing, f"dashboard names metrics the server does not export: {missing}"


def test_alert_metrics_exist(server_metrics):
    exposed = D.exposition_sample_names(server_metrics) | {"up"}
    text = D.ALERTS.read_text()
    exprs = re.findall(r"expr: \|?\n?((?:.*\n)*?)\s+for:", text)
    assert len(exprs) >= 5
    names = set()
    for e in exprs:
        names |= {m for m in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*[\[{]", e)}
    names |= {m for m in re.findall(r"\b(contentserver_[a-z_]+)\b", text)}
    assert names - {"up"}
    assert not (names - exposed), f"alerts name metrics the server does not export: {names - exposed}"


@pytest.fixture(scope="module")
def operator_metrics(tmp_path_factory):
    """The /metrics text of the real content-operator. Its metrics listener starts before it
    reaches the Kubernetes API, so it runs against a kubeconfig naming an API that answers
    nothing (a closed port): the registry's series are all there, at zero."""
    stack.build_bins()
    tmp = tmp_path_factory.mktemp("lint-operator")
    dead = stack.free_port()
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text(
        '{"apiVersion": "v1", "kind": "Config", "current-context": "dead",'
        f' "clusters": [{{"name": "dead", "cluster": {{"server": "http://127.0.0.1:{dead}"}}}}],'
        ' "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "dead"}}],'
        ' "users": [{"name": "dead", "user": {"token": "x"}}]}')
    op = stack.Operator(tmp, kubeconfig)
    try:
        yield op.metrics_text()
    finally:
        op.stop()


def test_operator_metrics_exist(operator_metrics):
    exposed = D.exposition_sample_names(operator_metrics)
    d = D.load("operator.json")
    names = set()
    for _, t in D.queries(d):
        names |= D.metric_names(t["expr"])
    for v in D.variables(d)[1:]:
        names |= D.metric_names(D.label_values_query(D.variable_query(v))[0])
    assert names
    assert not (names - exposed), (
        f"operator dashboard names metrics the operator does not export: "
        f"{sorted(names - exposed)}")
