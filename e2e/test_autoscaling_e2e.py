"""The autoscaling metric, end to end: what the HPA would see from a real content-server under load.

Two real content-servers (failpoints build), pods `films-0` and `films-1` of one ContentServer,
each with a `slow` volume (offload always, 2 threads, max_queue 2, every pool task stalled by the
`pool_task` failpoint) and a `fast` one (offload auto). A real Prometheus scrapes both every second
with the labels a Kubernetes scrape adds (namespace, pod, contentserver). For a little over the
adapter's 2-minute window, 4 clients keep requesting from films-0's slow volume (its 2 threads
always busy, its queue full); films-1 stays idle.

Then, through the Prometheus HTTP API, at one evaluation time:
- the prometheus-adapter rule's metricsQuery, with <<.LabelMatchers>> and <<.GroupBy>> replaced as
  prometheus-adapter does for a Pods metric request (namespace="e2e",pod=~"films-0|films-1" and
  `pod`), returns exactly one value per pod: films-0 in (0, 1] and above the HPA target of
  examples/hpa.yaml (targetPoolUtilization 70 -> 0.7), films-1 below it;
- the `ContentServerPoolSaturated` alert expression of dashboards/alerts.yaml holds for films-0's
  slow volume (at that time and over the window) and for nothing else;
- the dashboard's "Pool utilisation" panel (busy averaged) with the HPA's window gives, for the
  busiest volume of each pod, the adapter's value; its "busy now" query says the same;
- the KEDA ScaledObject's query (examples/keda.yaml) for this ContentServer is the sum of the
  per-pod values, so KEDA's HPA would compute the same replica count.
"""

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
from lib import stack  # noqa: E402

NS, CS = "e2e", "films"
PODS = ["films-0", "films-1"]
STALL_MS = 100
CLIENTS = 4
WINDOW_S = 120  # the [2m] of the adapter rule
ADAPTER = D.ROOT / "dashboards" / "prometheus-adapter.yaml"
KEDA = D.ROOT / "examples" / "keda.yaml"


def hpa_target():
    """The HPA's target for the metric: examples/hpa.yaml's targetPoolUtilization / 100 (the
    operator renders it as the Pods metric's averageValue, e.g. 70 -> 700m:
    test_upstream_schemas.py checks that)."""
    (cs,) = [d for d in yaml.safe_load_all((D.ROOT / "examples" / "hpa.yaml").read_text())
             if d and d["kind"] == "ContentServer"]
    return cs["spec"]["autoscaling"]["targetPoolUtilization"] / 100


TARGET = hpa_target()


def adapter_rule():
    (rule,) = yaml.safe_load(ADAPTER.read_text())["rules"]
    return rule


def adapter_query(namespace, pods):
    """metricsQuery as prometheus-adapter builds it for a Pods metric of `pods` in `namespace`
    (pkg/naming/metrics_query.go: namespace equality, the pod label `=` for one name and `=~`
    joined with `|` for several, group by the pod label)."""
    pod = f'pod="{pods[0]}"' if len(pods) == 1 else f'pod=~"{"|".join(pods)}"'
    return (adapter_rule()["metricsQuery"]
            .replace("<<.LabelMatchers>>", f'namespace="{namespace}",{pod}')
            .replace("<<.GroupBy>>", "pod"))


def saturated_alert_expr():
    doc = yaml.safe_load(D.ALERTS.read_text())
    (rule,) = [r for g in doc["groups"] for r in g["rules"]
               if r.get("alert") == "ContentServerPoolSaturated"]
    return rule["expr"]


def load_until(url, stop):
    """One client: request `url` back to back until `stop` (a bounded loop)."""
    codes = {}
    while time.monotonic() < stop:
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                r.read()
                codes[r.status] = codes.get(r.status, 0) + 1
        except urllib.error.HTTPError as e:
            codes[e.code] = codes.get(e.code, 0) + 1
        except OSError:
            codes["error"] = codes.get("error", 0) + 1
    return codes


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    stack.build_bins()
    servers, prom = [], None
    try:
        targets = []
        for pod in PODS:
            tmp = tmp_path_factory.mktemp(pod)
            (tmp / "slow").mkdir()
            (tmp / "fast").mkdir()
            (tmp / "slow" / "big.bin").write_bytes(b"s" * 64 * 1024)
            (tmp / "fast" / "f.bin").write_bytes(b"f" * 4096)
            srv = stack.ContentServer(
                tmp, [("slow", tmp / "slow", "always", 2, 2), ("fast", tmp / "fast", "auto", 4, 64)],
                env_extra={"FAILPOINTS": f"pool_task=return(slow:{STALL_MS})"})
            servers.append(srv)
            targets.append((pod, f"127.0.0.1:{srv.admin_port}",
                            {"namespace": NS, "contentserver": CS, "pod": pod}))
        # films-0 scraped by a second job too (a PodMonitor someone added beside the
        # ServiceMonitor): the queries must still give one value per pod.
        targets.append(("films-0-again", f"127.0.0.1:{servers[0].admin_port}",
                        {"namespace": NS, "contentserver": CS, "pod": "films-0"}))
        prom = stack.Prometheus(tmp_path_factory.mktemp("prom"), targets)
        stack.wait_until("first scrape of both pods",
                         lambda: len(prom.api("query", query="up == 1")["result"]) == len(PODS) + 1,
                         timeout=30, proc=prom.proc.p, log=prom.proc.log)
        loaded = servers[0]
        start = time.monotonic()
        wall_start = time.time()
        stop = start + WINDOW_S + 8
        results = [None] * CLIENTS

        def client(i):
            results[i] = load_until(loaded.url("/slow/big.bin"), stop)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        # A few requests to films-0's fast volume too (page-cache hits, inline: ~no pool time).
        while time.monotonic() < stop:
            stack.http_get(loaded.url("/fast/f.bin"))
            time.sleep(0.5)
        for t in threads:
            t.join(timeout=60)
        # Evaluate where the whole 2-minute window lies inside the load, and after the scrape of
        # that instant has landed.
        at = time.time() - 3
        assert at - WINDOW_S > wall_start + 2, "the load did not cover the adapter's window"
        time.sleep(2)
        counts = {}
        for r in results:
            for k, v in (r or {}).items():
                counts[k] = counts.get(k, 0) + v
        yield {"prom": prom, "at": at, "counts": counts}
    finally:
        if prom is not None:
            prom.stop()
        for s in servers:
            s.stop()


def instant(env, expr):
    return env["prom"].api("query", query=expr, time=env["at"])["result"]


def adapter_values(env, pods=PODS):
    out = {}
    for series in instant(env, adapter_query(NS, pods)):
        assert set(series["metric"]) == {"pod"}, series["metric"]
        assert series["metric"]["pod"] not in out, "two values for one pod"
        out[series["metric"]["pod"]] = float(series["value"][1])
    return out


def test_the_load_kept_the_slow_pool_busy(env):
    print("client status counts:", env["counts"])
    assert env["counts"].get(200, 0) > 100, env["counts"]


def test_adapter_query_returns_one_value_per_pod(env):
    values = adapter_values(env)
    print("adapter contentserver_pool_utilization:", values)
    assert sorted(values) == PODS
    loaded, idle = values["films-0"], values["films-1"]
    assert 0 < loaded <= 1, loaded
    assert loaded > TARGET, f"a saturated pool must be above the HPA target: {loaded}"
    assert idle < TARGET, idle
    # A request for one pod (the adapter's `pod="..."` form) gives that pod's value.
    assert adapter_values(env, ["films-0"]) == {"films-0": loaded}


def test_saturated_alert_agrees_with_the_adapter(env):
    values = adapter_values(env)
    expr = saturated_alert_expr()
    firing = {(s["metric"]["pod"], s["metric"]["volume"]) for s in instant(env, expr)}
    print("ContentServerPoolSaturated expression holds for:", firing)
    assert firing == {("films-0", "slow")}
    assert {p for p, _ in firing} == {p for p, v in values.items() if v > TARGET}
    # And not only at that instant: over the adapter's window it held nearly throughout.
    prom = env["prom"]
    res = prom.api("query_range", query=expr, start=env["at"] - WINDOW_S + 5, end=env["at"],
                   step="1")["result"]
    steps = {(s["metric"]["pod"], s["metric"]["volume"]): len(s["values"]) for s in res}
    assert set(steps) == {("films-0", "slow")}, steps
    assert steps[("films-0", "slow")] >= 0.9 * (WINDOW_S - 5), steps


def panel_expr(title, ref):
    dash = D.load("contentserver.json")
    for p, t in D.queries(dash):
        if p["title"] == title and t["refId"] == ref:
            return t["expr"]
    raise AssertionError(f"no panel {title!r} {ref}")


def test_dashboard_panel_agrees_with_the_adapter(env):
    values = adapter_values(env)
    variables = {"namespace": NS, "contentserver": CS, "pod": "|".join(PODS),
                 "volume": "slow|fast"}
    averaged = D.substitute(panel_expr("Pool utilisation", "B"), variables,
                            rate_interval=f"{WINDOW_S // 60}m")
    per_volume = {(s["metric"]["pod"], s["metric"]["volume"]): float(s["value"][1])
                  for s in instant(env, averaged)}
    print("Pool utilisation (busy averaged, [2m]):", per_volume)
    for pod in PODS:
        busiest = max(v for (p, _), v in per_volume.items() if p == pod)
        assert math.isclose(busiest, values[pod], rel_tol=1e-9, abs_tol=1e-12), (pod, busiest, values)
    now = D.substitute(panel_expr("Pool utilisation", "A"), variables)
    busy_now = {(s["metric"]["pod"], s["metric"]["volume"]): float(s["value"][1])
                for s in instant(env, now)}
    print("Pool utilisation (busy now):", busy_now)
    saturated_now = {k for k, v in busy_now.items() if v >= 1}
    assert saturated_now == {("films-0", "slow")}, busy_now


def test_keda_query_is_the_sum_of_the_adapter_values(env):
    docs = [d for d in yaml.safe_load_all(KEDA.read_text()) if d]
    (so,) = [d for d in docs if d["kind"] == "ScaledObject"]
    (cs,) = [d for d in docs if d["kind"] == "ContentServer"]
    query = so["spec"]["triggers"][0]["metadata"]["query"]
    query = query.replace(f'namespace="{cs["metadata"]["namespace"]}"', f'namespace="{NS}"')
    query = query.replace(f'contentserver="{cs["metadata"]["name"]}"', f'contentserver="{CS}"')
    (series,) = instant(env, query)
    total = float(series["value"][1])
    values = adapter_values(env)
    print("KEDA query:", total, "adapter sum:", sum(values.values()))
    assert math.isclose(total, sum(values.values()), rel_tol=1e-9)
    # The HPA's replica count from either: ceil(pods * average / target).
    threshold = float(so["spec"]["triggers"][0]["metadata"]["threshold"])
    assert threshold == TARGET
    assert math.ceil(total / threshold) == math.ceil(len(PODS) * (sum(values.values()) / len(PODS)) / TARGET)
