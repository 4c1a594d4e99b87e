"""Every dashboard query returns data from a real content-server scraped by a real Prometheus.

Starts content-server (built with the `failpoints` feature) with two volumes: `slow`, whose pool
tasks the `pool_task` failpoint stalls so its small pool overflows and answers 503, and `fast`
(offload = auto, page-cache hits inline). Starts the Debian `prometheus` scraping its admin
listener every second with the target labels a Kubernetes scrape adds (namespace, pod,
contentserver) and the alert rules loaded. Runs bounded load from Python threads (normal hits and
overflowing bursts), then resolves the dashboard variables through the Prometheus API the way
Grafana does, substitutes them into every panel query of contentserver.json, and fails if any
query returns no data (no series, or only NaN, over the load window). The rows of the caching
node (cache volumes, origins) are left to e2e/test_cache_e2e.py, which runs a cache node.

operator.json is evaluated the same way against the real content-operator binary, run against a
minimal in-memory Kubernetes API (e2e/lib/fake_kube.py) that lists two ContentServers (the
repository's examples/media-node.yaml and examples/minimal.yaml), re-sends them as MODIFIED every
second and fails every write in the second one's namespace: the operator's real reconciles (ok
and error) drive its metrics. The ServiceMonitor the operator applies is checked to produce the
`contentserver` target label the dashboards select on.
"""

import http.client
import math
import pathlib
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from lib import dashboards as D  # noqa: E402
from lib import fake_kube  # noqa: E402
from lib import stack  # noqa: E402

TARGET_LABELS = {"namespace": "e2e", "contentserver": "films", "pod": "films-0"}
OPERATOR_LABELS = {"namespace": "content-system", "pod": "content-operator-0"}
STALL_MS = 300
LOAD_SECONDS = 8
# Grafana's $__rate_interval for a 1 s scrape interval: max($__interval + 1s, 4 * 1s).
RATE_INTERVAL = "4s"


def fetch(url, counts, lock):
    try:
        with urllib.request.urlopen(url, timeout=15) as r:
            r.read()
            code = r.status
    except urllib.error.HTTPError as e:
        code = e.code
    except http.client.HTTPException:
        # Headers sent, then a later pool task of the same response overflowed: the server
        # closes the connection mid-body (as nginx does).
        code = "truncated"
    except OSError:
        code = "error"
    with lock:
        counts[code] = counts.get(code, 0) + 1


def run_load(srv):
    """Bounded load: 3 threads of hot requests to `fast`, and bursts of 10 concurrent requests
    to `slow` every 0.5 s (its pool holds 2 running + 2 queued; the rest are rejected)."""
    counts, lock = {}, threading.Lock()
    stop = time.monotonic() + LOAD_SECONDS

    def hot(i):
        n = 0
        while time.monotonic() < stop:
            fetch(srv.url(f"/fast/f{(i + n) % 8}.bin"), counts, lock)
            n += 1
            time.sleep(0.002)

    def bursts():
        while time.monotonic() < stop:
            ts = [threading.Thread(target=fetch, args=(srv.url("/slow/big.bin"), counts, lock))
                  for _ in range(10)]
            for t in ts:
                t.start()
            time.sleep(0.5)
            for t in ts:
                t.join(timeout=20)
        fetch(srv.url("/fast/missing"), counts, lock)  # a 404 too

    threads = [threading.Thread(target=hot, args=(i,)) for i in range(3)]
    threads.append(threading.Thread(target=bursts))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=LOAD_SECONDS + 30)
    return counts


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    stack.build_bins()
    tmp = tmp_path_factory.mktemp("prom-e2e")
    slow, fast = tmp / "slow", tmp / "fast"
    slow.mkdir()
    fast.mkdir()
    (slow / "big.bin").write_bytes(b"s" * 256 * 1024)
    for i in range(8):
        (fast / f"f{i}.bin").write_bytes(bytes([65 + i]) * 16 * 1024)
    srv = stack.ContentServer(
        tmp, [("slow", slow, "always", 2, 2), ("fast", fast, "auto", 4, 64)],
        env_extra={"FAILPOINTS": f"pool_task=return(slow:{STALL_MS})"})
    prom = kube = op = None
    try:
        examples = D.ROOT / "examples"
        good = yaml.safe_load((examples / "media-node.yaml").read_text())
        good["metadata"]["namespace"] = "media"
        bad = yaml.safe_load((examples / "minimal.yaml").read_text())
        bad["metadata"].update(namespace="broken", name="bad")
        kube = fake_kube.FakeKube([good, bad], failing_namespaces=["broken"],
                                  crds=["servicemonitors.monitoring.coreos.com"])
        op = stack.Operator(tmp, kube.kubeconfig(tmp / "kubeconfig"))
        prom = stack.Prometheus(
            tmp, [("content-server", f"127.0.0.1:{srv.admin_port}", TARGET_LABELS),
                  ("content-operator", f"127.0.0.1:{op.port}", OPERATOR_LABELS)],
            rule_files=[D.ALERTS])
        stack.wait_until(
            "first scrape of content-server and content-operator",
            lambda: len(prom.api("query", query="up == 1")["result"]) == 2,
            timeout=20, proc=prom.proc.p, log=prom.proc.log)
        start = time.time()
        counts = run_load(srv)
        time.sleep(3)  # the last scrapes and rule evaluations
        end = time.time()
        yield {"srv": srv, "prom": prom, "start": start, "end": end, "counts": counts,
               "kube": kube, "good": good}
    finally:
        for p in (prom, op, kube):
            if p is not None:
                p.stop()
        srv.stop()


def test_load_overflowed_the_slow_pool(env):
    c = env["counts"]
    print("client-side status counts:", c)
    assert c.get(200, 0) > 50, c
    assert c.get(503, 0) > 0, f"no pool overflow (503) during the load: {c}"
    assert c.get("error", 0) < sum(c.values()) / 10, c


def grafana_multi(vals):
    return vals[0] if len(vals) == 1 else "(" + "|".join(vals) + ")"


def evaluate(prom, expr, env):
    return prom.query_range(expr, env["start"], env["end"])


def test_variables_resolve_to_the_target_labels(env):
    dash = D.load("contentserver.json")
    values = env["prom"].resolve_variables(dash, env["start"], env["end"])
    assert values["namespace"] == ["e2e"]
    assert values["contentserver"] == ["films"]
    assert values["pod"] == ["films-0"]
    assert sorted(values["volume"]) == ["fast", "slow"]


def test_operator_variables_resolve_to_the_target_labels(env):
    dash = D.load("operator.json")
    values = env["prom"].resolve_variables(dash, env["start"], env["end"])
    assert values == {"namespace": ["content-system"], "pod": ["content-operator-0"]}


@pytest.mark.parametrize("name,min_queries", [("contentserver.json", 25), ("operator.json", 5)])
def test_every_panel_query_returns_data(env, name, min_queries):
    prom = env["prom"]
    dash = D.load(name)
    values = prom.resolve_variables(dash, env["start"], env["end"])
    # Every variable at its default, "All" (Grafana sends a multi-value as a regex `(a|b)`);
    # panels of the repeated pool row get one volume each, as Grafana repeats them.
    base = {k: grafana_multi(v) for k, v in values.items()}
    repeated = {p["id"] for p in D.repeated_panels(dash, "volume")}
    assert repeated or name == "operator.json", "no panels repeated per volume"
    # The caching node's rows have data only with cache volumes: test_cache_e2e.py evaluates
    # them against a cache node.
    cache = {p["id"] for p in D.cache_panels(dash)}
    assert cache or name == "operator.json", "no cache panels"
    empty, checked = [], 0
    for panel, target in D.queries(dash):
        if panel["id"] in cache:
            continue
        for vol in (values["volume"] if panel["id"] in repeated else [None]):
            vals = dict(base, **({"volume": vol} if vol else {}))
            expr = D.substitute(target["expr"], vals, rate_interval=RATE_INTERVAL)
            assert "$" not in expr.replace("${1}", ""), f"unsubstituted variable in {expr}"
            checked += 1
            if not D.has_data(evaluate(prom, expr, env)):
                empty.append(f"{panel['title']} [{target['refId']}] volume={vol}: {expr}")
    assert checked >= min_queries
    assert not empty, "panel queries with no data:\n" + "\n".join(empty)


def max_value(result):
    vals = [float(v) for s in result for _, v in s["values"] if not math.isnan(float(v))]
    return max(vals) if vals else None


def test_panels_show_the_overflow_on_the_slow_volume_only(env):
    prom = env["prom"]
    dash = D.load("contentserver.json")
    vals = dict(TARGET_LABELS)

    def peak(title, vol, ref="A"):
        expr = D.substitute(D.panel_expr(dash, title, ref), dict(vals, volume=vol),
                            rate_interval=RATE_INTERVAL)
        return max_value(evaluate(prom, expr, env))

    assert peak("Overflow rejects/s", "slow") > 0
    assert peak("Overflow rejects/s", "fast") == 0
    # Tasks queued behind 300 ms stalls wait at least one stall.
    assert peak("p99 queue wait", "slow") >= STALL_MS / 1000 / 2
    assert peak("5xx ratio", "slow") > 0
    assert peak("Pool utilisation", "slow", ref="B") > 0.5


def test_operator_panels_show_reconciles_and_errors(env):
    prom = env["prom"]
    dash = D.load("operator.json")

    def series_peaks(title, ref="A"):
        expr = D.substitute(D.panel_expr(dash, title, ref), dict(OPERATOR_LABELS),
                            rate_interval=RATE_INTERVAL)
        return {s["metric"].get("result", ""): max_value([s]) for s in evaluate(prom, expr, env)}

    by_result = series_peaks("Reconciles/s by result")
    assert by_result.get("ok", 0) > 0 and by_result.get("error", 0) > 0, by_result
    assert max(series_peaks("Reconcile and watch errors/s").values()) > 0
    # The fake API server answers every list and watch: the watch series is there, at 0.
    assert list(series_peaks("Reconcile and watch errors/s", "B").values()) == [0], \
        series_peaks("Reconcile and watch errors/s", "B")
    assert max(series_peaks("Managed ContentServers").values()) == 2


def test_operator_servicemonitor_adds_the_contentserver_label(env):
    """The dashboards' `contentserver` label: the operator's ServiceMonitor relabels the pod label
    app.kubernetes.io/instance, and the pods it creates carry the ContentServer's name there."""
    name = env["good"]["metadata"]["name"]
    applied = env["kube"].applied
    sm = applied.get(("media", "servicemonitors", name))
    assert sm, f"no ServiceMonitor applied; applied: {sorted(applied)}"
    rules = [r for ep in sm["spec"]["endpoints"] for r in ep.get("relabelings", [])]
    assert {"sourceLabels": ["__meta_kubernetes_pod_label_app_kubernetes_io_instance"],
            "targetLabel": "contentserver"} in [
        {k: r[k] for k in ("sourceLabels", "targetLabel") if k in r} for r in rules
        if r.get("action", "replace") == "replace"], rules
    workloads = [o for (ns, kind, n), o in applied.items()
                 if ns == "media" and kind in ("statefulsets", "deployments") and n == name]
    assert workloads, sorted(applied)
    for w in workloads:
        pod_labels = w["spec"]["template"]["metadata"]["labels"]
        assert pod_labels.get("app.kubernetes.io/instance") == name


def test_alert_rules_evaluate_against_real_metrics(env):
    prom = env["prom"]
    groups = prom.api("rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) >= 5
    for r in rules:
        assert r["health"] == "ok", f"{r['name']}: {r.get('lastError')}"
    alerts = prom.api("alerts")["alerts"]
    rejecting = [a for a in alerts if a["labels"].get("alertname") == "ContentServerPoolRejecting"]
    assert rejecting, f"ContentServerPoolRejecting not pending after overflow; alerts: {alerts}"
    assert {a["labels"]["volume"] for a in rejecting} == {"slow"}
    assert all(a["labels"]["pod"] == "films-0" for a in rejecting)
