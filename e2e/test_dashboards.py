"""Lint of the Grafana dashboards in dashboards/ against the real metrics.

Checks every panel has a unit and a description, every query and variable uses the datasource
variable, every query is narrowed by the dashboard variables and uses $__rate_interval, every
query parses (promtool), and every metric a dashboard or alert names exists: server metrics in
the /metrics of a real content-server, operator metrics in the /metrics of a real
content-operator. Each rule is also shown to catch a broken copy of the dashboard.
"""

import copy
import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from lib import dashboards as D  # noqa: E402
from lib import dashlint as L  # noqa: E402
from lib import stack  # noqa: E402

EXPECTED_UIDS = {"contentserver.json": "contentserver-overview",
                 "operator.json": "contentoperator-overview"}
EXPECTED_VARS = {
    "contentserver.json": ["datasource", "namespace", "contentserver", "pod", "volume"],
    "operator.json": ["datasource", "namespace", "pod"],
}


@pytest.fixture(scope="module", params=D.DASHBOARD_FILES)
def dash(request):
    return request.param, D.load(request.param)


def first_query_panel(d):
    return next(p for p in D.content_panels(d) if p.get("targets"))


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
        D.label_values_query(D.variable_query(v))  # parses
    # Each variable only depends on variables defined before it (Grafana refreshes in order).
    for i, v in enumerate(D.variables(d)):
        used = D.variables_used(D.variable_query(v))
        assert used <= set(names[:i]), f"{v['name']} uses {used - set(names[:i])}"


def test_every_panel_has_unit_and_description(dash):
    name, d = dash
    assert len(D.content_panels(d)) >= 4
    assert L.panel_problems(d) == []


def test_panel_rule_catches_missing_unit_and_description():
    d = copy.deepcopy(D.load("contentserver.json"))
    p = first_query_panel(d)
    del p["fieldConfig"]["defaults"]["unit"]
    p["description"] = " "
    problems = L.panel_problems(d)
    assert f"{p['title']}: no unit" in problems
    assert f"{p['title']}: no description" in problems


def test_panels_fit_the_grid_without_overlap(dash):
    name, d = dash
    assert L.layout_problems(d) == []


def test_layout_rule_catches_overlap():
    d = copy.deepcopy(D.load("contentserver.json"))
    panels = D.content_panels(d)
    panels[1]["gridPos"] = dict(panels[0]["gridPos"])
    assert any("overlaps" in p for p in L.layout_problems(d))


def test_every_query_uses_the_datasource_variable(dash):
    name, d = dash
    assert L.datasource_problems(d) == []


def test_datasource_rule_catches_a_fixed_datasource():
    d = copy.deepcopy(D.load("operator.json"))
    p = first_query_panel(d)
    p["targets"][0]["datasource"] = {"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}
    assert len(L.datasource_problems(d)) == 1


def test_queries_use_variables_and_rate_interval(dash):
    name, d = dash
    assert L.query_problems(d) == []


def test_query_rule_catches_fixed_ranges_and_missing_variables():
    d = copy.deepcopy(D.load("contentserver.json"))
    t = first_query_panel(d)["targets"][0]
    t["expr"] = ('sum(rate(contentserver_pool_rejected_total{namespace=~"$namespace"}[5m]))'
                 " / contentserver_pool_threads")
    problems = "\n".join(L.query_problems(d))
    assert "range [5m]" in problems
    assert "not narrowed by $pod" in problems
    assert "not narrowed by $volume" in problems
    assert "contentserver_pool_threads named without a selector" in problems


def test_pool_row_repeats_per_volume():
    d = D.load("contentserver.json")
    pool_rows = [p for p in d["panels"] if p["type"] == "row" and p["title"].startswith("Pool")]
    assert len(pool_rows) == 1
    assert pool_rows[0].get("repeat") == "volume"
    vol = next(v for v in D.variables(d) if v["name"] == "volume")
    assert vol["multi"] and vol["includeAll"], "a repeated row needs a multi-value variable"
    pool_panels = D.row_panels(d, lambda r: r is pool_rows[0])
    titles = {p["title"] for p in pool_panels}
    for want in ["Pool utilisation", "Queue depth vs capacity", "Overflow rejects/s",
                 "p99 queue wait", "Task duration by operation"]:
        assert want in titles
    for p in D.repeated_panels(d, "volume"):
        for t in p["targets"]:
            assert 'volume=~"$volume"' in t["expr"]


CACHE_PANELS = {
    "Cache: $volume": ["Hit ratio by requests", "Hit ratio by bytes", "Bytes served/s by source",
                       "Stale served/s", "Fills in flight and collapsed waiters/s",
                       "Cache bytes vs max", "Evictions/s by reason"],
    "Origin": ["Origin egress bytes/s", "Origin p99 latency", "Origin requests/s by outcome",
               "Origin connections", "Origin servers down"],
}


def test_cache_rows():
    """One cache row repeated per volume and one origin row, after the rows that were there
    before; every panel's description says what healthy and unhealthy look like."""
    d = D.load("contentserver.json")
    rows = [p for p in d["panels"] if p["type"] == "row"]
    assert [r["title"] for r in rows[-2:]] == list(D.CACHE_ROWS)
    assert rows[-2].get("repeat") == "volume" and not rows[-1].get("repeat")
    for row in rows[-2:]:
        panels = D.row_panels(d, lambda r: r is row)
        assert [p["title"] for p in panels] == CACHE_PANELS[row["title"]]
        for p in panels:
            assert "Healthy:" in p["description"] and "Unhealthy:" in p["description"], p["title"]
            for t in p["targets"]:
                names = D.metric_names(t["expr"])
                assert names and all(n.startswith(("contentserver_cache_", "contentserver_origin_"))
                                     for n in names), t["expr"]
    assert {p["title"] for p in D.cache_panels(d)} == {t for ts in CACHE_PANELS.values() for t in ts}


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
            rules.append({"record": f"lint:{f.split('.')[0]}:{i}", "expr": D.substitute(e, vals)})
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "lint", "rules": rules}]}))
    r = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{len(rules)} rules found" in r.stdout


@pytest.fixture(scope="module")
def server_metrics(tmp_path_factory):
    """The /metrics text of a real content-server with two volumes, two workers, and a cache
    volume in front of an origin (its cache and origin series exist from start-up; the origin
    is never asked)."""
    stack.build_bins()
    tmp = tmp_path_factory.mktemp("lint-server")
    for v in ("disk1", "disk2", "cache1"):
        (tmp / v).mkdir()
    cache = (
        f'\n[[origins]]\nname = "origin"\nservers = ["http://127.0.0.1:{stack.free_port()}"]\n'
        f'\n[[volumes]]\nname = "cache1"\npath = "{tmp / "cache1"}"\n'
        '[volumes.cache]\nmax_size = "1M"\n'
        '\n[[routes]]\nprefix = "/cache1/"\nvolume = "cache1"\norigin = "origin"\n')
    srv = stack.ContentServer(tmp, [("disk1", tmp / "disk1", "always", 2, 4),
                                    ("disk2", tmp / "disk2", "auto", 2, 4)], extra_toml=cache)
    try:
        # One request, so the series created on first use (per status code) exist too.
        stack.http_get(srv.url("/disk1/missing"))
        yield srv.metrics_text()
    finally:
        srv.stop()


def test_server_metrics_exist(server_metrics):
    assert "contentserver_build_info" in D.exposition_sample_names(server_metrics)
    d = D.load("contentserver.json")
    assert len(L.dashboard_metrics(d)) >= 15
    assert L.missing_metrics(d, server_metrics) == []


def test_metric_rule_catches_a_renamed_metric(server_metrics):
    d = copy.deepcopy(D.load("contentserver.json"))
    t = first_query_panel(d)["targets"][0]
    t["expr"] = t["expr"].replace("contentserver_pool_busy_threads", "contentserver_pool_busy")
    assert L.missing_metrics(d, server_metrics) == ["contentserver_pool_busy"]


def test_alert_metrics_exist(server_metrics, operator_metrics):
    exposed = (D.exposition_sample_names(server_metrics)
               | D.exposition_sample_names(operator_metrics) | {"up"})
    doc = yaml.safe_load(D.ALERTS.read_text())
    names = set()
    for g in doc["groups"]:
        for r in g["rules"]:
            names |= D.metric_names(r["expr"]) | set(D.bare_identifiers(r["expr"]))
    assert len(names) >= 8
    assert not (names - exposed), \
        f"alerts name metrics neither the server nor the operator exports: {names - exposed}"


@pytest.fixture(scope="module")
def operator_metrics(tmp_path_factory):
    """The /metrics text of the real content-operator. Its metrics listener starts before it
    reaches the Kubernetes API, so it runs against a kubeconfig naming an API that answers
    nothing (a closed port): the registry's series are all there, at zero."""
    stack.build_bins()
    tmp = tmp_path_factory.mktemp("lint-operator")
    dead = stack.free_port()
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "dead",
        "clusters": [{"name": "dead", "cluster": {"server": f"http://127.0.0.1:{dead}"}}],
        "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "dead"}}],
        "users": [{"name": "dead", "user": {"token": "x"}}],
    }))
    op = stack.Operator(tmp, kubeconfig)
    try:
        yield op.metrics_text()
    finally:
        op.stop()


def test_operator_metrics_exist(operator_metrics):
    d = D.load("operator.json")
    assert len(L.dashboard_metrics(d)) >= 4
    assert L.missing_metrics(d, operator_metrics) == []
