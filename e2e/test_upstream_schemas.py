"""Everything the platform renders is valid against the real upstream schemas.

- The children the real content-operator applies for every ContentServer in examples/ (run
  against the in-memory API of e2e/lib/fake_kube.py with the optional CRDs installed, so every
  optional kind is rendered), whatever kinds they are;
- every manifest of the Helm chart, with default values and with every toggle on, and its CRDs;
- the other documents of examples/ (an HPA, ...);
- the ContentServer fields copied into an upstream object (a ServiceMonitor's interval, an
  HTTPRoute's parentRefs) take exactly the values the upstream schema takes.

Built-in kinds: `kubernetes-validate`, strict, for the Kubernetes version of the operator's
k8s-openapi feature. Gateway API and Prometheus Operator kinds: their released CRDs in the shared
schemas folder (e2e/lib/upstream_schemas.py). Each schema family is shown to reject a broken copy
of a real rendered object.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from lib import helm_native
from lib import operator_render
from lib import upstream_schemas as U

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "contentserver-operator"
ALL_ENABLED = CHART / "ci" / "all-enabled-values.yaml"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))

# Kinds in examples/ that no upstream schema in the shared folder describes (checked: they do
# raise NoSchema, so adding their CRD there makes this test validate them).
NO_UPSTREAM_SCHEMA = {("keda.sh", "ScaledObject")}


def docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def example_servers() -> dict[str, dict]:
    """{namespace-safe key: ContentServer} for every ContentServer in examples/."""
    out = {}
    for p in EXAMPLES:
        for i, d in enumerate(x for x in docs(p) if x["kind"] == "ContentServer"):
            out[f"{re.sub(r'[^a-z0-9-]', '-', p.stem)}-{i}"] = d
    return out


@pytest.fixture(scope="module")
def children(tmp_path_factory) -> dict[str, list[dict]]:
    return operator_render.children(tmp_path_factory.mktemp("children"), example_servers())


@pytest.fixture(scope="module")
def chart_manifests() -> dict[str, list[dict]]:
    helm_native.ensure()
    return {"default": helm_native.render(CHART, {}),
            "all-enabled": helm_native.render(CHART, yaml.safe_load(ALL_ENABLED.read_text()))}


def kinds(objs: list[dict]) -> set[str]:
    return {o["kind"] for o in objs}


def test_kubernetes_version_is_the_operators() -> None:
    assert re.fullmatch(r"1\.\d+", U.K8S_VERSION), U.K8S_VERSION
    assert f'"v{U.K8S_VERSION.replace(".", "_")}"' in U.OPERATOR_CARGO.read_text()
    # kubernetes-validate bundles this exact minor version (it would silently fall back to an
    # older one otherwise).
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    import kubernetes_validate
    assert kubernetes_validate.validate(cm, U.K8S_VERSION, strict=True) == U.K8S_VERSION


def test_upstream_crds_are_the_released_sets() -> None:
    crds = U.upstream_crds()
    for kind in [("gateway.networking.k8s.io", "HTTPRoute"), ("monitoring.coreos.com", "ServiceMonitor"),
                 ("monitoring.coreos.com", "PrometheusRule")]:
        assert kind in crds, sorted(crds)
    assert U.crd_release("gateway.networking.k8s.io", "HTTPRoute").startswith("gateway-api-v")
    assert U.crd_release("monitoring.coreos.com", "ServiceMonitor").startswith("prometheus-operator-v")


def test_re2_patterns_are_translated_not_skipped() -> None:
    U.upstream_crds()
    # The one pattern of the released CRDs Python's `re` rejects (an inline flag after `^`).
    assert U.TRANSLATED == {"^(?i)(abort|warn)?$"}
    t = U.translate_pattern("^(?i)(abort|warn)?$")
    assert t == "(?i)^(abort|warn)?$"
    assert re.search(t, "Warn") and re.search(t, "") and not re.search(t, "warning")
    with pytest.raises(U.UntranslatablePattern):
        U.translate_pattern(r"^\pL+$")  # RE2 Unicode class: no translation, fails loudly


@pytest.mark.parametrize("key", sorted(example_servers()))
def test_operator_children_match_upstream_schemas(children: dict, key: str) -> None:
    objs = children[key]
    assert {"ConfigMap", "Service"} <= kinds(objs), kinds(objs)
    assert kinds(objs) & {"Deployment", "StatefulSet"}, kinds(objs)
    problems = [e for o in objs for e in U.errors(o)]
    print(key, sorted((o["kind"], U.schema_of(o)) for o in objs))
    assert problems == []


def test_operator_renders_its_optional_kinds(children: dict) -> None:
    """The examples make the operator render its optional kinds too, so they are validated."""
    rendered = set().union(*(kinds(objs) for objs in children.values()))
    print("operator kinds validated:", sorted(rendered))
    assert {"ConfigMap", "Service", "Deployment", "StatefulSet", "PodDisruptionBudget",
            "ServiceMonitor", "HorizontalPodAutoscaler", "HTTPRoute", "Ingress",
            "NetworkPolicy"} <= rendered


def milli(quantity: str) -> int:
    """A Kubernetes Quantity without binary suffix, in thousandths ("700m" -> 700, "1" -> 1000)."""
    m = re.fullmatch(r"(\d+)(m?)", quantity)
    assert m, f"unexpected quantity {quantity!r}"
    return int(m.group(1)) * (1 if m.group(2) else 1000)


def test_operator_hpa_asks_for_the_adapter_metric(children: dict) -> None:
    """The HPA the operator renders for spec.autoscaling asks for exactly the custom metric the
    prometheus-adapter rule serves, per pod, with target targetPoolUtilization / 100, and scales
    the ContentServer through its scale subresource."""
    (rule,) = yaml.safe_load((ROOT / "dashboards" / "prometheus-adapter.yaml").read_text())["rules"]
    servers = example_servers()
    checked = 0
    for key, objs in children.items():
        cs = servers[key]
        auto = cs["spec"].get("autoscaling")
        hpas = [o for o in objs if o["kind"] == "HorizontalPodAutoscaler"]
        assert len(hpas) == (1 if auto else 0), (key, [h["metadata"]["name"] for h in hpas])
        if not auto:
            continue
        (hpa,) = hpas
        assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": cs["apiVersion"], "kind": "ContentServer",
                                                 "name": cs["metadata"]["name"]}
        pods = [m["pods"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
        assert [p["metric"]["name"] for p in pods] == [rule["name"]["as"]]
        assert pods[0]["target"]["type"] == "AverageValue"
        assert milli(pods[0]["target"]["averageValue"]) == auto["targetPoolUtilization"] * 10
        checked += 1
    assert checked >= 1, "no example sets spec.autoscaling"


@pytest.mark.parametrize("values", ["default", "all-enabled"])
def test_chart_manifests_match_upstream_schemas(chart_manifests: dict, values: str) -> None:
    objs = chart_manifests[values]
    assert len(objs) >= 9
    problems = [e for o in objs for e in U.errors(o)]
    print(values, sorted({(o["kind"], U.schema_of(o)) for o in objs}))
    assert problems == []


def test_chart_crds_match_the_upstream_crd_schema() -> None:
    """The chart's crds/ (installed by Helm before rendering, so not in the manifests above)."""
    crds = [d for p in sorted((CHART / "crds").glob("*.yaml")) for d in docs(p)]
    assert crds and all(d["kind"] == "CustomResourceDefinition" for d in crds)
    assert [e for d in crds for e in U.errors(d)] == []
    broken = copy.deepcopy(crds[0])
    broken["spec"]["scope"] = 7
    assert U.errors(broken)


def test_chart_with_every_toggle_renders_the_monitoring_kinds(chart_manifests: dict) -> None:
    assert {"ServiceMonitor", "PrometheusRule", "NetworkPolicy", "ConfigMap", "Deployment"} <= \
        kinds(chart_manifests["all-enabled"])


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_documents_match_upstream_schemas(path: Path) -> None:
    """The documents of examples/ besides ContentServers (validated against our CRD in
    test_packaging.py)."""
    for d in docs(path):
        if d["kind"] == "ContentServer":
            continue
        group = d["apiVersion"].rpartition("/")[0]
        if (group, d["kind"]) in NO_UPSTREAM_SCHEMA:
            with pytest.raises(U.NoSchema):
                U.errors(d)
            continue
        assert U.errors(d) == [], path.name


# ---------------------------------------------------------------------------------------------
# Broken copies of real rendered objects are rejected.

def set_path(obj: dict, path: str, value) -> dict:
    """A copy of obj with `a.b.0.c` set to value."""
    out = copy.deepcopy(obj)
    cur = out
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]
    for k in keys[:-1]:
        cur = cur[k]
    cur[keys[-1]] = value
    return out


# (kind, path, broken value, words the error must contain)
BROKEN = [
    ("Deployment", "spec.template.spec.containers.0.imagePullPolicyy", "Always", "imagePullPolicyy"),
    ("StatefulSet", "spec.replicas", "three", "three"),
    ("Service", "spec.ports.0.port", "http", "http"),
    ("ConfigMap", "data", {"config.toml": 42}, "42"),
    ("PodDisruptionBudget", "spec.selector.matchLabelz", {}, "matchLabelz"),
    ("ServiceMonitor", "spec.endpoints.0.scheme", "ftp", "ftp"),
    ("ServiceMonitor", "metadata.labelz", {}, "labelz"),
    ("PrometheusRule", "spec.groups.0.rules.0.for", "five minutes", "five minutes"),
    ("NetworkPolicy", "spec.podSelector", "all", "all"),
    ("HorizontalPodAutoscaler", "spec.maxReplicas", "ten", "ten"),
    ("HorizontalPodAutoscaler", "spec.metrics.0.pods", {"metric": {"name": "x"}}, "target"),
    ("Ingress", "spec.rules.0.http.paths.0.pathType", 5, "5"),
    ("Ingress", "spec.tls.0.secretname", "downloads-tls", "secretname"),
]

BROKEN_HTTPROUTE = [
    ("spec.hostnames.0", "Media_Example", "does not match"),  # RE2 pattern of the CRD
    ("spec.rules.0.matches.0.path.value", "media", "absolute path"),  # CEL rule of the CRD
    ("spec.parentRefs.0.nam", "gateway", "nam"),  # unknown field
]


def first_of(kind: str, children: dict, chart_manifests: dict) -> dict:
    pool = [o for objs in children.values() for o in objs]
    pool += chart_manifests["all-enabled"]
    pool += [d for p in EXAMPLES for d in docs(p)]
    found = [o for o in pool if o["kind"] == kind]
    assert found, f"nothing rendered of kind {kind}"
    return found[0]


@pytest.mark.parametrize("kind,path,value,words", BROKEN, ids=[f"{b[0]}-{b[1]}" for b in BROKEN])
def test_a_broken_copy_is_rejected(children: dict, chart_manifests: dict, kind: str, path: str,
                                   value, words: str) -> None:
    good = first_of(kind, children, chart_manifests)
    assert U.errors(good) == []
    problems = U.errors(set_path(good, path, value))
    assert problems, f"broken {kind} ({path} = {value!r}) was accepted"
    assert any(words in p for p in problems), problems


@pytest.mark.parametrize("path,value,words", BROKEN_HTTPROUTE, ids=[b[0] for b in BROKEN_HTTPROUTE])
def test_a_broken_httproute_is_rejected(children: dict, path: str, value, words: str) -> None:
    good = first_of("HTTPRoute", children, {"all-enabled": []})
    assert U.errors(good) == []
    problems = U.errors(set_path(good, path, value))
    assert any(words in p for p in problems), problems


# parentRefs lists and whether the Gateway API refuses them (two references to one Gateway must
# each name a different listener; `port` does not count; another namespace is another Gateway).
PARENT_REFS = [
    ([{"name": "gw"}, {"name": "gw"}], True),
    ([{"name": "gw"}, {"name": "gw", "sectionName": "https"}], True),
    ([{"name": "gw", "sectionName": "a", "port": 443},
      {"name": "gw", "sectionName": "a", "port": 8443}], True),
    ([{"name": "gw", "port": 443}, {"name": "gw", "port": 8443}], True),
    ([{"name": "gw", "namespace": "n", "sectionName": "a"}, {"name": "gw", "namespace": "n"}], True),
    ([{"name": "gw", "sectionName": "a"}, {"name": "gw", "sectionName": "b"}], False),
    ([{"name": "gw", "sectionName": "a", "port": 443},
      {"name": "gw", "sectionName": "b", "port": 443}], False),
    ([{"name": "gw"}, {"name": "other"}], False),
    ([{"name": "gw", "namespace": "a"}, {"name": "gw", "namespace": "b"}], False),
    ([{"name": "gw"}, {"name": "gw", "namespace": "n"}], False),
]


def _parent_ref_messages(errors: list[str]) -> set[str]:
    return {m for m in ("sectionName must be specified", "sectionName must be unique")
            if any(m in e for e in errors)}


@pytest.mark.parametrize("refs,refused", PARENT_REFS, ids=[str(i) for i in range(len(PARENT_REFS))])
def test_parent_refs_are_refused_as_the_gateway_api_refuses_them(children: dict, refs: list,
                                                                 refused: bool) -> None:
    """Our CRD refuses the parentRefs the released HTTPRoute CRD refuses, with its messages, and
    takes the others: the ContentServer is refused at admission instead of its HTTPRoute at
    apply time."""
    from lib import crd_schema
    crd = yaml.safe_load((ROOT / "crds" / "contentservers.contentserver.dev.yaml").read_text())
    (cs,) = [copy.deepcopy(d) for d in docs(ROOT / "examples" / "exposed.yaml")
             if d["kind"] == "ContentServer"]
    cs["spec"]["expose"]["httpRoute"]["parentRefs"] = refs
    ours = _parent_ref_messages(crd_schema.errors(crd, cs))
    route = set_path(first_of("HTTPRoute", children, {"all-enabled": []}), "spec.parentRefs", refs)
    theirs = _parent_ref_messages(U.errors(route))
    assert bool(theirs) == refused, U.errors(route)
    assert ours == theirs


def test_a_kind_without_schema_is_an_error_not_a_pass() -> None:
    with pytest.raises(U.NoSchema):
        U.errors({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})


def _storage_schema(crd: dict) -> dict:
    (v,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    return v["schema"]["openAPIV3Schema"]


# Fields of a ContentServer copied as they are into an upstream object: (path in our spec,
# (group, kind), path in that kind's schema). Each must be as strict as the field it lands in,
# else the CRD takes a value that the apply of the child is refused with, forever.
PASSED_THROUGH = [
    (["metrics", "serviceMonitor", "interval"], ("monitoring.coreos.com", "ServiceMonitor"),
     ["spec", "endpoints", "items", "interval"]),
    (["expose", "httpRoute", "parentRefs", "items", "namespace"],
     ("gateway.networking.k8s.io", "HTTPRoute"), ["spec", "parentRefs", "items", "namespace"]),
    (["expose", "httpRoute", "parentRefs", "items", "sectionName"],
     ("gateway.networking.k8s.io", "HTTPRoute"), ["spec", "parentRefs", "items", "sectionName"]),
]


def _field(schema: dict, path: list[str]) -> dict:
    for p in path:
        schema = schema["items"] if p == "items" else schema["properties"][p]
    return schema


@pytest.mark.parametrize("ours,kind,theirs", PASSED_THROUGH, ids=lambda x: ".".join(x) if isinstance(x, list) else None)
def test_fields_passed_to_upstream_objects_are_as_strict_as_theirs(ours, kind, theirs) -> None:
    crd = yaml.safe_load((ROOT / "crds" / "contentservers.contentserver.dev.yaml").read_text())
    mine = _field(_storage_schema(crd)["properties"]["spec"], ours)
    upstream = _field(_storage_schema(U.upstream_crds()[kind]), theirs)
    assert "pattern" in mine, f"spec.{'.'.join(ours)} has no pattern; upstream: {upstream.get('pattern')}"
    samples = ["30s", "1m", "1min", "1h30m", "0", "5ms", "30s1m", "5m1h", "1s1s", "abc", "infra",
               "Infra_GW", "a-b", "-a",
               "https", "HTTPS_Listener", "a.b", "a..b", "x" * 64]
    for s in samples:
        ok_mine = re.search(U.translate_pattern(mine["pattern"]), s) is not None \
            and len(s) <= mine.get("maxLength", 10**9)
        ok_theirs = re.search(upstream["pattern"], s) is not None \
            and len(s) <= upstream.get("maxLength", 10**9)
        assert ok_mine == ok_theirs, (s, mine["pattern"], upstream["pattern"])


# Chart values copied as they are into the chart's ServiceMonitor: (path in values.schema.json,
# path in the ServiceMonitor's schema). Helm checks values against the chart's schema before it
# renders; a value it takes that the CRD refuses fails the install half-way.
CHART_PASSED_THROUGH = [
    (["serviceMonitor", "interval"], ["spec", "endpoints", "items", "interval"]),
    (["serviceMonitor", "scrapeTimeout"], ["spec", "endpoints", "items", "scrapeTimeout"]),
]


@pytest.mark.parametrize("ours,theirs", CHART_PASSED_THROUGH, ids=lambda x: ".".join(x))
def test_chart_values_passed_to_upstream_objects_are_as_strict_as_theirs(ours, theirs) -> None:
    import json
    values = json.loads((CHART / "values.schema.json").read_text())
    mine = _field(values, ours)
    upstream = _field(_storage_schema(U.upstream_crds()[("monitoring.coreos.com", "ServiceMonitor")]),
                      theirs)
    for s in ["30s", "1m", "1min", "1h30m", "0", "5ms", "30s1m", "5m1h", "1s1s", "10s5s", "1d", "abc", ""]:
        ok_mine = re.search(mine["pattern"], s) is not None
        ok_theirs = re.search(upstream["pattern"], s) is not None
        assert ok_mine == ok_theirs, (s, mine["pattern"], upstream["pattern"])


def test_chart_kube_version_is_the_operators() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == f">={U.K8S_VERSION}.0-0", chart["kubeVersion"]
