"""The caching node end to end: examples/edge-cache.yaml, rendered by the real operator, served
by the real content-server in front of a real origin, scraped by a real Prometheus.

- The real `content-operator` reconciles the example's ContentServer against the in-memory API
  (e2e/lib/fake_kube.py, through lib/operator_render). The example is changed only where this
  machine needs it: its origin is a loopback nginx (plain HTTP, so no CA), every cache's maxSize
  is small (so the load evicts), and its ports are free ones.
- The config.toml of the ConfigMap it applies is run as the StatefulSet's container would run it
  (the container's args): each volumeMount of the pod becomes a temporary directory (the claims,
  the purge token Secret, the ConfigMap), the pod's `*` listeners (every address) become 127.0.0.1, and
  nothing else of the rendered config changes (checked).
- The origin is Debian's nginx serving a temporary directory (lib/nginx_origin.py).
- Bounded load from Python: misses while one volume's directory is a file (answered, not
  stored: counted as store failures), misses that fill and evict, hits, a fill that others join, an entry
  revalidated with 304, one served while it revalidates in the background, origin 503s, and at
  the end the origin stopped, so expired entries are served stale and misses fail.
- The Debian `prometheus` scrapes the server every second with the target labels a Kubernetes
  scrape adds, with dashboards/alerts.yaml loaded.

Then every panel query of the caching node's rows of contentserver.json (the cache row for each
volume, the origin row) returns data, the panels show what the load did, and every alert of the
cache group has a non-empty expression and is pending or firing.
"""

import http.client
import math
import pathlib
import re
import shutil
import sys
import threading
import time
import tomllib

import pytest
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from lib import dashboards as D  # noqa: E402
from lib import nginx_origin  # noqa: E402
from lib import operator_render  # noqa: E402
from lib import stack  # noqa: E402

EXAMPLE = D.ROOT / "examples" / "edge-cache.yaml"
NAMESPACE = "media"
MAX_SIZE = "1Mi"  # the least the operator accepts: one slice (the example's sliceSize)
BODY = 8 * 1024  # with its header, three 4 KiB units: 85 entries fill 1 MiB
CHURN = 360  # distinct objects, each asked once: about 120 per volume, more than 85 fit
HOT = 30  # enough that each volume gets some of the hot set
NODIR = 30  # misses while disk1's directory is a file: about 10 of them disk1's
PURGE_TOKEN = "e2e-purge-token"
# Grafana's $__rate_interval for a 1 s scrape interval: max($__interval + 1s, 4 * 1s).
RATE_INTERVAL = "4s"


def adapted_example(origin_url, port, metrics_port):
    cs = yaml.safe_load(EXAMPLE.read_text())
    spec = cs["spec"]
    spec["origin"]["servers"] = [origin_url]
    spec["origin"].pop("ca")
    for v in spec["volumes"]:
        v["cache"]["maxSize"] = MAX_SIZE
    spec["server"]["port"] = port
    spec["metrics"]["port"] = metrics_port
    return cs


def one(objs, kind):
    (obj,) = [o for o in objs if o["kind"] == kind]
    return obj


def materialize_pod(tmp, sts, configmap, secrets):
    """The directories the kubelet would mount for the StatefulSet's pod: {mountPath: dir}, with
    the ConfigMap's and Secrets' items written as files."""
    pod = sts["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    sources = {v["name"]: v for v in pod.get("volumes", [])}
    claims = {c["metadata"]["name"] for c in sts["spec"].get("volumeClaimTemplates", [])}
    mounts = {}
    for m in container["volumeMounts"]:
        d = tmp / "pod" / m["name"]
        d.mkdir(parents=True)
        src = sources.get(m["name"])
        if src is None:
            assert m["name"] in claims, f"mount {m['name']} has no volume nor claim"
        elif "configMap" in src:
            assert src["configMap"]["name"] == configmap["metadata"]["name"], src
            items = src["configMap"].get("items") or [{"key": k, "path": k}
                                                       for k in configmap["data"]]
            for it in items:
                (d / it["path"]).write_text(configmap["data"][it["key"]])
        elif "secret" in src:
            data = secrets[src["secret"]["secretName"]]
            for it in src["secret"]["items"]:
                (d / it["path"]).write_text(data[it["key"]])
        else:
            assert "emptyDir" in src, src
        mounts[m["mountPath"]] = d
    return container, mounts


def map_paths(text, mounts):
    """Every quoted path under a mountPath, moved under its directory (in one pass: the
    directories may themselves be under a mountPath such as /tmp)."""
    alts = "|".join(re.escape(m) for m in sorted(mounts, key=len, reverse=True))
    return re.sub(r'"(' + alts + r')(?=[/"])', lambda m: '"' + str(mounts[m.group(1)]), text)


def local_config(toml_text, mounts):
    """The rendered config with the pod's mounts and listeners made local; asserts that nothing
    else changed."""
    text = map_paths(toml_text, mounts).replace('address = "*"', 'address = "127.0.0.1"')
    text = text.replace('listen = "*:', 'listen = "127.0.0.1:')

    def expect(v):
        if isinstance(v, dict):
            return {k: expect(x) for k, x in v.items()}
        if isinstance(v, list):
            return [expect(x) for x in v]
        if isinstance(v, str):
            v = map_paths(f'"{v}"', mounts)[1:-1]
            return re.sub(r"^\*(:|$)", r"127.0.0.1\1", v)
        return v

    assert tomllib.loads(text) == expect(tomllib.loads(toml_text))
    return text


class Client:
    """Requests through the cache; counts (status, X-Cache) of every answer."""

    def __init__(self, port):
        self.port = port
        self.lock = threading.Lock()
        self.seen = {}
        self.log = []  # (time, path, status, X-Cache), for the failure messages

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        try:
            c.request("GET", path)
            r = c.getresponse()
            body = r.read()
            key = (r.status, r.getheader("X-Cache", "-"))
        except (OSError, http.client.HTTPException):
            key, body = ("error", "-"), b""
        finally:
            c.close()
        with self.lock:
            self.seen[key] = self.seen.get(key, 0) + 1
            self.log.append((round(time.time(), 2), path) + key)
        return key, body

    def many(self, paths, threads=4):
        paths = list(paths)
        ts = [threading.Thread(target=lambda i=i: [self.get(p) for p in paths[i::threads]])
              for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=120)

    def count(self, status=None, xcache=None):
        return sum(n for (s, x), n in self.seen.items()
                   if (status is None or s == status) and (xcache is None or x == xcache))


def run_load(client, origin, disk1):
    # disk1's cache directory replaced by a file: its misses are answered, not stored (store
    # failures); then the node makes the directory again.
    shutil.rmtree(disk1)  # (nothing stored yet: its lock and .tmp)
    disk1.write_bytes(b"not a directory")
    client.many([f"/nodir/n{i}.bin" for i in range(NODIR)])
    disk1.unlink()
    stack.wait_until("disk1's cache directory made again", (disk1 / ".lock").exists, timeout=20)
    # Misses that fill every volume past its max_size (evictions by size).
    client.many([f"/media/obj{i}.bin" for i in range(CHURN)])
    # A hot set, asked again and again (hits).
    client.many([f"/hot/h{i}.bin" for i in range(HOT)] * 7)
    # One slow fill that the other requests join (collapsed waiters, fills in flight).
    client.many(["/slow/big.bin"] * 8, threads=8)
    # Short-lived entries: after a second, /short/ revalidates (304), /swr/ is served while a
    # background request revalidates it.
    client.many([f"/short/s{i}.bin" for i in range(3)] + [f"/swr/w{i}.bin" for i in range(3)])
    time.sleep(2.5)  # freshness counts whole seconds: max-age=1 is over within 2 s
    client.many([f"/short/s{i}.bin" for i in range(3)] + [f"/swr/w{i}.bin" for i in range(3)])
    # Origin errors: 503 passed through.
    client.many([f"/broken/b{i}" for i in range(40)])
    # The origin goes away: expired entries are served stale, misses fail.
    origin.stop()
    time.sleep(2.5)
    for _ in range(3):
        client.many([f"/short/s{i}.bin" for i in range(3)] + [f"/gone/g{i}.bin" for i in range(3)])
        time.sleep(0.5)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    stack.build_bins()
    tmp = tmp_path_factory.mktemp("cache-e2e")
    docroot = tmp / "origin"
    files = ([f"media/obj{i}.bin" for i in range(CHURN)] + [f"hot/h{i}.bin" for i in range(HOT)]
             + [f"nodir/n{i}.bin" for i in range(NODIR)]
             + [f"short/s{i}.bin" for i in range(3)] + [f"swr/w{i}.bin" for i in range(3)])
    for i, f in enumerate(files):
        (docroot / f).parent.mkdir(parents=True, exist_ok=True)
        (docroot / f).write_bytes(bytes([i % 251]) * BODY)
    (docroot / "slow").mkdir()
    (docroot / "slow" / "big.bin").write_bytes(b"b" * 128 * 1024)
    origin = nginx_origin.NginxOrigin(tmp, docroot)
    srv = prom = None
    try:
        port, metrics_port = stack.free_port(), stack.free_port()
        cs = adapted_example(origin.url, port, metrics_port)
        objs = operator_render.children(tmp, {NAMESPACE: cs})[NAMESPACE]
        name = cs["metadata"]["name"]
        configmap = one(objs, "ConfigMap")
        sts = one(objs, "StatefulSet")
        container, mounts = materialize_pod(
            tmp, sts, configmap, {cs["spec"]["purgeToken"]["secretKeyRef"]["name"]:
                                  {cs["spec"]["purgeToken"]["secretKeyRef"]["key"]: PURGE_TOKEN}})
        rendered = configmap["data"]["config.toml"]
        config_dir = mounts[next(m["mountPath"] for m in container["volumeMounts"]
                                 if m["name"] == "config")]
        local = local_config(rendered, mounts)
        (config_dir / "config.toml").write_text(local)
        (disk1,) = [pathlib.Path(v["path"]) for v in tomllib.loads(local)["volumes"]
                    if v["name"] == "disk1"]
        assert container["args"][:2] == ["serve", "--config"], container["args"]
        config = pathlib.Path(map_paths(f'"{container["args"][2]}"', mounts)[1:-1])
        assert config == config_dir / "config.toml"
        srv = stack.ConfiguredServer(tmp, config, metrics_port)
        labels = {"namespace": NAMESPACE, "contentserver": name, "pod": f"{name}-0"}
        prom = stack.Prometheus(tmp, [("content-server", f"127.0.0.1:{metrics_port}", labels)],
                                rule_files=[D.ALERTS])
        stack.wait_until("first scrape of content-server",
                         lambda: len(prom.api("query", query="up == 1")["result"]) == 1,
                         timeout=20, proc=prom.proc.p, log=prom.proc.log)
        client = Client(port)
        start = time.time()
        run_load(client, origin, disk1)
        time.sleep(4)  # the last scrapes and rule evaluations
        end = time.time()
        yield {"prom": prom, "start": start, "end": end, "client": client, "labels": labels,
               "rendered": tomllib.loads(rendered), "origin": origin.url}
    finally:
        for p in (prom, srv):
            if p is not None:
                p.stop()
        origin.stop()


def test_rendered_config_is_the_example_as_a_cache(env):
    cfg = env["rendered"]
    assert [o["servers"] for o in cfg["origins"]] == [[env["origin"]]]
    assert cfg["origins"][0]["host"] == "media.example"
    assert [v["name"] for v in cfg["volumes"]] == ["disk1", "disk2", "disk3"]
    assert all(v["cache"]["max_size"] == 1024 * 1024 for v in cfg["volumes"])
    (route,) = cfg["routes"]
    assert route["origin"] == "origin"
    assert [s["volume"] for s in route["split"]] == ["disk1", "disk2", "disk3"]
    assert route["cache"]["stale_while_revalidate_secs"] == 60


def test_load_went_through_the_cache(env):
    c = env["client"]
    print("client-side (status, X-Cache) counts:", c.seen)
    print("short-lived entries:", [e for e in c.log if e[1].startswith(("/short/", "/swr/"))])
    assert c.count(200, "MISS") >= CHURN + NODIR
    assert c.count(200, "HIT") >= HOT * 5
    assert c.count(200, "REVALIDATED") >= 3
    assert c.count(200, "UPDATING") >= 3
    assert c.count(200, "STALE") >= 3
    assert c.count(503) >= 40
    assert c.count(502) >= 3  # misses with the origin gone


def series(prom, expr, env):
    return prom.query_range(expr, env["start"], env["end"])


def peaks(result, label):
    """{label value: max over the window} of each series."""
    out = {}
    for s in result:
        vals = [float(v) for _, v in s["values"] if not math.isnan(float(v))]
        if vals:
            key = s["metric"].get(label, "")
            out[key] = max(out.get(key, 0.0), max(vals))
    return out


def test_every_cache_panel_query_returns_data(env):
    prom = env["prom"]
    dash = D.load("contentserver.json")
    values = prom.resolve_variables(dash, env["start"], env["end"])
    # Every variable at "All" (Grafana sends a multi-value as the regex `(a|b)`); the cache row
    # gets one volume each, as Grafana repeats it.
    chosen = {k: v[0] if len(v) == 1 else "(" + "|".join(v) + ")" for k, v in values.items()}
    assert values["volume"] == ["disk1", "disk2", "disk3"]
    repeated = {p["id"] for p in D.repeated_panels(dash, "volume")}
    panels = D.cache_panels(dash)
    assert len(panels) >= 11
    empty, checked = [], 0
    for panel in panels:
        for t in panel["targets"]:
            for vol in (values["volume"] if panel["id"] in repeated else [None]):
                vals = dict(chosen, **({"volume": vol} if vol else {}))
                expr = D.substitute(t["expr"], vals, rate_interval=RATE_INTERVAL)
                assert "$" not in expr, expr
                checked += 1
                if not D.has_data(series(prom, expr, env)):
                    empty.append(f"{panel['title']} [{t['refId']}] volume={vol}: {expr}")
    assert checked >= 3 * 9 + 5
    assert not empty, "cache panel queries with no data:\n" + "\n".join(empty)


def test_cache_panels_show_the_load(env):
    prom = env["prom"]
    dash = D.load("contentserver.json")

    def show(title, label, vol=None, ref="A"):
        vals = dict(env["labels"], volume=vol or "(disk1|disk2|disk3)")
        return peaks(series(prom, D.substitute(D.panel_expr(dash, title, ref), vals,
                                               rate_interval=RATE_INTERVAL), env), label)

    for vol in ("disk1", "disk2", "disk3"):
        ratio = show("Hit ratio by requests", "pod", vol)["edge-0"]
        assert 0 < ratio <= 1, (vol, ratio)
        assert 0 < show("Hit ratio by bytes", "pod", vol)["edge-0"] <= 1
        assert show("Evictions/s by reason", "reason", vol)["size"] > 0, vol
        not_stored = show("Evictions/s by reason", "reason", vol, ref="B")
        assert not_stored["error"] > 0 if vol == "disk1" else not_stored["error"] == 0, \
            (vol, not_stored)
        stored = show("Cache bytes vs max", "pod", vol)["edge-0"]
        limit = show("Cache bytes vs max", "pod", vol, ref="B")["edge-0"]
        assert limit == 1024 * 1024 and 0.95 * limit <= stored <= limit, (vol, stored, limit)
        by_source = show("Bytes served/s by source", "source", vol)
        assert by_source["cache"] > 0 and by_source["origin"] > 0, by_source
    stale = show("Stale served/s", "status")
    assert stale["stale"] > 0 and stale["updating"] > 0 and stale["revalidated"] > 0, stale
    assert show("Fills in flight and collapsed waiters/s", "pod", ref="B")["edge-0"] > 0
    outcomes = show("Origin requests/s by outcome", "code")
    assert outcomes["2xx"] > 0 and outcomes["3xx"] > 0, outcomes  # 304 revalidations
    assert outcomes["5xx"] > 0 and outcomes["error"] > 0, outcomes
    assert show("Origin egress bytes/s", "origin")["origin"] > 0
    assert show("Origin p99 latency", "origin", ref="B")["origin"] > 0


def cache_rules():
    doc = yaml.safe_load(D.ALERTS.read_text())
    (group,) = [g for g in doc["groups"] if g["name"] == D.CACHE_ALERT_GROUP]
    return group["rules"]


def test_every_cache_alert_expression_returns_data(env):
    prom = env["prom"]
    rules = cache_rules()
    assert len(rules) == 5
    empty = [r["alert"] for r in rules if not D.has_data(series(prom, r["expr"], env))]
    assert not empty, f"cache alert expressions without data: {empty}"
    loaded = [r for g in prom.api("rules")["groups"] if g["name"] == D.CACHE_ALERT_GROUP
              for r in g["rules"]]
    assert sorted(r["name"] for r in loaded) == sorted(r["alert"] for r in rules)
    for r in loaded:
        assert r["health"] == "ok", f"{r['name']}: {r.get('lastError')}"
    active = {a["labels"]["alertname"]: a for a in prom.api("alerts")["alerts"]
              if a["state"] in ("pending", "firing")}
    missing = {r["alert"] for r in rules} - set(active)
    assert not missing, f"cache alerts neither pending nor firing: {missing}; active: {active}"
    assert active["ContentServerOriginErrors"]["labels"]["origin"] == "origin"
    assert active["ContentServerCacheHitRatioCollapsed"]["labels"]["contentserver"] == "edge"
    assert active["ContentServerCacheFull"]["labels"]["pod"] == "edge-0"
    assert active["ContentServerCacheNotStoring"]["labels"]["volume"] == "disk1"
